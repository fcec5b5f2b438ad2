"""docs/metrics.md is generated from the runtime's collectors (ci/gen-metrics-doc.py) and
stays in sync: a metric added, renamed or removed in the code fails here until the document
is generated again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "ci" / "gen-metrics-doc.py"
DOC = REPO / "docs" / "metrics.md"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], capture_output=True, text=True, timeout=120
    )


def test_docs_metrics_md_matches_the_code() -> None:
    result = run("--check")
    assert result.returncode == 0, result.stderr


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "metrics.md"
    lines = DOC.read_text().splitlines(keepends=True)
    stale.write_text("".join(line for line in lines if "hermes_runtime_ready" not in line))
    result = run("--check", "--output", str(stale))
    assert result.returncode == 1
    assert f"{stale} is out of date" in result.stderr


def test_every_source_is_listed() -> None:
    """One metric of each source: the entrypoint's own, one read from the backup record, one
    from the Vault record, LCM's, and the backup text file's."""
    text = DOC.read_text()
    for name in (
        "hermes_runtime_front_door_connections_total` | counter | `outcome`",
        "hermes_backup_last_success_timestamp_seconds` | gauge",
        "hermes_runtime_secrets_refresh_ok` | gauge",
        "lcm_embed_queue` | gauge",
        "hermes_backup_bytes_uploaded` | gauge",
    ):
        assert f"| `{name}" in text, name
