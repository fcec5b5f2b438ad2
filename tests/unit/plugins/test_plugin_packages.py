"""Where plugin packages live, how pip is called, how its failures are told, and the
``sys.path`` rule: appended after everything, only for our links, by plugin name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_runtime.plugins.deps import (
    FAILED,
    InstallState,
    PackagesProblem,
    check_packages,
    digest_of,
    read_requirements,
    target_dir,
    write_state,
)
from hermes_runtime.plugins.indexsource import IndexSource
from hermes_runtime.plugins.piprun import explain, pip_command
from hermes_runtime.plugins.syspath import append_plugin_packages

REQUIREMENTS = b"tinydep==1.0 --hash=sha256:" + b"a" * 64 + b"\n"
NOWHERE = IndexSource("http://127.0.0.1:9/simple")  # nothing listens on port 9


def _plugin(data_dir: Path, name: str, requirements: bytes | None) -> Path:
    """A worktree under D/.git-sync and our link to it in D/plugins."""
    tree = data_dir / ".git-sync" / name / ".worktrees" / "abc"
    tree.mkdir(parents=True)
    if requirements is not None:
        (tree / "requirements.txt").write_bytes(requirements)
    (data_dir / "plugins").mkdir(exist_ok=True)
    os.symlink(f"../.git-sync/{name}/.worktrees/abc", data_dir / "plugins" / name)
    return tree


def test_a_requirements_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.txt").write_bytes(REQUIREMENTS)
    (tmp_path / "requirements.txt").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(PackagesProblem, match=r"requirements\.txt: cannot open"):
        read_requirements(tmp_path)
    assert read_requirements(tmp_path / "missing") is None


def test_check_tells_installed_failed_and_not_yet(tmp_path: Path) -> None:
    tree = _plugin(tmp_path, "p", REQUIREMENTS)
    with pytest.raises(PackagesProblem, match="not installed yet") as waiting:
        check_packages(tmp_path, "p", tree)
    assert waiting.value.transient
    digest = digest_of(REQUIREMENTS)
    write_state(tmp_path, "p", InstallState(digest, FAILED, "tinydep", "package tinydep: why"))
    with pytest.raises(PackagesProblem, match="package tinydep: why") as failed:
        check_packages(tmp_path, "p", tree)
    assert not failed.value.transient
    target_dir(tmp_path, "p", digest).mkdir(parents=True)
    assert check_packages(tmp_path, "p", tree) == target_dir(tmp_path, "p", digest)


def test_targets_are_appended_by_plugin_name_only_for_our_links(tmp_path: Path) -> None:
    for name in ("zeta", "alpha"):
        _plugin(tmp_path, name, REQUIREMENTS)
        target_dir(tmp_path, name, digest_of(REQUIREMENTS)).mkdir(parents=True)
    _plugin(tmp_path, "plain", None)
    users = tmp_path / "plugins" / "users-own"
    users.mkdir()
    (users / "requirements.txt").write_bytes(REQUIREMENTS)
    path = ["/stdlib", "/site-packages"]
    added = append_plugin_packages(tmp_path, path)
    expected = [str(target_dir(tmp_path, n, digest_of(REQUIREMENTS))) for n in ("alpha", "zeta")]
    assert added == expected
    assert path == ["/stdlib", "/site-packages", *expected]
    assert append_plugin_packages(tmp_path, path) == []  # never twice


def test_pip_is_isolated_hash_checked_wheels_only_and_trusts_only_an_http_index() -> None:
    plain = IndexSource("http://index.ns.svc:8080/simple")
    command = pip_command("py", plain, Path("/t"), Path("/r.txt"))
    assert command[:4] == ["py", "-m", "pip", "install"]
    for flag in ("--isolated", "--require-hashes", "--no-input", "--no-cache-dir"):
        assert flag in command
    assert command[command.index("--only-binary") + 1] == ":all:"
    assert command[command.index("--trusted-host") + 1] == "index.ns.svc"
    assert "--no-deps" not in command
    secure = pip_command("py", IndexSource("https://index.example/simple"), Path("/t"), Path("/r"))
    assert "--trusted-host" not in secure


def test_pip_failures_name_the_package() -> None:
    mismatch = (
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you "
        "have updated the package versions, please update the hashes.\n"
        "    tinydep==1.0 from http://127.0.0.1/packages/tinydep-1.0-py3-none-any.whl:\n"
        "        Expected sha256 aaaa\n             Got        bbbb\n"
    )
    failure = explain(mismatch, NOWHERE, [])
    assert failure.package == "tinydep"
    assert failure.reason.startswith("the index's file does not match any --hash in the file")
    other = explain("noise\nERROR: something else broke\n", NOWHERE, [])
    assert (other.package, other.reason) == (None, "pip: noise | ERROR: something else broke")


def test_a_missing_distribution_with_no_index_to_ask_keeps_pips_words() -> None:
    stderr = "ERROR: No matching distribution found for ghost==1.0\n"
    failure = explain(stderr, NOWHERE, [])
    assert failure.package == "ghost"
    assert failure.reason == "pip found no installable file for ghost==1.0"


def test_a_private_cas_bundle_goes_to_pip_and_an_untrusted_index_is_said_so() -> None:
    bundle = Path("/etc/hermes-runtime-index-ca/ca.crt")
    private = IndexSource("https://idx.corp/simple", bundle)
    command = pip_command("python", private, Path("/t"), Path("/r"))
    assert command[command.index("--cert") + 1] == str(bundle)
    public = IndexSource("https://idx.corp/simple")
    assert "--cert" not in pip_command("python", public, Path("/t"), Path("/r"))
    stderr = (
        "WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: "
        "CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer "
        "certificate'))\nERROR: No matching distribution found for tinydep==1.0\n"
    )
    failure = explain(stderr, IndexSource("https://user:secret@idx.corp/simple"), [])
    assert failure.package is None
    assert failure.reason.startswith("the index https://idx.corp/simple presented a TLS")
    assert "--index-ca" in failure.reason and "secret" not in failure.reason
