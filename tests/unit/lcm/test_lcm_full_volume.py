"""LCM on a data volume that fills up (issue 30), on a real size-limited tmpfs.

Hermes' API server hands the turn hook only the request's transcript: a client that sends its
own history (an OpenAI client) sends the opening exchange and the new turn, and Hermes' own
``state.db`` fails on the same full volume. A turn the hook could not store was therefore
never handed to LCM again: 45-60 answered turns were missing after a full volume (e2e,
docs/benchmarks.md). What must hold: a turn write the volume refuses is held in memory and
committed once there is room, each turn stored once (also when a later sync re-sends the
transcript), the database intact, and the metrics and the log say so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from prometheus_client import REGISTRY
from support.fullvolume import fill, refuses_a_new_file, remount, small_tmpfs
from support.lcm_conversations import SYSTEM, make_hermes_engine

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.store import dag, messagereads, writebehind
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import LcmVolumeRefused

OPENING = "conversation of client A"
WAIT_SECONDS = 60  # a deadline for the held writes, never a timing assertion


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "volume", mib=4) as mounted:
        yield mounted


def request(turn: int) -> list[dict[str, Any]]:
    """The transcript Hermes hands the hook for one request of a history-sending client."""
    marker = f"[A:{turn:05d}]"
    return [
        SYSTEM,
        {"role": "user", "content": OPENING},
        {"role": "assistant", "content": f"Echo: {OPENING}"},
        {"role": "user", "content": f"{marker} question " + "words " * 40},
        {"role": "assistant", "content": f"Echo: {marker}"},
    ]


def hook(engine: LcmContextEngine, turn: int) -> None:
    engine._shared.store_turn(session_id="session-1", conversation_history=request(turn))


def stored(db: Path) -> list[str]:
    """User contents in the file, read by another connection (what a crash would keep)."""
    conn = connect(db, readonly=True)
    try:
        rows = conn.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY seq")
        return [str(r[0]) for r in rows]
    finally:
        conn.close()


def integrity(db: Path) -> str:
    conn = connect(db, readonly=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchall()[0][0])
    finally:
        conn.close()


def expected(turns: range) -> list[str]:
    return [OPENING] + [request(t)[3]["content"] for t in turns]


def wait_stored(db: Path, want: list[str]) -> list[str]:
    deadline = time.monotonic() + WAIT_SECONDS
    while (found := stored(db)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def wait_held(behind: writebehind.WriteBehind) -> None:
    """Until the queue's writer (or the hook itself) has tried the writes and held them."""
    deadline = time.monotonic() + WAIT_SECONDS
    while behind.held is None:
        assert time.monotonic() < deadline, "the queued writes were never tried"
        time.sleep(0.01)


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


