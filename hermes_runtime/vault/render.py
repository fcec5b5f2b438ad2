"""Render secrets into env files, once or as a refreshing sidecar.

Each file is written with mode 0640 (its consumer, another UID, reads it through the pod's
group) through temp file + rename, and only when its content changes, so a watcher (the agent
entrypoint) sees a new mtime exactly when one of ITS values rotated. Several files can be
rendered from one login (``--out-only FILE=ENV,...``), each with only the variables its reader
needs: every value is fetched before any file is written, so a Vault failure leaves every file
as it was. Logs carry counts and variable names, never values.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from hermes_runtime.common.datadir import resolve_data_dir
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.vault.auth import Session, TokenKeeper, VaultSettings, login
from hermes_runtime.vault.envfile import (
    EnvFileError,
    format_env_file,
    parse_env_text,
    write_env_file,
)
from hermes_runtime.vault.refreshstatus import record_refresh
from hermes_runtime.vault.secrets import SecretCache
from hermes_runtime.vault.spec import (
    OutputFile,
    SecretSpec,
    check_outputs,
    check_unique_env_names,
)

IN_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


@dataclass(frozen=True)
class RenderResult:
    """What one render did: how many variables, which changed, whether the file was rewritten."""

    out: Path
    count: int
    changed: list[str]
    written: bool


@dataclass
class Renderer:
    """One login plus a secret cache, rendering ``specs`` into ``outputs`` on demand."""

    settings: VaultSettings
    specs: list[SecretSpec]
    outputs: list[OutputFile]
    environ: Mapping[str, str]
    interval: float = 0
    cache: SecretCache = field(default_factory=SecretCache)
    keeper: TokenKeeper | None = None

    def session(self) -> Session:
        if self.keeper is None:
            self.keeper = TokenKeeper(
                login(self.settings, self.environ), self.environ, self.interval
            )
        return self.keeper.session

    def fetch(self) -> dict[str, str]:
        return self.cache.fetch(
            self.session().client, self.specs, self.settings.addr, self.interval
        )

    def render(self) -> list[RenderResult]:
        """Fetch every value, then write each file whose text differs (its own subset)."""
        values = self.fetch()
        return [
            write_if_changed(output.path, {s.env: values[s.env] for s in output.select(self.specs)})
            for output in self.outputs
        ]


def previous_values(out: Path) -> tuple[str | None, dict[str, str]]:
    """The current file's text and values; unreadable or foreign content counts as all-changed."""
    try:
        text = out.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None, {}
    try:
        return text, parse_env_text(text)
    except EnvFileError:
        return text, {}


def write_if_changed(out: Path, values: dict[str, str]) -> RenderResult:
    old_text, old_values = previous_values(out)
    new_text = format_env_file(values)
    changed = [name for name, value in values.items() if old_values.get(name) != value]
    changed += [name for name in old_values if name not in values]
    if new_text == old_text:
        return RenderResult(out, len(values), [], written=False)
    write_env_file(out, values)
    return RenderResult(out, len(values), changed, written=True)


