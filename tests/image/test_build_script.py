"""ci/build-images.sh as `make test` calls it: once per tier, one after another.

The first call on a fresh machine starts dockerd. A daemon that inherited the script's lock
descriptor held the build lock for its whole life, and every later build waited on it forever
(the image tier timed out in CI).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from image_testlib import REPO

LOCK = REPO / ".cache" / "images" / "build.lock"


def _pids_named(*names: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in names:
            pids.append(int(entry.name))
    return pids


def _open_files(pid: int) -> set[str]:
    targets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.add(os.readlink(fd))
        except OSError:
            continue
    return targets


def test_the_docker_daemon_keeps_no_descriptor_of_the_build_lock(
    aux_images: dict[str, str],
) -> None:
    daemons = _pids_named("dockerd", "containerd")
    assert daemons, "no dockerd running after ci/build-images.sh (it starts one)"
    lock = str(LOCK.resolve())
    holders = [pid for pid in daemons if lock in _open_files(pid)]
    assert not holders, f"daemon PIDs {holders} hold {lock}: later builds would wait forever"


def test_the_docker_daemon_does_not_keep_its_callers_tmpdir(aux_images: dict[str, str]) -> None:
    """A daemon started from a test inherited that test's TMPDIR; once pytest removed it,
    every `docker exec` failed ("OCI runtime exec failed: open <TMPDIR>/runc-process...")."""
    daemons = _pids_named("dockerd")
    assert daemons, "no dockerd running after ci/build-images.sh (it starts one)"
    for pid in daemons:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        tmpdirs = [v for v in environ if v.startswith(b"TMPDIR=")]
        assert not tmpdirs, f"dockerd {pid} runs with {tmpdirs[0].decode()}"


def test_a_second_build_gets_the_lock(aux_images: dict[str, str]) -> None:
    """Within a minute: a daemon holding the lock would make it give up (exit 1). It may wait
    a moment for another test's build (the tier's workers build their fixtures side by side);
    which processes hold the lock is the test above's."""
    result = subprocess.run(
        [str(REPO / "ci" / "build-images.sh"), "busybox"],
        env={**os.environ, "NO_PUSH": "1", "BUILD_LOCK_WAIT_SECONDS": "60"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gave up after" not in result.stderr, result.stderr
