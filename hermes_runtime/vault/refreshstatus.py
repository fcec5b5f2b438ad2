"""The refresher's last outcome, beside each env file it keeps fresh, for the agent's /metrics.

Why a file: the refresher is another container of the pod, and a failed refresh only shows
in its own log; the agent container mounts the same in-memory volume, so its /metrics reads
this record at scrape time (as it reads the backup's status on the data volume) and can say
"Vault unreachable, last secrets kept since ...". No secret value ever goes in: times, a
count and the error, whose text names the address and the cause, never a value (the same
text `vault.refresh.failed` logs).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from hermes_runtime.common.atomic import atomic_write_text

STATUS_NAME = "refresh-status.json"
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class RefreshStatus:
    last_attempt_timestamp: float
    last_attempt_ok: bool
    last_success_timestamp: float | None
    failures_total: int
    error: str = ""


def refresh_status_path(env_file: Path) -> Path:
    """Where the status of the refresher keeping ``env_file`` fresh is (same folder)."""
    return env_file.parent / STATUS_NAME


def read_refresh_status(path: Path) -> RefreshStatus | None:
    """The record, or None when there is none or it is not one (never raises)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return RefreshStatus(**raw)
    except (OSError, ValueError, TypeError):
        return None


def record_refresh(
    env_files: Iterable[Path], ok: bool, error: str = "", now: float | None = None
) -> None:
    """Note one refresh beside each env file (atomic replace); a failure keeps the last
    success's time and counts one more failure. A write that fails is not the refresh's
    failure: the status is a report, the env files are what matters."""
    moment = time.time() if now is None else now
    for env_file in env_files:
        path = refresh_status_path(env_file)
        previous = read_refresh_status(path)
        earlier = previous.last_success_timestamp if previous else None
        status = RefreshStatus(
            last_attempt_timestamp=moment,
            last_attempt_ok=ok,
            last_success_timestamp=moment if ok else earlier,
            failures_total=(previous.failures_total if previous else 0) + (0 if ok else 1),
            error="" if ok else error[:MAX_ERROR_CHARS],
        )
        try:
            atomic_write_text(path, json.dumps(asdict(status)) + "\n", mode=0o644)
        except OSError:
            continue
