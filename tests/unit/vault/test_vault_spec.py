"""`--secret PATH#KEY=ENV` parsing, JWT audience reading and token renewal timing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault import SecretSpec, parse_secret_spec
from hermes_runtime.vault.auth import jwt_audiences, renew_threshold
from hermes_runtime.vault.render import filesystem_type
from hermes_runtime.vault.secrets import field_as_text
from hermes_runtime.vault.spec import check_unique_env_names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "secret/data/hermes#OPENAI_API_KEY=OPENAI_API_KEY",
            ("secret/data/hermes", "OPENAI_API_KEY", "OPENAI_API_KEY"),
        ),
        ("kv/hermes#key=ENV", ("kv/hermes", "key", "ENV")),
        ("/secret/data/x/#a=B", ("secret/data/x", "a", "B")),
        ("secret/data/x#a=b=C", ("secret/data/x", "a=b", "C")),
        ("secret/data/x#with#hash=C", ("secret/data/x", "with#hash", "C")),
    ],
)
def test_valid_specs(text: str, expected: tuple[str, str, str]) -> None:
    assert parse_secret_spec(text) == SecretSpec(*expected)


@pytest.mark.parametrize(
    "text",
    [
        "secret/data/x",
        "secret/data/x#KEY",
        "#KEY=ENV",
        "secret/data/x#=ENV",
        "p#k=1BAD",
        "p#k=",
        "p#k=A-B",
        "v1/secret/data/x#k=E",
    ],
)
def test_invalid_specs_name_the_spec(text: str) -> None:
    with pytest.raises(RuntimeFailure) as exc:
        parse_secret_spec(text)
    assert repr(text) in str(exc.value)


def test_two_specs_for_one_variable_are_refused() -> None:
    specs = [parse_secret_spec("a#k=X"), parse_secret_spec("b#k=X")]
    with pytest.raises(RuntimeFailure, match="both set X"):
        check_unique_env_names(specs)


def jwt_with(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"e30.{body}.sig"


def test_jwt_audience_as_string_or_list() -> None:
    assert jwt_audiences(jwt_with({"aud": "vault"})) == ["vault"]
    assert jwt_audiences(jwt_with({"aud": ["a", "vault"]})) == ["a", "vault"]
    assert jwt_audiences(jwt_with({})) == []
    with pytest.raises(ValueError):
        jwt_audiences("not-a-jwt")


@pytest.mark.parametrize(
    ("ttl", "interval", "expected"),
    [(3600, 60, 1200), (3600, 1000, 2000), (2, 0.5, 1.0), (30, 60, 20)],
)
def test_renew_threshold(ttl: int, interval: float, expected: float) -> None:
    assert renew_threshold(ttl, interval) == pytest.approx(expected)
    assert renew_threshold(ttl, interval) < ttl


def test_non_string_fields_become_json() -> None:
    assert field_as_text("x") == "x"
    assert field_as_text(8642) == "8642"
    assert field_as_text(True) == "true"
    assert field_as_text({"a": [1, 2]}) == '{"a":[1,2]}'


def test_filesystem_type_follows_the_longest_mount_prefix() -> None:
    assert filesystem_type(Path("/proc/self/status")) == "proc"
    assert filesystem_type(Path("/dev/shm")) == "tmpfs"


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    """`$` in Python's re also matches before a final newline: 'A\\n' passed the name check
    and would have split the env file's line. The rule now matches the whole name."""
    with pytest.raises(RuntimeFailure, match="is not a valid environment variable name"):
        parse_secret_spec("p#k=A\n")


def test_a_spec_built_in_code_obeys_the_same_rules() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="1BAD"):
        SecretSpec("secret/data/x", "k", "1BAD")
    with pytest.raises(ValidationError, match="v1/"):
        SecretSpec("v1/secret/data/x", "k", "OK")
