"""The tier's containers (support.containers): cleaned up without Ryuk, run as charts run them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import docker
import docker.errors
import pytest
from fakes.fixtures import FakeLLM
from support.containers import OWNER_LABEL, image_ref, remove_orphans


@pytest.fixture
def client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


def dead_pid() -> int:
    """The PID of a process that has exited (and was reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def exists(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def test_containers_of_a_killed_run_are_removed_and_a_live_runs_are_kept(
    client: docker.DockerClient,
) -> None:
    image = image_ref("fake-llm")
    orphan = client.containers.create(image, labels={OWNER_LABEL: str(dead_pid())})
    alive = client.containers.create(image, labels={OWNER_LABEL: str(os.getppid())})
    try:
        removed = remove_orphans.__wrapped__()  # the cached call already ran for this session
        assert removed >= 1
        assert not exists(client, orphan.id)
        assert exists(client, alive.id), "a running test process's container was removed"
    finally:
        for container in (orphan, alive):
            if exists(client, container.id):
                container.remove(force=True)


def test_servers_run_unprivileged_on_the_host_network(
    client: docker.DockerClient, fake_llm: FakeLLM
) -> None:
    """As the chart's pods run under Pod Security "restricted": no capabilities, non-root."""
    [container] = client.containers.list(
        filters={"label": f"{OWNER_LABEL}={os.getpid()}", "ancestor": image_ref("fake-llm")}
    )
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "host"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True
    assert container.exec_run(["id", "-u"]).output.decode().strip() == "10001"
    assert fake_llm.requests() == []  # reset for this test, and answering
