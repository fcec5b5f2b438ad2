"""``create_backup`` in a process of its own, the agent's moves made at its scan-to-copy hook.

Its own process, so that ``/proc/self`` is the backup's and its environment (the repository
password, the test's marker) was there when it started: what a link into ``/proc/self``
would reach. Prints the summary as JSON; the log lines go to stderr.

Usage: python hostile_create.py SPEC_JSON, SPEC = {"data", "url", "work", "openat2",
"links": [[relpath, target], ...] (each folder moved aside and replaced by a link),
"fifos": [relpath, ...] (each file replaced by a FIFO)}.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from hermes_runtime.backup import create_backup, open_repository, safe_tree


def main(spec: dict) -> None:
    data = Path(spec["data"])
    safe_tree.OPENAT2 = bool(spec["openat2"]) and safe_tree.OPENAT2

    def agent_moves() -> None:
        for relpath, target in spec["links"]:
            (data / relpath).rename(data.parent / f"{relpath.replace('/', '-')}-moved")
            (data / relpath).symlink_to(target)
        for relpath in spec["fifos"]:
            (data / relpath).unlink()
            os.mkfifo(data / relpath)

    summary = create_backup(
        data,
        open_repository(spec["url"]),
        work_dir=Path(spec["work"]),
        between_scan_and_copy=agent_moves,
    )
    print(json.dumps(asdict(summary)))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
