"""Near-copies wait: a result that mostly repeats an earlier one's words moves down.

Copy folding (``hybrid._copies``) merges results of identical content. A long history also
repeats a line with other words around it (an agent's boilerplate, a status line in every
tool output, a user's habitual phrase): distinct contents, each ranked for the same words,
and together they can fill every slot of the top results while the one message that answers
the question waits below them. So, walking the fused ranking, a candidate whose word set
overlaps a chosen result's by more than ``threshold`` (Jaccard) is deferred behind the
candidates that do not; deferred ones fill the slots left.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)

WORD = re.compile(r"\w+")
# Enough of an item to tell a near-copy: a long output's opening decides like its whole.
READ_CHARS = 1_000


def word_set(text: str) -> frozenset[str]:
    return frozenset(WORD.findall(text[:READ_CHARS].lower()))


def overlap(one: frozenset[str], other: frozenset[str]) -> float:
    union = len(one | other)
    return len(one & other) / union if union else 1.0


def diversified(
    ordered: Sequence[Key], text_of: Callable[[Key], str | None], threshold: float, wanted: int
) -> list[Key]:
    """``ordered`` with near-copies of the first ``wanted`` choices moved behind them.

    Words are read only for the candidates the walk reaches (``text_of``: None for an item
    whose text is unknown, which is never deferred); ``threshold`` >= 1 changes nothing.
    """
    if threshold >= 1.0:
        return list(ordered)
    chosen: list[tuple[Key, frozenset[str] | None]] = []
    deferred: list[Key] = []
    for position, key in enumerate(ordered):
        if len(chosen) == wanted:
            return [*(k for k, _ in chosen), *deferred, *ordered[position:]]
        text = text_of(key)
        mine = None if text is None else word_set(text)
        if mine is not None and any(
            theirs is not None and overlap(mine, theirs) > threshold for _, theirs in chosen
        ):
            deferred.append(key)
        else:
            chosen.append((key, mine))
    return [*(k for k, _ in chosen), *deferred]
