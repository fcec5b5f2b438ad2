"""Every git-sync option the chart can render is a real git-sync v4 option and the stand-in
(ci/images/git-sync/git_sync.py) implements it.

Why: the e2e suite runs the stand-in where the upstream image cannot be pulled. If the chart
started rendering an option upstream does not know (it once rendered GITSYNC_SSH, which v4
never reads) or one the stand-in does not implement, the cluster tests would prove nothing
about upstream. The chart's set is found twice: statically (every GITSYNC_* name in the
templates) and by rendering with the real helm over the values combinations of tests/chart;
the two must agree, so neither can silently go stale.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "hermes-agent"
EXAMPLES = REPO / "values-examples"
TOOLS_DIR = REPO / ".cache" / "tools"
STANDIN = REPO / "ci" / "images" / "git-sync" / "git_sync.py"

# git-sync v4.7.1's documented options: `$GITSYNC_*` variable -> `--flag` (None: env only).
# Data read from upstream's README.md ("Manual" section) and main.go, not code.
UPSTREAM_V4: dict[str, str | None] = {
    "GITSYNC_ADD_USER": "add-user",
    "GITSYNC_ASKPASS_URL": "askpass-url",
    "GITSYNC_COOKIE_FILE": "cookie-file",
    "GITSYNC_CREDENTIAL": "credential",
    "GITSYNC_DEPTH": "depth",
    "GITSYNC_ERROR_FILE": "error-file",
    "GITSYNC_EXECHOOK_BACKOFF": "exechook-backoff",
    "GITSYNC_EXECHOOK_COMMAND": "exechook-command",
    "GITSYNC_EXECHOOK_TIMEOUT": "exechook-timeout",
    "GITSYNC_FILTER": "filter",
    "GITSYNC_GIT": "git",
    "GITSYNC_GIT_CONFIG": "git-config",
    "GITSYNC_GIT_GC": "git-gc",
    "GITSYNC_GITHUB_APP_APPLICATION_ID": "github-app-application-id",
    "GITSYNC_GITHUB_APP_CLIENT_ID": "github-app-client-id",
    "GITSYNC_GITHUB_APP_INSTALLATION_ID": "github-app-installation-id",
    "GITSYNC_GITHUB_APP_PRIVATE_KEY": None,
    "GITSYNC_GITHUB_APP_PRIVATE_KEY_FILE": "github-app-private-key-file",
    "GITSYNC_GITHUB_BASE_URL": "github-base-url",
    "GITSYNC_GROUP_WRITE": "group-write",
    "GITSYNC_HTTP_BIND": "http-bind",
    "GITSYNC_HTTP_METRICS": "http-metrics",
    "GITSYNC_HTTP_PPROF": "http-pprof",
    "GITSYNC_INIT_MAX_FAILURES": "init-max-failures",
    "GITSYNC_INIT_PERIOD": "init-period",
    "GITSYNC_LINK": "link",
    "GITSYNC_MAX_FAILURES": "max-failures",
    "GITSYNC_ONE_TIME": "one-time",
    "GITSYNC_PASSWORD": None,
    "GITSYNC_PASSWORD_FILE": "password-file",
    "GITSYNC_PERIOD": "period",
    "GITSYNC_PRE_PUBLISH_EXECHOOK_BACKOFF": "pre-publish-exechook-backoff",
    "GITSYNC_PRE_PUBLISH_EXECHOOK_COMMAND": "pre-publish-exechook-command",
    "GITSYNC_PRE_PUBLISH_EXECHOOK_TIMEOUT": "pre-publish-exechook-timeout",
    "GITSYNC_REF": "ref",
    "GITSYNC_REPO": "repo",
    "GITSYNC_ROOT": "root",
    "GITSYNC_SPARSE_CHECKOUT_FILE": "sparse-checkout-file",
    "GITSYNC_SSH_KEY_FILE": "ssh-key-file",
    "GITSYNC_SSH_KNOWN_HOSTS": "ssh-known-hosts",
    "GITSYNC_SSH_KNOWN_HOSTS_FILE": "ssh-known-hosts-file",
    "GITSYNC_STALE_WORKTREE_TIMEOUT": "stale-worktree-timeout",
    "GITSYNC_SUBMODULES": "submodules",
    "GITSYNC_SYNC_ON_SIGNAL": "sync-on-signal",
    "GITSYNC_SYNC_TIMEOUT": "sync-timeout",
    "GITSYNC_TOUCH_FILE": "touch-file",
    "GITSYNC_USERNAME": "username",
    "GITSYNC_VERBOSE": "verbose",
    "GITSYNC_WEBHOOK_BACKOFF": "webhook-backoff",
    "GITSYNC_WEBHOOK_METHOD": "webhook-method",
    "GITSYNC_WEBHOOK_SUCCESS_STATUS": "webhook-success-status",
    "GITSYNC_WEBHOOK_TIMEOUT": "webhook-timeout",
    "GITSYNC_WEBHOOK_URL": "webhook-url",
}
# Flags with no GITSYNC_* variable (--git-config-add) and the deprecated v3 ones (--ssh ...).
UPSTREAM_V4_FLAG_ONLY = frozenset({"git-config-add", "version", "help", "man"})

SSH_PLUGIN = {
    "name": "tickets",
    "repo": "git@git.example.com:t/tickets.git",
    "subPath": "plugin",
    "period": "10s",
    "depth": 0,
    "auth": {"sshKeySecret": "git-ssh", "knownHosts": "git.example.com ssh-ed25519 AAAA"},
}
HTTPS_PLUGIN = {
    "name": "weather",
    "repo": "https://git.example.com/weather.git",
    "ref": "v1",
    "auth": {"existingSecret": "git-creds"},
}
# The values combinations of tests/chart that reach the git-sync template: the examples,
# both auth kinds, native sidecars (1.29+) and the legacy init + sidecar pair (1.28).
COMBINATIONS: list[tuple[str, list[str], dict[str, Any], str]] = [
    *[(name, [name], {}, "1.37.0") for name in ("dev", "staging", "production", "ci")],
    ("both auth kinds, native", [], {"plugins": [HTTPS_PLUGIN, SSH_PLUGIN]}, "1.37.0"),
    ("both auth kinds, legacy", [], {"plugins": [HTTPS_PLUGIN, SSH_PLUGIN]}, "1.28.0"),
    ("forced legacy", [], {"plugins": [SSH_PLUGIN], "sidecarMode": "legacy"}, "1.37.0"),
]


def load_standin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("git_sync_standin", STANDIN)
    assert spec is not None and spec.loader is not None, STANDIN
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def helm() -> str:
    pinned = TOOLS_DIR / "bin" / "helm"
    if not pinned.exists():
        subprocess.run([str(REPO / "ci" / "install-tools.sh"), str(TOOLS_DIR)], check=True)
    return str(pinned)


def rendered_git_sync_containers(
    examples: list[str], overrides: dict[str, Any], kube_version: str, tmp_path: Path
) -> list[dict[str, Any]]:
    values = tmp_path / "values.json"
    values.write_text(json.dumps(overrides))
    args = [helm(), "template", "hermes", str(CHART), "--kube-version", kube_version]
    for name in examples:
        args += ["-f", str(EXAMPLES / f"{name}.yaml")]
    args += ["-f", str(values)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    containers = []
    for doc in yaml.load_all(done.stdout, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        if not doc or doc.get("kind") != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            if container["name"].startswith("git-sync-"):
                containers.append(container)
    return containers


def options_of(container: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(GITSYNC_* variables, --flags) one git-sync container is given."""
    env = {item["name"] for item in container.get("env", []) if item["name"].startswith("GIT")}
    words = [*container.get("command", []), *container.get("args", [])]
    flags = {w[2:].partition("=")[0] for w in words if w.startswith("--")}
    return env, flags


