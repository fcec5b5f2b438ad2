"""The one rule every ``ci/gen-*.py`` generator follows for the file it owns.

``--check`` compares the committed file with what the generator renders and exits 1 naming the
command that brings it up to date (the tests run each generator so); otherwise the rendered
text replaces the file through a temporary file in the same folder, so an interrupted run never
leaves half a file behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def write_or_check(path: Path, text: str, regenerate: str, check: bool) -> int:
    """With ``check``: 0 when ``path`` holds ``text``, else 1 and a line naming ``regenerate``.
    Without: write ``text`` to ``path`` atomically; 0."""
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run {regenerate}", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return 0
