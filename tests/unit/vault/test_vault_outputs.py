"""`--out-only FILE=ENV,...`: one env file per reader, each with only its variables.

Why it matters: the chart renders one file for the agent and one for each backup
consumer, so the agent's shell never holds the S3 keys or the restic password.
These tests pin the parsing and the consistency rules; the files themselves are
rendered against a real OpenBao in tests/integration/vault/test_vault_render_consumers.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_runtime.cli import main
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault import OutputFile, parse_output_spec, parse_secret_spec
from hermes_runtime.vault.spec import check_outputs

SPECS = [
    parse_secret_spec("secret/data/agent#llm=LLM_API_KEY"),
    parse_secret_spec("secret/data/backup#id=AWS_ACCESS_KEY_ID"),
    parse_secret_spec("secret/data/backup#pw=RESTIC_PASSWORD"),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/run/a/env=LLM_API_KEY", OutputFile(Path("/run/a/env"), ("LLM_API_KEY",))),
        ("b/env=A,B", OutputFile(Path("b/env"), ("A", "B"))),
        ("b/env= A , B", OutputFile(Path("b/env"), ("A", "B"))),
        ("odd=name/env=A", OutputFile(Path("odd=name/env"), ("A",))),  # the LAST '=' splits
        ("empty/env=", OutputFile(Path("empty/env"), ())),
    ],
)
def test_output_specs_split_at_the_last_equals_sign(text: str, expected: OutputFile) -> None:
    assert parse_output_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-equals", "FILE=ENV"),
        ("=A", "FILE=ENV"),
        ("f=A,1B", "'1B' is not a valid environment variable name"),
        ("f=A,,B", "'' is not a valid environment variable name"),
    ],
)
def test_malformed_output_specs_are_refused(text: str, message: str) -> None:
    with pytest.raises(RuntimeFailure, match="--out-only") as raised:
        parse_output_spec(text)
    assert message in str(raised.value)


def test_each_file_selects_its_own_variables_in_secret_order() -> None:
    backup = OutputFile(Path("b"), ("RESTIC_PASSWORD", "AWS_ACCESS_KEY_ID"))
    assert [s.env for s in backup.select(SPECS)] == ["AWS_ACCESS_KEY_ID", "RESTIC_PASSWORD"]
    assert [s.env for s in OutputFile(Path("all")).select(SPECS)] == [
        "LLM_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "RESTIC_PASSWORD",
    ]
    assert OutputFile(Path("none"), ()).select(SPECS) == []


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ([], "no output file"),
        (
            [OutputFile(Path("a"), ("LLM_API_KEY", "GITHUB_TOKEN"))],
            "--out-only a: GITHUB_TOKEN is not set by any --secret",
        ),
        (
            [
                OutputFile(Path("a"), ("LLM_API_KEY",)),
                OutputFile(Path("b"), ("AWS_ACCESS_KEY_ID",)),
            ],
            "--secret for RESTIC_PASSWORD goes to no output file",
        ),
        (
            [OutputFile(Path("a")), OutputFile(Path("a"), ())],
            "a is given as an output file twice",
        ),
    ],
)
def test_inconsistent_outputs_are_refused(outputs: list[OutputFile], message: str) -> None:
    with pytest.raises(RuntimeFailure) as raised:
        check_outputs(SPECS, outputs)
    assert message in str(raised.value)


def test_every_secret_written_somewhere_passes() -> None:
    check_outputs(
        SPECS,
        [
            OutputFile(Path("agent"), ("LLM_API_KEY",)),
            OutputFile(Path("backup"), ("AWS_ACCESS_KEY_ID", "RESTIC_PASSWORD")),
            OutputFile(Path("replicate"), ("AWS_ACCESS_KEY_ID",)),
            OutputFile(Path("idle"), ()),
        ],
    )


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[object, str]]:
    def invoke(*args: str) -> tuple[object, str]:
        try:
            code: object = main(["vault", "render", *args])
        except SystemExit as exc:
            code = exc.code
        return code, capsys.readouterr().err

    return invoke


BASE = ["--addr", "http://127.0.0.1:1", "--auth", "token", "--secret", "kv/x#k=ENV"]


def test_cli_malformed_out_only_is_a_usage_error(run: Callable[..., tuple[object, str]]) -> None:
    code, err = run(*BASE, "--out-only", "no-equals")
    assert code == 2
    assert "--out-only 'no-equals' is not of the form FILE=ENV" in err


def test_cli_name_without_secret_fails_before_vault_and_writes_nothing(
    run: Callable[..., tuple[object, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAULT_TOKEN", "unused")  # never sent: the check comes first
    monkeypatch.delenv("HERMES_HOME", raising=False)
    out = tmp_path / "agent" / "env"
    code, err = run(*BASE, "--out-only", f"{out}=ENV,OTHER")
    assert code == 1
    assert f"--out-only {out}: OTHER is not set by any --secret" in err
    assert not out.exists()


def test_an_output_built_in_code_obeys_the_name_rule() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="NOT-OK"):
        OutputFile(Path("a"), ("OK", "NOT-OK"))
