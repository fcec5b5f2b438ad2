"""Pod Security Standards "restricted" checker for a pod spec (policy version latest).

Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/:
every baseline control plus the restricted ones. It returns human-readable
violations so a failing test says which container broke which rule. Pod
annotations (AppArmor) are passed separately because they live in metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ALLOWED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
SECCOMP_OK = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_OK_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    found = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod.get(field) or []:
            found.append((f"{field}[{container.get('name')}]", container))
    return found


def _host_namespaces(pod: Mapping[str, Any]) -> list[str]:
    return [
        f"spec.{field} must be unset or false"
        for field in ("hostNetwork", "hostPID", "hostIPC")
        if pod.get(field)
    ]


def _volumes(pod: Mapping[str, Any]) -> list[str]:
    problems = []
    for volume in pod.get("volumes") or []:
        sources = set(volume) - {"name"}
        bad = sources - ALLOWED_VOLUME_SOURCES
        if bad:
            problems.append(f"volume {volume.get('name')}: type {sorted(bad)} is not allowed")
    return problems


def _sysctls(pod: Mapping[str, Any]) -> list[str]:
    sysctls = (pod.get("securityContext") or {}).get("sysctls") or []
    return [
        f"sysctl {s.get('name')} is not safe" for s in sysctls if s.get("name") not in SAFE_SYSCTLS
    ]


def _selinux(where: str, context: Mapping[str, Any]) -> list[str]:
    options = context.get("seLinuxOptions") or {}
    problems = []
    if options.get("type", "") not in SELINUX_TYPES:
        problems.append(f"{where}: seLinuxOptions.type {options['type']!r} is not allowed")
    for field in ("user", "role"):
        if options.get(field):
            problems.append(f"{where}: seLinuxOptions.{field} must be unset")
    return problems


def _apparmor(where: str, context: Mapping[str, Any]) -> list[str]:
    profile = context.get("appArmorProfile")
    if profile and profile.get("type") not in APPARMOR_OK_TYPES:
        return [f"{where}: appArmorProfile.type {profile.get('type')!r} is not allowed"]
    return []


def _apparmor_annotations(annotations: Mapping[str, str]) -> list[str]:
    return [
        f"annotation {key}={value!r} is not allowed"
        for key, value in annotations.items()
        if key.startswith(APPARMOR_PREFIX)
        and value != "runtime/default"
        and not value.startswith("localhost/")
    ]


def _seccomp_type(context: Mapping[str, Any]) -> str | None:
    profile = context.get("seccompProfile")
    return profile.get("type") if profile else None


def _container_rules(
    where: str, container: Mapping[str, Any], pod_context: Mapping[str, Any]
) -> list[str]:
    context = container.get("securityContext") or {}
    problems = []
    if context.get("privileged"):
        problems.append(f"{where}: privileged must be unset or false")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: allowPrivilegeEscalation must be false")
    for port in container.get("ports") or []:
        if port.get("hostPort"):
            problems.append(f"{where}: hostPort {port['hostPort']} is not allowed")
    if context.get("procMount", "Default") != "Default":
        problems.append(f"{where}: procMount must be Default")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        problems.append(f"{where}: capabilities.drop must include ALL")
    for added in capabilities.get("add") or []:
        if added != "NET_BIND_SERVICE":
            problems.append(f"{where}: capability {added} may not be added")
    run_as_non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
    if run_as_non_root is not True:
        problems.append(f"{where}: runAsNonRoot must be true (container or pod)")
    if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
        problems.append(f"{where}: runAsUser must not be 0")
    seccomp = _seccomp_type(context) or _seccomp_type(pod_context)
    if seccomp not in SECCOMP_OK:
        problems.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost")
    problems += _selinux(where, context)
    problems += _apparmor(where, context)
    return problems


def restricted_violations(
    pod: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> list[str]:
    """All the ways ``pod`` breaks Pod Security "restricted"; empty when it passes."""
    pod_context = pod.get("securityContext") or {}
    problems = _host_namespaces(pod) + _volumes(pod) + _sysctls(pod)
    problems += _selinux("pod", pod_context) + _apparmor("pod", pod_context)
    problems += _apparmor_annotations(annotations or {})
    if pod_context.get("runAsUser") == 0:
        problems.append("pod: runAsUser must not be 0")
    if _seccomp_type(pod_context) not in (None, *SECCOMP_OK):
        problems.append("pod: seccompProfile.type must be RuntimeDefault or Localhost")
    for where, container in _containers(pod):
        problems += _container_rules(where, container, pod_context)
    return problems
