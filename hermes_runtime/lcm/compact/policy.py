"""The knobs of a compaction, apart from the code that runs one.

Why a module of its own: the settings (``lcm/config.py``) are read by processes that never
compact (the agent's entrypoint checks the LCM config for ``/ready``), and must not load the
summarizers, the store and their HTTP client to learn the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompactionPolicy:
    """Knobs with defaults that suit a 128k-token model."""

    fresh_tail_messages: int = 8
    leaf_chunk_tokens: int = 6_000
    leaf_target_tokens: int = 800
    condense_fanout: int = 4
    condense_target_tokens: int = 1_200
    call_timeout_seconds: float = 30.0
    deadline_seconds: float = 90.0