@pytest.mark.parametrize("commit_interval_ms", [0, 50], ids=["each-turn", "group-commit"])
def test_turns_answered_on_a_full_volume_are_held_and_stored_once_when_space_returns(
    volume: Path, commit_interval_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    home = volume / "home"
    engine = make_hermes_engine(home, commit_interval_ms=commit_interval_ms)
    db = home / "lcm.db"
    for turn in range(3):
        hook(engine, turn)
    engine.engine.flush()
    assert stored(db) == expected(range(3))
    failures = metric("lcm_storage_failures_total")

    ballast = fill(volume)
    assert refuses_a_new_file(volume)
    with caplog.at_level(logging.WARNING, logger=writebehind.__name__):
        for turn in range(3, 8):
            hook(engine, turn)
            hook(engine, turn)  # the same transcript again (a retried sync): nothing new
        behind = engine.engine.store.group_commit
        assert behind is not None
        wait_held(behind)
        assert isinstance(behind.held, apsw.FullError), behind.held
        assert stored(db) == expected(range(3))  # the volume refused them: not in the file
        assert metric("lcm_turn_writes_held") >= 1
        assert metric("lcm_storage_failures_total") > failures
        assert "held in memory" in caplog.text and "session-1" in caplog.text
        tried = behind.failures
        deadline = time.monotonic() + WAIT_SECONDS
        while behind.failures == tried:  # the writer thread tries again, still full: held
            assert time.monotonic() < deadline, "the held writes were never tried again"
            time.sleep(0.05)
        assert behind.held is not None

        ballast.unlink()  # space is back: the writer thread commits what it held
        assert wait_stored(db, expected(range(8))) == expected(range(8))
    assert "the volume takes writes again" in caplog.text
    assert behind.held is None
    assert metric("lcm_turn_writes_held") == 0

    hook(engine, 7)  # the last transcript once more, then a new turn: each stored once
    hook(engine, 8)
    engine.engine.flush()
    assert stored(db) == expected(range(9))
    engine.engine.close()
    assert stored(db) == expected(range(9))
    assert integrity(db) == "ok"


def test_an_externalized_output_written_on_a_full_volume_is_held_with_its_row(
    volume: Path,
) -> None:
    """A big tool result goes to ``outputs/`` (its own file) before its row: on a full volume
    neither can be written. Both are held and written together once there is room."""
    store = LcmStore(volume / "lcm.db", volume / "outputs", externalize_chars=2_000)
    store.ingest("s", {"role": "user", "content": "run the tool"})
    big = "".join(f"line {i}: result value {i * 7919 % 104729}\n" for i in range(6_000))
    fill(volume)
    assert store.ingest_many("s", [{"role": "tool", "content": big}], defer=True) == []
    behind = store.group_commit
    assert behind is not None
    wait_held(behind)
    assert not any(p.is_file() for p in (volume / "outputs").rglob("*"))  # nothing half-written
    (volume / "ballast.bin").unlink()

    deadline = time.monotonic() + WAIT_SECONDS
    while behind.held is not None or not behind.settled():
        assert time.monotonic() < deadline, "the held output was never written"
        time.sleep(0.05)
    (message,) = [
        m for m in dag.context_items(store, "s") if m.message and m.message.role == "tool"
    ]
    assert message.message is not None and message.message.output_id is not None
    assert messagereads.full_message(store, message.message)["content"] == big
    assert store.counts()["outputs"] == 1 and store.counts()["messages"] == 2
    files = [p for p in (volume / "outputs").rglob("*") if p.is_file()]
    assert [p.read_text() for p in files] == [big]  # one file, no temp file left
    store.close()
    assert integrity(volume / "lcm.db") == "ok"


def test_a_turn_whose_reply_the_host_lost_on_the_full_volume_is_stored_once(
    volume: Path,
) -> None:
    """Hermes kept the user message of the turn in flight in its ``state.db`` but not its
    reply (the volume was full); LCM held both. Hermes merges that user message into the
    next one (``"X\\n\\nY"``): LCM stores Y alone, not X a second time (issue 30, the e2e's
    ``[A:00063]``)."""
    home = volume / "home"
    engine = make_hermes_engine(home, commit_interval_ms=0)
    db = home / "lcm.db"
    asked = [{"role": "user", "content": f"[S:{t:03d}] question"} for t in range(4)]
    replies = [{"role": "assistant", "content": f"Echo: [S:{t:03d}]"} for t in range(4)]
    history = [SYSTEM, asked[0], replies[0], asked[1], replies[1]]
    engine._shared.store_turn(session_id="session-1", conversation_history=list(history))
    ballast = fill(volume)
    in_flight = [*history, asked[2], replies[2]]
    engine._shared.store_turn(session_id="session-1", conversation_history=in_flight)
    ballast.unlink()
    want = [m["content"] for m in asked[:3]]
    assert wait_stored(db, want) == want  # held, then stored

    merged = {"role": "user", "content": asked[2]["content"] + "\n\n" + asked[3]["content"]}
    after = [*history, merged, {"role": "assistant", "content": "Echo: " + merged["content"]}]
    engine._shared.store_turn(session_id="session-1", conversation_history=after)
    engine.engine.flush()
    assert stored(db) == [m["content"] for m in asked]
    engine.engine.close()
    assert integrity(db) == "ok"


def test_a_start_on_a_read_only_volume_blames_the_volume_not_the_file(volume: Path) -> None:
    """Without its ``-shm`` file (the last connection's clean close removes it, as does a copy
    of the database alone), opening a WAL database must create it, which a read-only volume
    refuses. The error names the volume's state (it said "not a readable SQLite database",
    which sends an operator after a restore), the file stays as it was, and the store opens
    once the volume is writable again."""
    db = volume / "lcm.db"
    store = LcmStore(db)
    store.stop_fulltext()
    store.close()
    for name in ("lcm.db", "lcm-fts.db"):  # everything into the database files, then no WAL
        conn = connect(volume / name)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    for leftover in [*volume.glob("*-wal"), *volume.glob("*-shm")]:
        leftover.unlink()
    before = db.read_bytes()
    remount(volume, "ro")
    try:
        with pytest.raises(LcmVolumeRefused) as refused:
            LcmStore(db)
    finally:
        remount(volume, "rw")
    message = str(refused.value)
    assert str(db) in message and "its volume is mounted read-only" in message
    assert "not a readable SQLite database" not in message
    assert db.read_bytes() == before
    reopened = LcmStore(db)
    reopened.stop_fulltext()
    reopened.close()
