"""The Pod Security checker itself must catch each restricted rule it claims to check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pss import restricted_violations


def compliant_pod() -> dict[str, Any]:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [{"name": "init", "securityContext": _good_context()}],
        "containers": [{"name": "main", "securityContext": _good_context()}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}],
    }


def _good_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["containers"][0]["securityContext"]


def _init(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["initContainers"][0]["securityContext"]


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "host network": (lambda p: p.update(hostNetwork=True), "hostNetwork"),
    "host pid": (lambda p: p.update(hostPID=True), "hostPID"),
    "host ipc": (lambda p: p.update(hostIPC=True), "hostIPC"),
    "hostPath volume": (
        lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "hostPath",
    ),
    "host port": (
        lambda p: p["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
        "hostPort",
    ),
    "privileged": (lambda p: _main(p).update(privileged=True), "privileged"),
    "privilege escalation unset": (
        lambda p: _init(p).pop("allowPrivilegeEscalation"),
        "initContainers[init]: allowPrivilegeEscalation",
    ),
    "capabilities not dropped": (
        lambda p: _main(p).update(capabilities={}),
        "capabilities.drop",
    ),
    "capability added": (
        lambda p: _main(p)["capabilities"].update(add=["NET_ADMIN"]),
        "NET_ADMIN",
    ),
    "root allowed by container": (
        lambda p: _main(p).update(runAsNonRoot=False),
        "runAsNonRoot",
    ),
    "root allowed by pod": (
        lambda p: p["securityContext"].pop("runAsNonRoot"),
        "runAsNonRoot",
    ),
    "uid 0": (lambda p: _main(p).update(runAsUser=0), "runAsUser"),
    "seccomp missing": (
        lambda p: p["securityContext"].pop("seccompProfile"),
        "seccompProfile",
    ),
    "seccomp unconfined": (
        lambda p: _init(p).update(seccompProfile={"type": "Unconfined"}),
        "seccompProfile",
    ),
    "unsafe sysctl": (
        lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        "kernel.msgmax",
    ),
    "selinux user": (
        lambda p: _main(p).update(seLinuxOptions={"user": "system_u"}),
        "seLinuxOptions.user",
    ),
    "proc mount": (lambda p: _main(p).update(procMount="Unmasked"), "procMount"),
    "apparmor unconfined": (
        lambda p: _main(p).update(appArmorProfile={"type": "Unconfined"}),
        "appArmorProfile",
    ),
}


def test_compliant_pod_passes() -> None:
    assert restricted_violations(compliant_pod()) == []


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_checker_catches(case: str) -> None:
    mutate, expected = MUTATIONS[case]
    pod = copy.deepcopy(compliant_pod())
    mutate(pod)
    problems = restricted_violations(pod)
    assert any(expected in problem for problem in problems), problems


def test_checker_catches_apparmor_annotation() -> None:
    annotations = {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
    assert restricted_violations(compliant_pod(), annotations)


def test_net_bind_service_is_the_one_allowed_addition() -> None:
    pod = compliant_pod()
    _main(pod)["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert restricted_violations(pod) == []
