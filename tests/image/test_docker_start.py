"""ci/install-docker.sh starting a daemon while its caller reads the script's output to EOF.

On a fresh machine (Docker not running) `make demo` piped ci/build-images.sh into `grep`; the
shell that started dockerd in the background kept copies of the pipe's write end (bash's saved
stdout and stderr around a redirected function call, fds 10 and 11) for the daemon's whole
life, so `grep` never saw end of file and the demo hung after building its images. Warm
machines never showed it: dockerd already ran.

The test starts a second, real dockerd of its own (its own socket, state and exec root) exactly
as a fresh machine would: through the script, with the caller reading its output through a
pipe. It runs in a network namespace of its own: a daemon started with `--bridge=none` deletes
the host's `docker0` (moby removes the default bridge interface when the bridge is disabled),
which the machine's daemon needs for every `docker run`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_testlib import REPO

SCRIPT = REPO / "ci" / "install-docker.sh"
PIPE_EOF_SECONDS = 120  # the daemon answers in seconds; a hang never ends


@pytest.fixture
def own_daemon() -> Iterator[tuple[Path, dict[str, str]]]:
    """A state dir and the environment that makes the script start a daemon there."""
    # A short path: the socket's path must fit a sockaddr_un (108 bytes).
    root = Path(f"/tmp/hermes-dockerd-{os.getpid()}")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{root}/docker.sock",
        "HERMES_DOCKER_STATE_DIR": str(root / "state"),
        "HERMES_DOCKER_LOG": str(root / "dockerd.log"),
        "HERMES_DOCKERD_ARGS": "--bridge=none --iptables=false --ip6tables=false",
    }
    try:
        yield root, env
    finally:
        _stop_daemon(root / "state" / "dockerd.pid")
        subprocess.run(["umount", "-R", str(root / "state")], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _stop_daemon(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


def test_a_caller_reading_the_scripts_output_sees_end_of_file_once_the_daemon_is_up(
    own_daemon: tuple[Path, dict[str, str]],
) -> None:
    root, env = own_daemon
    host_bridge = Path("/sys/class/net/docker0").exists()
    # What ci/demo.sh does: the script's stdout and stderr into a pipe, read to end of file.
    reader = subprocess.Popen(
        ["unshare", "--net", "bash", "-c", f"{SCRIPT} 2>&1 | cat"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the pipeline's own group, to end it if it hangs
    )
    try:
        output, _ = reader.communicate(timeout=PIPE_EOF_SECONDS)
    except subprocess.TimeoutExpired:
        # `cat` still waits for end of file: end the pipeline, not the daemon's session.
        os.killpg(reader.pid, signal.SIGKILL)
        reader.wait()
        log = (root / "dockerd.log").read_text(errors="replace")[-2000:]
        pytest.fail(
            f"the pipe never reached end of file within {PIPE_EOF_SECONDS} s: a process "
            f"started by ci/install-docker.sh keeps it open.\nlog:\n{log}"
        )
    assert reader.returncode == 0, output
    assert "dockerd is up" in output, output
    info = subprocess.run(
        ["docker", "info", "--format", "{{.DockerRootDir}}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert info.stdout.strip() == str(root / "state"), info.stderr
    if host_bridge:  # the machine's daemon keeps its bridge
        assert Path("/sys/class/net/docker0").exists(), "the test's daemon deleted docker0"