def template_variables() -> set[str]:
    names: set[str] = set()
    for path in (CHART / "templates").rglob("*.*"):
        names |= set(re.findall(r"name: (GIT(?:SYNC|_SYNC)_[A-Z_]+)", path.read_text()))
    return names


@pytest.fixture(scope="module")
def chart_options(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[set[str], set[str]]]:
    found: dict[str, tuple[set[str], set[str]]] = {}
    for label, examples, overrides, kube in COMBINATIONS:
        env: set[str] = set()
        flags: set[str] = set()
        for container in rendered_git_sync_containers(
            examples, overrides, kube, tmp_path_factory.mktemp("values")
        ):
            more_env, more_flags = options_of(container)
            env |= more_env
            flags |= more_flags
        found[label] = (env, flags)
    return found


def test_every_plugin_combination_renders_git_sync(
    chart_options: dict[str, tuple[set[str], set[str]]],
) -> None:
    # The examples may or may not carry plugins; the explicit combinations must.
    examples = {"dev", "staging", "production", "ci"}
    empty = [
        label for label, (env, _) in chart_options.items() if label not in examples and not env
    ]
    assert not empty, f"no git-sync container rendered for {empty}: the combinations are stale"


def test_rendered_variables_are_exactly_the_templates_variables(
    chart_options: dict[str, tuple[set[str], set[str]]],
) -> None:
    rendered = set().union(*(env for env, _ in chart_options.values()))
    assert rendered == template_variables(), (
        "a GITSYNC_* variable in the templates never renders in these combinations, or one "
        "renders that the template scan missed: add a combination to COMBINATIONS"
    )


