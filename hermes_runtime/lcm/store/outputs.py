"""Large outputs live beside the database, content-addressed, never inside it.

A 2 MB tool result or a base64 screenshot would bloat every page of SQLite,
every backup and every FTS merge; on disk under ``outputs/`` it costs one
file, written atomically, and the context carries a short stub instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from hermes_runtime.common.atomic import atomic_write_bytes
from hermes_runtime.lcm.records import OUTPUT_PREFIX

logger = logging.getLogger(__name__)

BASE64_RUN_CHARS = 1024
BASE64_RUN = re.compile(rf"[A-Za-z0-9+/=]{{{BASE64_RUN_CHARS},}}")
PREVIEW_BASE64 = re.compile(r"[A-Za-z0-9+/=]{120,}")
HEAD_CHARS, TAIL_CHARS = 600, 300


def needs_externalizing(content: Any, threshold_chars: int) -> bool:
    """True for content above the threshold or carrying a base64 blob."""
    if content is None:
        return False
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if len(text) > threshold_chars:
        return True
    # Shorter text cannot hold a run: most chat messages are never scanned.
    return len(text) >= BASE64_RUN_CHARS and BASE64_RUN.search(text) is not None


def encode_content(content: Any) -> tuple[bytes, str]:
    """Bytes to store and their encoding: strings as UTF-8 text, parts as JSON."""
    if isinstance(content, str):
        return content.encode("utf-8"), "text"
    return json.dumps(content, ensure_ascii=False).encode("utf-8"), "json"


def decode_content(data: bytes, encoding: str) -> Any:
    text = data.decode("utf-8")
    return text if encoding == "text" else json.loads(text)


def output_id_for(sha256: str) -> str:
    return f"{OUTPUT_PREFIX}{sha256[:24]}"


def relpath_for(sha256: str) -> str:
    return f"{sha256[:2]}/{sha256}"


def address(data: bytes) -> tuple[str, str]:
    """(sha256, relpath) of ``data``, without writing it."""
    sha = hashlib.sha256(data).hexdigest()
    return sha, relpath_for(sha)


def write_output(outputs_dir: Path, data: bytes) -> tuple[str, str]:
    """Write ``data`` once (same bytes, same file) and return (sha256, relpath).

    Atomic (a temp file renamed): a full volume leaves no part of a file, only an
    ``OSError`` (ENOSPC) for the caller, which writes it again with its row."""
    sha, rel = address(data)
    target = outputs_dir / rel
    if not target.exists() or target.stat().st_size != len(data):
        atomic_write_bytes(target, data, mode=0o640)
    return sha, rel


def write_output_later(outputs_dir: Path, data: bytes) -> tuple[str, str]:
    """``write_output``, or on a full volume (``OSError``) only its address: the store
    writes the file with its row (``LcmStore._record_output``), or holds both."""
    try:
        return write_output(outputs_dir, data)
    except OSError as exc:
        sha, rel = address(data)
        logger.info("LCM: output %s not written yet (%s); written with its row", rel, exc)
        return sha, rel


def preview(text: str, limit: int) -> str:
    return PREVIEW_BASE64.sub(lambda m: f"[base64 {len(m.group(0))} chars]", text[:limit])


def make_stub(output_id: str, size: int, role: str, text: str) -> str:
    """The short text the context carries instead of the full output."""
    head = preview(text, HEAD_CHARS)
    tail = preview(text[-TAIL_CHARS:], TAIL_CHARS) if len(text) > HEAD_CHARS else ""
    lines = [
        f"[LCM externalized {role} output {output_id}: {size} bytes. "
        f'Read it with lcm_read_output(id="{output_id}", offset=0, limit=8000).]',
        "--- head ---",
        head,
    ]
    if tail:
        lines += ["--- tail ---", tail]
    return "\n".join(lines)
