"""One ``pip install`` of a plugin's checked requirements, and why it failed, in words.

pip runs as this interpreter's ``python -m pip`` (the image's Python, so the wheels chosen fit
the gateway that imports them) with nothing of the environment: ``--isolated`` and
``PIP_CONFIG_FILE=/dev/null`` (no pip configuration or ``PIP_*`` variable can add an index), a
``HOME`` of its own (no ``.netrc`` credentials), no proxy variables. What it installs is fixed
by its arguments: ``--require-hashes`` (every file, transitive dependencies too, must match a
hash of the file; a dependency not pinned there is refused, which is why ``--no-deps`` is not
used: it would skip a missing dependency silently and the plugin would fail at import),
``--only-binary :all:`` (a source distribution would run its build code here), and the one
index the operator named. An ``http://`` index is given to ``--trusted-host``: the hashes, not
TLS, are what make a file the one the plugin pinned. An index behind a private CA is checked
against that CA's file (``--cert``), the one file the operator gave, not the system's store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from hermes_runtime.plugins.indexcheck import shown_url, why_not_installable
from hermes_runtime.plugins.indexsource import IndexSource
from hermes_runtime.plugins.requirements import PinnedRequirement

TLS_UNTRUSTED = "CERTIFICATE_VERIFY_FAILED"  # OpenSSL's words, in pip's retry warnings
PIP_TIMEOUT_SECONDS = 900.0  # a large closure of wheels over a slow index, then given up
ERROR_TAIL_LINES = 6


@dataclass(frozen=True)
class PipFailure:
    """What failed: the package pip named (when it named one) and the reason."""

    package: str | None
    reason: str


def pip_command(
    python: str, index: IndexSource, target: Path, requirements_file: Path
) -> list[str]:
    command = [
        python,
        "-m",
        "pip",
        "install",
        "--isolated",
        "--no-input",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "--progress-bar",
        "off",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "--index-url",
        index.url,
        "--target",
        str(target),
        "-r",
        str(requirements_file),
    ]
    parts = urlsplit(index.url)
    if parts.scheme == "http" and parts.hostname:
        command[4:4] = ["--trusted-host", parts.hostname]
    if index.ca_file is not None:
        command[4:4] = ["--cert", str(index.ca_file)]
    return command


def run_pip(
    python: str,
    index: IndexSource,
    target: Path,
    requirements_file: Path,
    requirements: list[PinnedRequirement],
) -> PipFailure | None:
    """Install into ``target`` from ``index``; ``None`` on success, else the failure in
    words."""
    with tempfile.TemporaryDirectory(prefix="pip-home-") as home:
        env = {"HOME": home, "PIP_CONFIG_FILE": os.devnull, "PYTHONNOUSERSITE": "1"}
        try:
            result = subprocess.run(
                pip_command(python, index, target, requirements_file),
                capture_output=True,
                text=True,
                env=env,
                timeout=PIP_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return PipFailure(None, f"pip did not finish within {PIP_TIMEOUT_SECONDS:g} s")
        except OSError as exc:
            return PipFailure(None, f"cannot run {python} -m pip: {exc}")
    if result.returncode == 0:
        return None
    return explain(result.stderr, index, requirements)


def explain(stderr: str, index: IndexSource, requirements: list[PinnedRequirement]) -> PipFailure:
    """pip's error as (package, reason): a missing distribution is looked up on the index
    (not there, not that version, or no wheel for this platform); a hash error names the
    package pip printed; anything else is pip's last error lines."""
    lines = stderr.splitlines()
    if any(TLS_UNTRUSTED in line for line in lines):
        return PipFailure(
            None,
            f"the index {shown_url(index.url)} presented a TLS certificate no CA here vouches "
            f"for ({TLS_UNTRUSTED}): give its CA bundle with --index-ca "
            "(the chart's pluginPackages.caSecret)",
        )
    for line in lines:
        if "No matching distribution found for " in line:
            wanted = line.split("No matching distribution found for ", 1)[1].strip()
            return _missing(wanted, index, requirements)
    hash_failure = _hash_failure(lines)
    if hash_failure is not None:
        return hash_failure
    errors = [line.strip() for line in lines if line.strip()]
    return PipFailure(None, "pip: " + " | ".join(errors[-ERROR_TAIL_LINES:]))


def _missing(wanted: str, index: IndexSource, requirements: list[PinnedRequirement]) -> PipFailure:
    name = _name_of(wanted) or wanted
    pinned = next((r for r in requirements if r.name == name), None)
    version = pinned.version if pinned is not None else _version_of(wanted)
    reason = why_not_installable(index, name, version)
    return PipFailure(name, reason or f"pip found no installable file for {wanted}")


HASH_MARKERS = (
    ("Hashes are required in --require-hashes mode", "not pinned with a --hash in the file"),
    ("all requirements must have their versions pinned", "not pinned with '==' in the file"),
    ("DO NOT MATCH THE HASHES", "the index's file does not match any --hash in the file"),
)


def _hash_failure(lines: list[str]) -> PipFailure | None:
    """pip lists each offending requirement indented under its message; name the first."""
    for index, line in enumerate(lines):
        for marker, reason in HASH_MARKERS:
            if marker not in line:
                continue
            for following in lines[index + 1 :]:
                if following.startswith("    ") and following.strip():
                    name = _name_of(following.strip().split(" ")[0])
                    if name is not None:
                        return PipFailure(name, f"{reason} (pip: {_first_sentence(line)})")
            return PipFailure(None, f"{reason} (pip: {_first_sentence(line)})")
    return None


def _first_sentence(line: str) -> str:
    return line.strip().split(". ", 1)[0]


def _name_of(text: str) -> str | None:
    try:
        return canonicalize_name(Requirement(text.rstrip(":")).name)
    except InvalidRequirement:
        return None


def _version_of(text: str) -> str | None:
    try:
        specifiers = list(Requirement(text).specifier)
    except InvalidRequirement:
        return None
    return specifiers[0].version if len(specifiers) == 1 else None


def default_python() -> str:
    """The interpreter whose pip installs: this one, the image's (the gateway's own)."""
    return sys.executable