def test_every_rendered_option_is_a_documented_upstream_v4_option(
    chart_options: dict[str, tuple[set[str], set[str]]],
) -> None:
    for label, (env, flags) in chart_options.items():
        unknown_env = sorted(env - set(UPSTREAM_V4))
        known_flags = {f for f in UPSTREAM_V4.values() if f} | UPSTREAM_V4_FLAG_ONLY
        unknown_flags = sorted(flags - known_flags)
        assert not unknown_env, f"{label}: not git-sync v4 variables: {unknown_env}"
        assert not unknown_flags, f"{label}: not git-sync v4 flags: {unknown_flags}"


def test_the_standin_implements_every_option_the_chart_renders(
    chart_options: dict[str, tuple[set[str], set[str]]],
) -> None:
    standin = load_standin()
    for label, (env, flags) in chart_options.items():
        missing_env = sorted(env - standin.IMPLEMENTED_ENV)
        missing_flags = sorted(flags - standin.IMPLEMENTED_FLAGS)
        assert not missing_env, f"{label}: the stand-in lacks {missing_env}"
        assert not missing_flags, f"{label}: the stand-in lacks --{missing_flags}"


def test_the_standin_implements_only_upstream_options_under_upstream_names() -> None:
    standin = load_standin()
    for option in standin.IMPLEMENTED:
        assert option.env in UPSTREAM_V4, f"{option.env} is not a git-sync v4 variable"
        assert option.flag == (UPSTREAM_V4[option.env] or ""), (
            f"{option.env}: the stand-in's flag --{option.flag} is not upstream's "
            f"--{UPSTREAM_V4[option.env]}"
        )


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (
            [],
            {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x", "GITSYNC_EXECHOOK_COMMAND": "a"},
            "EXECHOOK",
        ),
        ([], {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x", "GIT_SYNC_DEST": "a"}, "GIT_SYNC_DEST"),
        (["--root=/r", "--repo=x", "--sparse-checkout-file=f"], {}, "--sparse-checkout-file"),
        (["--root=/r", "--repo=x", "--submodules=none"], {}, "--submodules must be one of"),
        (["--root=/r", "--repo=x", "--ssh"], {}, "--ssh"),
    ],
)
def test_the_standin_refuses_what_it_does_not_implement(
    argv: list[str], environ: dict[str, str], named: str
) -> None:
    standin = load_standin()
    with pytest.raises(standin.ConfigError, match=re.escape(named)):
        standin.load_config(argv, environ)


@pytest.mark.parametrize(("given", "mode"), [([], "recursive"), (["--submodules=off"], "off")])
def test_the_standin_takes_upstreams_submodule_modes(given: list[str], mode: str) -> None:
    """Upstream's default is recursive; the chart renders off unless a plugin asks."""
    config = load_standin().load_config(["--root=/r", "--repo=x", *given], {})
    assert config.submodules == mode


def test_the_standin_parses_like_upstream() -> None:
    standin = load_standin()
    config = standin.load_config(
        ["--period=1m30s", "--max-failures", "-1"],
        {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "https://h/p/plugin.git", "GITSYNC_ONE_TIME": "T"},
    )
    assert config.period == 90.0
    assert config.max_failures == -1
    assert config.one_time is True
    assert config.depth == 1 and config.ref == "HEAD"  # upstream defaults
    assert str(config.link) == "/r/plugin.git"  # default link: the repo's leaf
    assert config.ssh_key_files == ("/etc/git-secret/ssh",)
    with pytest.raises(standin.ConfigError, match="--http-bind must be specified"):
        standin.load_config(
            [], {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x", "GITSYNC_HTTP_METRICS": "1"}
        )
    with pytest.raises(standin.ConfigError, match="--password-file must be specified"):
        standin.load_config(
            [], {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x", "GITSYNC_USERNAME": "u"}
        )
    with pytest.raises(standin.ConfigError, match="invalid bool 'yes'"):
        standin.load_config(
            [], {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x", "GITSYNC_ONE_TIME": "yes"}
        )


def test_the_standin_reads_git_config_pairs_like_upstream() -> None:
    """--git-config 'key:val,key:val' (the chart names the root safe with it)."""
    standin = load_standin()
    base = {"GITSYNC_ROOT": "/r", "GITSYNC_REPO": "x"}
    config = standin.load_config(
        [], {**base, "GITSYNC_GIT_CONFIG": "safe.directory:/r,http.lowSpeedTime:30"}
    )
    assert config.git_configs == (("safe.directory", "/r"), ("http.lowSpeedTime", "30"))
    with pytest.raises(standin.ConfigError, match="no value"):
        standin.load_config([], {**base, "GITSYNC_GIT_CONFIG": "safe.directory"})
    with pytest.raises(standin.ConfigError, match="not implemented"):
        standin.load_config([], {**base, "GITSYNC_GIT_CONFIG": '"a.b":"c"'})
