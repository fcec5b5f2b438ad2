"""The CLI process's settings: every environment variable a verb takes a default from, its
rule and its default, in one pydantic model (``CliSettings``).

Why one model: an option's default from the environment must mean the same in every group
(``--data-dir`` is ``$HERMES_HOME`` everywhere, resolved by ``common/datadir.py``), and an
operator reading ``--help`` finds each variable here once. Values are read when a parser is
built or a verb runs, never at import, so a test's environment and a fresh interpreter's are
read alike. A variable holding a URL is checked only when a verb uses it, and its fault names
the variable (exit 1): a wrong default of one group never stops another group's verbs.
The entrypoint's own variables (``agent run``) are ``AgentSettings``' (``agent/settings.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BeforeValidator, ConfigDict, Field

from hermes_runtime.common.datadir import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from hermes_runtime.common.envsettings import given_values
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.modelcache import ModelCacheEnv

DEBUG_ENV = "HERMES_RUNTIME_DEBUG"
PLUGIN_SPEC_ENV = "HERMES_RUNTIME_PLUGIN_SPEC"
DEFAULT_PLUGIN_SPEC = Path("/etc/hermes-runtime/plugins.yaml")
PLUGIN_INDEX_URL_ENV = "HERMES_RUNTIME_PLUGIN_INDEX_URL"
PLUGIN_INDEX_CA_ENV = "HERMES_RUNTIME_PLUGIN_INDEX_CA"
AGENT_ENV = "HERMES_RUNTIME_AGENT"  # backup/agents.py: which agent's snapshots and replicas
S3_ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # the AWS SDKs' order
VAULT_ADDR_ENV = "VAULT_ADDR"
VAULT_TOKEN_ENV = "VAULT_TOKEN"
VAULT_CACERT_ENV = "VAULT_CACERT"


def _flag(raw: object) -> object:
    """``1``, ``true`` or ``yes`` (any case) turn a flag on; anything else leaves it off."""
    return raw.strip().lower() in ("1", "true", "yes") if isinstance(raw, str) else raw


def _given(raw: object) -> object:
    """Whether a secret is set, without keeping it: the settings are printed in tracebacks."""
    return bool(raw.strip()) if isinstance(raw, str) else raw


Flag = Annotated[bool, BeforeValidator(_flag)]
IsSet = Annotated[bool, BeforeValidator(_given)]


class CliSettings(ModelCacheEnv):
    """What the CLI's verbs take from the environment (an unset or blank variable: the default).

    URLs stay text here; ``url`` checks one when a verb needs it. The model cache's
    variables (where e5's built graph is kept) are ``ModelCacheEnv``'s, shared with the
    gateway's settings so both find the same folder.
    """

    model_config = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)

    data_dir: Path = Field(DEFAULT_DATA_DIR, validation_alias=DATA_DIR_ENV)
    # A failure's traceback on stderr, as ``--debug`` shows it.
    debug: Flag = Field(False, validation_alias=DEBUG_ENV)
    plugin_spec: Path = Field(DEFAULT_PLUGIN_SPEC, validation_alias=PLUGIN_SPEC_ENV)
    # The package index (PEP 503 simple URL) ``plugins install-deps`` installs from: the
    # operator's choice, never the plugin's (its requirements file may not name one).
    plugin_index_url: str | None = Field(None, validation_alias=PLUGIN_INDEX_URL_ENV)
    # The CA bundle that index's TLS certificate is checked against (a private CA).
    plugin_index_ca: Path | None = Field(None, validation_alias=PLUGIN_INDEX_CA_ENV)
    # The agent whose snapshots and replicas the backup verbs act on (checked by ``--agent``'s
    # rule when used, naming the variable).
    agent: str | None = Field(None, validation_alias=AGENT_ENV)
    s3_endpoint_s3: str | None = Field(None, validation_alias=S3_ENDPOINT_ENVS[0])
    s3_endpoint: str | None = Field(None, validation_alias=S3_ENDPOINT_ENVS[1])
    vault_addr: str | None = Field(None, validation_alias=VAULT_ADDR_ENV)
    # Only whether a token is set: ``--auth token`` is then the default (the token itself is
    # read by the Vault client from the environment it is given, never kept here).
    vault_token_given: IsSet = Field(False, validation_alias=VAULT_TOKEN_ENV)
    vault_ca_cert: Path | None = Field(None, validation_alias=VAULT_CACERT_ENV)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> CliSettings:
        """The settings ``env`` gives; blank values count as unset."""
        given = given_values(cls, env)
        given[DATA_DIR_ENV] = str(resolve_data_dir(env))
        return cls.model_validate(given)

    def url(self, *fields: str) -> str | None:
        """The first of ``fields`` that is set, checked as an http(s) URL; a bad one is a
        ``RuntimeFailure`` naming its variable."""
        for name in fields:
            value = getattr(self, name)
            if value:
                problem = http_url_problem(value)
                if problem is not None:
                    variable = CliSettings.model_fields[name].validation_alias
                    raise RuntimeFailure(f"{variable}={value!r}: {problem}")
                return str(value).rstrip("/")
        return None


def http_url_problem(text: str) -> str | None:
    """Why ``text`` is not an absolute http(s) URL with a host, or None when it is one (the
    rule of a server's URL, whether an option or a variable gives it)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL with a host, e.g. https://host:8200"
    return None


def cli_settings() -> CliSettings:
    """The settings of this process's environment, read now (a parser is being built, or a
    verb runs)."""
    return CliSettings.from_environ(os.environ)


def named_variable(name: str) -> str:
    """The value of a variable the operator named on the command line (``--llm-api-key-env``:
    a key kept out of the process list), ``""`` when unset."""
    return os.environ.get(name, "")