def filesystem_type(path: Path) -> str:
    """The type of the mount holding ``path`` (longest mount-point prefix in /proc/self/mounts)."""
    target = str(path.resolve())
    best, fstype = "", "unknown"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return fstype
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point = parts[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, fstype = mount_point, parts[2]
    return fstype


def check_output_path(out: Path, environ: Mapping[str, str], log: TextIO | None) -> None:
    """Refuse the data dir (it is backed up, ``resolve_data_dir``); warn when the file would
    land on a disk."""
    resolved = out.parent.resolve() / out.name
    home = resolve_data_dir(environ)
    if resolved.is_relative_to(home.resolve()):
        raise RuntimeFailure(
            f"--out {out} is inside HERMES_HOME ({home}), which is backed up; "
            "write secrets to an in-memory volume such as /run/hermes/secrets/env"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeFailure(f"cannot create the folder of --out {out}: {exc.strerror}") from None
    if out.is_dir():
        raise RuntimeFailure(f"--out {out} is a directory; give a file path")
    fstype = filesystem_type(out.parent)
    if fstype not in IN_MEMORY_FILESYSTEMS:
        log_event("vault.render.not_in_memory", log, out=str(out), filesystem=fstype)


def log_render(result: RenderResult, log: TextIO | None) -> None:
    log_event(
        "vault.rendered",
        log,
        message=f"rendered {result.count} secrets, changed: {result.changed}",
        out=str(result.out),
        secrets=result.count,
        changed=result.changed,
        written=result.written,
    )


def as_outputs(out: Path | Sequence[OutputFile]) -> list[OutputFile]:
    """A bare path is one file holding every secret (``--out FILE``)."""
    return [OutputFile(out)] if isinstance(out, Path) else list(out)


def prepare(
    specs: list[SecretSpec],
    out: Path | Sequence[OutputFile],
    environ: Mapping[str, str],
    log: TextIO | None,
) -> list[OutputFile]:
    """Every check that needs no Vault: names, outputs, where the files go."""
    outputs = as_outputs(out)
    check_unique_env_names(specs)
    check_outputs(specs, outputs)
    for output in outputs:
        check_output_path(output.path, environ, log)
    return outputs


def render_files(
    settings: VaultSettings,
    specs: list[SecretSpec],
    out: Path | Sequence[OutputFile],
    environ: Mapping[str, str] | None = None,
    log: TextIO | None = None,
) -> list[RenderResult]:
    """Log in, fetch, write each output (0640, atomic). A failure to read leaves every file as
    it was: all values are fetched before the first file is written."""
    env = os.environ if environ is None else environ
    outputs = prepare(specs, out, env, log)
    results = Renderer(settings, specs, outputs, env).render()
    for result in results:
        log_render(result, log)
    return results


def render_once(
    settings: VaultSettings,
    specs: list[SecretSpec],
    out: Path,
    environ: Mapping[str, str] | None = None,
    log: TextIO | None = None,
) -> RenderResult:
    """Log in, fetch, write ``out`` (0640, atomic). On any failure ``out`` is left as it was."""
    return render_files(settings, specs, out, environ, log)[0]


def run_refresh(
    settings: VaultSettings,
    specs: list[SecretSpec],
    out: Path | Sequence[OutputFile],
    interval: float,
    stop: threading.Event,
    environ: Mapping[str, str] | None = None,
    log: TextIO | None = None,
) -> None:
    """Render now (failures raise), then every ``interval`` seconds until ``stop`` is set.

    Later failures (Vault down, a key removed) are logged and retried: the
    last good file stays in place, because a running agent is better off with
    a value that may soon expire than with none.
    """
    env = os.environ if environ is None else environ
    if interval <= 0:
        raise RuntimeFailure(f"--refresh must be a positive number of seconds, not {interval}")
    outputs = prepare(specs, out, env, log)
    renderer = Renderer(settings, specs, outputs, env, interval, cache=SecretCache(log=log))
    for result in renderer.render():
        log_render(result, log)
    record_refresh([o.path for o in outputs], ok=True)
    while not stop.wait(interval):
        refresh_tick(renderer, log)


def refresh_tick(renderer: Renderer, log: TextIO | None) -> None:
    """One refresh: keep the token alive, re-render every file, log, and note the outcome
    beside each file (refreshstatus: the agent's /metrics); never raises RuntimeFailure."""
    results: list[RenderResult] | None
    error = ""
    try:
        if renderer.keeper is not None:
            action = renderer.keeper.ensure_fresh()
            if action:
                log_event(f"vault.token.{action}", log, addr=renderer.settings.addr)
        results = renderer.render()
    except RuntimeFailure as first:
        results, error = _retry_after_login(renderer, first, log)
    except Exception as exc:  # a sidecar keeps its last good files rather than crash-looping
        error = f"unexpected {type(exc).__name__}"
        log_event("vault.refresh.failed", log, error=error)
        results = None
    record_refresh([output.path for output in renderer.outputs], results is not None, error)
    for result in results or []:
        if result.written:
            log_render(result, log)


def _retry_after_login(
    renderer: Renderer, error: RuntimeFailure, log: TextIO | None
) -> tuple[list[RenderResult] | None, str]:
    """A revoked or expired token shows up as 'permission denied': log in once more and retry.
    The results, or None and the error that was logged."""
    if (
        renderer.keeper is not None
        and renderer.settings.can_login_again()
        and "denied" in str(error)
    ):
        try:
            renderer.keeper.relogin()
            log_event("vault.token.relogin", log, addr=renderer.settings.addr)
            return renderer.render(), ""
        except RuntimeFailure as second:
            error = second
    out = [str(output.path) for output in renderer.outputs]
    log_event("vault.refresh.failed", log, error=str(error), out=out)
    return None, str(error)
