"""The env file: exact round-trip through read_env_file and through `set -a; . FILE`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault import format_env_file, parse_env_text, read_env_file, write_env_file

TRICKY_VALUES = {
    "PLAIN": "sk-abc123",
    "QUOTES": "it's a \"quoted\" 'value'",
    "NEWLINES": "line1\nline2\n\nline4\n",
    "EQUALS": "a=b==c",
    "DOLLAR": "$HOME ${PATH} $(id) `id`",
    "BACKSLASH": "C:\\path\\n\\'",
    "SPACES": "  leading and trailing  ",
    "CR": "windows\r\nline",
    "EMPTY": "",
    "UNICODE": "clé-ключ-鍵-🔑",
    "HASH": "#not-a-comment",
    "ONLY_QUOTE": "'",
}

# Any text an environment variable can hold: no NUL, no lone surrogates.
env_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
# Prefixed so a random name never hits a shell's special or read-only variable (UID, IFS, ...).
shell_safe_names = st.from_regex(r"V_[A-Za-z0-9_]{0,12}", fullmatch=True)


@given(st.dictionaries(env_names, env_values, max_size=6))
def test_python_round_trip_is_exact(values: dict[str, str]) -> None:
    assert parse_env_text(format_env_file(values)) == values


def test_written_file_is_0640_and_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "env"
    write_env_file(out, TRICKY_VALUES)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert read_env_file(out) == TRICKY_VALUES


def cat_as(uid: int, gid: int, path: Path) -> subprocess.CompletedProcess[str]:
    """Read ``path`` as ``uid`` with only ``gid`` as its group (a container of the pod)."""
    return subprocess.run(
        ["cat", str(path)], user=uid, group=gid, extra_groups=[], capture_output=True, text=True
    )


def test_the_consumer_reads_it_through_the_group_and_no_one_else(tmp_path: Path) -> None:
    """The chart's layout: the Vault containers' UID writes, the consumer (another UID in the
    pod's fsGroup) reads, a UID outside the group is refused by the kernel. Needs root to
    act as those users: without it the test fails, saying so (a skip would count as passing)."""
    if os.geteuid() != 0:
        pytest.fail("reading as another user needs root: run the tests as root")
    shared = Path(tempfile.mkdtemp(prefix="hermes-envfile-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        out = shared / "env"
        write_env_file(out, {"KEY": "s3cr3t"})
        os.chown(out, 10001, 10000)  # vault-render's UID, the pod's fsGroup
        consumer = cat_as(10000, 10000, out)
        assert consumer.returncode == 0 and "KEY='s3cr3t'" in consumer.stdout, consumer.stderr
        outsider = cat_as(10009, 10009, out)
        assert outsider.returncode != 0 and "Permission denied" in outsider.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def shell_environment(shell: str, env_file: Path, names: list[str]) -> dict[str, str]:
    """Source ``env_file`` with ``set -a`` in ``shell`` and report what a child process sees."""
    dump = "import json, os, sys; print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))"
    script = f'set -a; . "{env_file}"; exec "{sys.executable}" -c "$0" "$@"'
    result = subprocess.run(
        [shell, "-c", script, dump, *names],
        capture_output=True,
        env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
        check=True,
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_posix_shells_source_the_file_to_the_same_values(shell: str, tmp_path: Path) -> None:
    if shutil.which(shell) is None:
        raise AssertionError(f"{shell} is required for this test (apt-get install {shell})")
    out = tmp_path / "env"
    write_env_file(out, TRICKY_VALUES)
    assert shell_environment(shell, out, list(TRICKY_VALUES)) == TRICKY_VALUES


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(shell_safe_names, env_values, min_size=1, max_size=4))
def test_bash_agrees_with_read_env_file_on_random_values(
    tmp_path_factory: pytest.TempPathFactory, values: dict[str, str]
) -> None:
    out = tmp_path_factory.mktemp("env") / "env"
    write_env_file(out, values)
    assert shell_environment("bash", out, list(values)) == read_env_file(out) == values


def test_parser_accepts_hand_written_lines() -> None:
    text = "# c\n\nexport A=plain\nB='x'\\''y'\nC=a\\ b\n"
    assert parse_env_text(text) == {"A": "plain", "B": "x'y", "C": "a b"}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("A='unterminated\nB='x'\n", "line 1"),
        ("OK='1'\nBAD NAME='x'\n", "line 2"),
        ("OK='1'\nC=two words\n", "line 2"),
        ("1ABC='x'\n", "line 1"),
    ],
)
def test_malformed_file_names_the_file_and_line_but_no_value(
    tmp_path: Path, text: str, line: str
) -> None:
    out = tmp_path / "env"
    out.write_text(text)
    with pytest.raises(RuntimeFailure) as exc:
        read_env_file(out)
    assert str(out) in str(exc.value) and line in str(exc.value)
    assert "unterminated\n" not in str(exc.value) and "words" not in str(exc.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="does not exist"):
        read_env_file(tmp_path / "nope")


def test_nul_value_or_bad_name_leaves_the_existing_file_untouched(tmp_path: Path) -> None:
    out = tmp_path / "env"
    write_env_file(out, {"A": "old"})
    for bad in ({"A": "new\x00"}, {"1BAD": "x"}, {"A=B": "x"}):
        with pytest.raises(RuntimeFailure):
            write_env_file(out, bad)
    assert read_env_file(out) == {"A": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env"]


def test_the_charts_with_secrets_wrapper_passes_values_and_arguments_intact(tmp_path: Path) -> None:
    """The exact command the chart's backup/restore containers use to load the file."""
    out = tmp_path / "env"
    write_env_file(out, TRICKY_VALUES)
    wrapper = 'set -a && . "$HERMES_RUNTIME_SECRETS_ENV" && set +a && exec "$@"'
    dump = (
        "import json, os, sys; "
        "print(json.dumps([sys.argv[1:], {n: os.environ[n] for n in sys.argv[1:]}]))"
    )
    names = list(TRICKY_VALUES)
    result = subprocess.run(
        ["/bin/sh", "-c", wrapper, "with-secrets", sys.executable, "-c", dump, *names],
        capture_output=True,
        env={"PATH": os.environ["PATH"], "HERMES_RUNTIME_SECRETS_ENV": str(out)},
        check=True,
    )
    argv, environment = json.loads(result.stdout)
    assert argv == names
    assert environment == TRICKY_VALUES


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    """``$`` matches before a final newline: a name checked with ``match`` let ``A\\n`` through
    and wrote a file whose line the shell reads as another variable."""
    with pytest.raises(RuntimeFailure, match="invalid"):
        format_env_file({"A\n": "x"})
