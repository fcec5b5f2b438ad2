"""A second process that keeps taking online backups of the LCM database.

Run: ``python backup_reader.py DB STOP_FILE OUT_DIR``; prints one JSON line:
how many backups were taken, their integrity results and message counts,
and every error seen (a "database is locked" would show up here).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import apsw


def take_backup(source: apsw.Connection, target: Path) -> tuple[str, int]:
    """One online backup in one step; its quick_check and message count."""
    copy = apsw.Connection(str(target))
    try:
        with copy.backup("main", source, "main") as step:
            step.step(-1)
        check = str(copy.execute("PRAGMA quick_check").fetchall()[0][0])
        return check, int(copy.execute("SELECT count(*) FROM messages").fetchall()[0][0])
    finally:
        copy.close()


def main() -> int:
    db, stop, out_dir = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    report: dict[str, list] = {"counts": [], "checks": [], "errors": []}
    backups = 0
    while not stop.exists() or backups == 0:
        target = out_dir / f"backup-{backups % 2}.db"
        target.unlink(missing_ok=True)
        try:
            source = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
            source.set_busy_timeout(30_000)
            check, count = take_backup(source, target)
            report["checks"].append(check)
            report["counts"].append(count)
            source.close()
            backups += 1
        except apsw.Error as exc:
            report["errors"].append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.05)
    print(json.dumps({"backups": backups, **report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
