"""The integration tier's servers as containers, from the images ``ci/build-images.sh`` builds.

Why containers: the e2e tier installs these same images (``hermes-runtime/<name>:dev``) on
Kubernetes, so the integration tier tests the very build the cluster runs, started through
testcontainers and awaited with its wait strategies. ``make integration`` builds them first
(``NO_PUSH=1 ci/build-images.sh seaweedfs openbao git-server fake-llm``); a missing image
fails at once, naming that command, rather than being pulled (no registry is reachable).

Why the host's network: each server listens on a loopback port chosen free, where its host
process used to listen. So a server killed and started again keeps its address (the outage
tests), OpenBao reaches a ``redis-server`` on the host's loopback (its database engine), and
no userland port proxy sits between a benchmark and its server. Inside, the containers run as
the images' non-root users with every capability dropped and no new privileges, as the
chart's pods do under Pod Security "restricted".

Cleanup: Ryuk, testcontainers' reaper, is an image from Docker Hub, which these machines
cannot pull, so it is turned off. Instead every container carries :data:`OWNER_LABEL` (the
PID of the test process): fixtures remove their containers at teardown, and the first start
of a run removes those whose owner is gone (a run killed before its teardown). Containers of
another test run still alive on the machine are left alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence

import docker
import docker.errors
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.waiting_utils import WaitStrategy

# What ci/build-images.sh tags them with (tests/e2e/images.py pushes the same builds).
SERVERS = ("seaweedfs", "openbao", "git-server", "fake-llm")
IMAGES = {name: f"hermes-runtime/{name}:dev" for name in SERVERS}
BUILD_COMMAND = "NO_PUSH=1 ci/build-images.sh " + " ".join(IMAGES)
OWNER_LABEL = "hermes-runtime.test-owner-pid"
STARTUP_TIMEOUT_SECONDS = 60
POLL_SECONDS = 0.1


class HostNetworkContainer(DockerContainer):
    """A container in the host's network namespace: its ports are the host's own.

    testcontainers' wait strategies ask for a mapped port; on the host network there is no
    mapping, the port the server binds on loopback is the one to probe.
    """

    def get_container_host_ip(self) -> str:
        return "127.0.0.1"

    def get_exposed_port(self, port: int) -> int:
        return port


def image_ref(name: str) -> str:
    """The local tag of image ``name``; fails naming the build command when it is absent."""
    ref = IMAGES[name]
    client = docker.from_env()
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise RuntimeError(
            f"image {ref} is not in Docker: build it with `{BUILD_COMMAND}` "
            "(`make integration` does)"
        ) from None
    except docker.errors.DockerException as exc:
        raise RuntimeError(f"Docker does not answer ({exc}): run ci/install-docker.sh") from exc
    finally:
        client.close()
    return ref


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache  # once per test process: later starts find nothing new to remove
def remove_orphans() -> int:
    """Remove the containers of earlier test runs whose process is gone; how many."""
    client = docker.from_env()
    removed = 0
    try:
        for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            owner = container.labels.get(OWNER_LABEL, "")
            if owner.isdigit() and not _owner_alive(int(owner)):
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
                removed += 1
    finally:
        client.close()
    return removed


def start_server(
    name: str,
    command: Sequence[str],
    ready: WaitStrategy,
    env: dict[str, str] | None = None,
    read_only_mounts: Sequence[tuple[str, str]] = (),
    read_only: bool = True,
    files: dict[str, bytes] | None = None,
    entrypoint: str | None = None,
) -> HostNetworkContainer:
    """Start image ``name`` with ``command`` on the host network; return once ``ready`` holds.

    ``env`` carries secrets (never ``command``: a container's arguments show in ``ps``).
    ``read_only_mounts`` are (host path, container path) bind mounts. ``read_only`` keeps the
    root filesystem read-only, with a tmpfs on /tmp, as the e2e charts run these images.
    ``files`` (container path: content) are copied in before the server starts, mode 0644,
    the way a chart mounts a ConfigMap or Secret (copying needs a writable root filesystem).
    ``entrypoint`` replaces the image's, as a chart's ``command:`` does.
    """
    testcontainers_config.ryuk_disabled = True  # its image cannot be pulled (module docstring)
    remove_orphans()
    container = HostNetworkContainer(
        image_ref(name),
        env=dict(env or {}),
        network_mode="host",
        labels={OWNER_LABEL: str(os.getpid())},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=read_only,
        **({"entrypoint": entrypoint} if entrypoint else {}),
    )
    container.with_command(list(command)).with_tmpfs_mount("/tmp")
    for host_path, container_path in read_only_mounts:
        container.with_volume_mapping(host_path, container_path, "ro")
    for container_path, content in (files or {}).items():
        container.with_copy_into_container(content, container_path)
    container.waiting_for(
        ready.with_startup_timeout(STARTUP_TIMEOUT_SECONDS).with_poll_interval(POLL_SECONDS)
    )
    try:
        container.start()
    except BaseException:
        remove(container)
        raise
    return container


def remove(container: DockerContainer) -> None:
    """Remove ``container`` and its anonymous volumes; a second call is a no-op."""
    with contextlib.suppress(docker.errors.NotFound):
        container.stop()


@contextlib.contextmanager
def running(container: HostNetworkContainer) -> Iterator[HostNetworkContainer]:
    """Yield a started container and remove it afterwards, whatever happened."""
    try:
        yield container
    finally:
        remove(container)


def logs(container: DockerContainer, tail: int = 3000) -> str:
    """The last ``tail`` characters of the container's stdout and stderr, for a failure."""
    stdout, stderr = container.get_logs()
    return (stdout + stderr).decode(errors="replace")[-tail:]
