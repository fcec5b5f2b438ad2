"""A turn's sync reads only what the host appended (``hostview.py``).

It must store exactly what reading the whole transcript stores, whatever the
host does to its list between syncs: append, edit a message in place (Hermes
does), edit a tool call's arguments deep inside, swap a message for an equal
copy, quote a summary header, take back a compacted context. Two engines
get the same host transcripts, one with views and one without (every sync
reads the whole transcript); after every step their databases must agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.lcm_conversations import SYSTEM, make_hermes_engine, tool_turn

from hermes_runtime.lcm.compact.assembly import count_tokens
from hermes_runtime.lcm.engine import hostsync
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.records import message_tokens
from hermes_runtime.lcm.store import sessions

SESSION = "session-1"


def hook(engine: LcmContextEngine, history: list[dict[str, Any]]) -> None:
    engine._shared.store_turn(session_id=SESSION, conversation_history=list(history))


def snapshot(engine: LcmContextEngine) -> tuple[list[tuple[Any, ...]], str | None]:
    store = engine.engine.store
    rows = store.conn.execute(
        "SELECT seq, role, content, tool_calls, tool_call_id FROM messages ORDER BY seq"
    )
    return [tuple(row) for row in rows], sessions.host_state_text(store, SESSION)


class Pair:
    """The engine under test (views) and the reference (whole transcript every sync)."""

    def __init__(self, tmp_path: Path) -> None:
        self.fast = make_hermes_engine(tmp_path / "fast", fresh_tail_messages=4)
        self.full = make_hermes_engine(tmp_path / "full", fresh_tail_messages=4)
        self.full.engine._views = hostsync.HostViews(capacity=0)
        # Each engine's host list; they share message dicts until a compaction.
        self.hosts: dict[str, list[dict[str, Any]]] = {"fast": [SYSTEM], "full": [SYSTEM]}
        self.turns = 0

    def engines(self) -> list[tuple[str, LcmContextEngine]]:
        return [("fast", self.fast), ("full", self.full)]

    def append_turn(self, tools: int) -> None:
        text = f"question {self.turns} " + "words " * 30
        turn = tool_turn(self.turns, text, [f"result {n} " * 20 for n in range(tools)])
        self.turns += 1
        for host in self.hosts.values():
            host += turn

    def edit(self, index: int, what: str) -> None:
        """Change a message of both hosts in place (or swap it for a copy)."""
        if what == "header":  # a user quotes a summary header that is not a block of ours
            quoted = {"role": "user", "content": "[LCM summary sum_1 | depth 0] quoted"}
            for host in self.hosts.values():
                host.append(quoted)
            return
        edited: set[int] = set()  # the hosts share dicts until a compaction: edit each once
        for host in self.hosts.values():
            if len(host) < 2:
                return
            position = 1 + index % (len(host) - 1)
            message = host[position]
            if what == "copy":  # an equal message, another object (a reload from state.db)
                host[position] = dict(message)
                continue
            if id(message) in edited:
                continue
            edited.add(id(message))
            if what == "content" and isinstance(message.get("content"), str):
                message["content"] = message["content"] + " (edited)"
            elif what == "arguments" and message.get("tool_calls"):
                message["tool_calls"][0]["function"]["arguments"] = '{"n": "edited"}'

    def sync(self, how: str) -> None:
        for name, engine in self.engines():
            if how == "hook":
                hook(engine, self.hosts[name])
            else:
                self.hosts[name] = engine.compress(list(self.hosts[name]), current_tokens=30_000)

    def check(self) -> None:
        assert snapshot(self.fast) == snapshot(self.full)


def test_an_appending_host_takes_the_view_and_stores_each_turn_once(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    for turn in range(6):
        pair.append_turn(tools=turn % 2)
        pair.sync("hook")
        pair.check()
    view = pair.fast.engine._views.get(SESSION)
    assert view is not None
    host = pair.hosts["fast"]
    fields = hostsync.columns(host)
    assert fields is not None and view.appended(host, fields) == len(host)
    host[3]["content"] += " (edited)"  # Hermes rewrites a message: the view no longer holds
    fields = hostsync.columns(host)
    assert fields is not None and view.appended(host, fields) is None
    rows, _ = snapshot(pair.fast)
    assert len(rows) == len(host) - 1  # the system message is the host's, not stored


def test_edits_copies_quoted_headers_and_compactions_store_what_a_full_read_stores(
    tmp_path: Path,
) -> None:
    pair = Pair(tmp_path)
    steps = [
        ("turn", 0),
        ("turn", 2),
        ("edit", "arguments"),
        ("turn", 0),
        ("edit", "content"),
        ("turn", 1),
        ("edit", "copy"),
        ("compress", None),
        ("turn", 0),
        ("edit", "header"),
        ("turn", 0),
        ("compress", None),
        ("turn", 1),
    ]
    for index, (step, arg) in enumerate(steps):
        if step == "turn":
            pair.append_turn(tools=int(arg or 0))
            pair.sync("hook")
        elif step == "edit":
            pair.edit(index * 7, str(arg))
            pair.sync("hook")
        else:
            pair.sync("compress")
        pair.check()
        pair.sync("hook")  # the same transcript again stores nothing more
        pair.check()


operations = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 2)),
        st.tuples(
            st.just("edit"),
            st.integers(0, 1_000),
            st.sampled_from(["content", "arguments", "copy", "header"]),
        ),
        st.tuples(st.just("compress")),
        st.tuples(st.just("hook")),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=operations)
def test_any_host_behaviour_stores_what_a_full_read_stores(
    tmp_path_factory: Any, steps: list[tuple[Any, ...]]
) -> None:
    pair = Pair(tmp_path_factory.mktemp("views"))
    for step in steps:
        if step[0] == "turn":
            pair.append_turn(tools=step[1])
            pair.sync("hook")
        elif step[0] == "edit":
            pair.edit(step[1], step[2])
        else:
            pair.sync(step[0])
        pair.check()


message_shapes = st.one_of(
    st.builds(
        lambda role, text: {"role": role, "content": text},
        st.sampled_from(["user", "assistant", "system"]),
        st.text(max_size=40),
    ),
    st.just({"role": "assistant", "content": None}),
    st.just({"role": "user", "content": [{"type": "text", "text": "parts"}]}),
    st.just({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "x"}]}),
    st.just({"role": "assistant", "content": "x", "tool_calls": []}),
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(message_shapes, max_size=12))
def test_the_plain_transcript_count_equals_the_per_message_count(
    messages: list[dict[str, Any]],
) -> None:
    assert count_tokens(messages) == sum(message_tokens(m) for m in messages)
