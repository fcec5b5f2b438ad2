"""User text to an FTS5 query: quoted terms, so the text can never inject FTS5 syntax.

Why a module of its own: grep (AND of every term) and hybrid search (OR of
the selective terms of a question) build their queries the same way, and a
stray ``"`` or ``NEAR(`` in what a model sends must stay just a word in both.
"""

from __future__ import annotations

import re

TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32

_STOPWORD_TEXT = (
    "a an and are as at be by can could did do does for from had has have how i if in "
    "is it its me my no not of on or our so than that the their them then there these "
    "they this to too up us was we were what when where which who why will with would "
    "you your"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split(" "))


def fts_query(text: str, any_term: bool = False, prefix: bool = False) -> str | None:
    """Quote every word: safe against FTS5 syntax, AND by default, OR for recall.

    The OR form (used by hybrid search for questions) drops stopwords, which
    would otherwise match nearly every message. ``prefix`` lets terms of four
    letters or more match as prefixes (a quoted term followed by ``*``).
    """
    quoted = quoted_terms(text, any_term, prefix)
    return (" OR " if any_term else " ").join(quoted) if quoted else None


def quoted_terms(text: str, any_term: bool, prefix: bool) -> list[str]:
    terms = TERM.findall(text)[:MAX_TERMS]
    if any_term:
        terms = [t for t in terms if t.lower() not in STOPWORDS] or terms
    return [f'"{t}"*' if prefix and len(t) >= 4 else f'"{t}"' for t in terms]
