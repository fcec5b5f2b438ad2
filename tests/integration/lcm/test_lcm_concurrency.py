"""Several sessions ingest and compact on threads while another process backs the database up.

The anchors' users reported "database is locked" storms and lost messages;
here every write takes the lock up front (BEGIN IMMEDIATE) and waits on the
busy timeout, so nothing fails and nothing is lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from support.lcm_conversations import reconstruct, simple_conversation

from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.textsearch import grep

READER = Path(__file__).with_name("backup_reader.py")
SESSIONS = 4


def test_parallel_sessions_with_a_backup_process(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    policy = CompactionPolicy(fresh_tail_messages=4, leaf_chunk_tokens=300)
    engine = LcmEngine(LcmConfig(**{**config.__dict__, "policy": policy}))
    engine.ingest("warmup", [{"role": "user", "content": "create the schema first"}])
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, str(READER), str(config.db_path), str(stop), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    expected = simple_conversation(40, filler=15)
    errors: list[BaseException] = []

    def writer(session: str) -> None:
        try:
            for message in expected:
                engine.ingest(session, [message])  # one transaction per message
                if message["role"] == "assistant" and message.get("content"):
                    engine.compactions.compact(session, 700)
        except BaseException as exc:
            errors.append(exc)

    def searcher() -> None:
        try:
            for _ in range(200):
                grep(engine.store, "topic3")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"s{i}",)) for i in range(SESSIONS)]
    threads.append(threading.Thread(target=searcher))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.touch()
    out, _ = reader.communicate(timeout=120)
    report = json.loads(out)

    assert errors == []
    assert report["errors"] == []
    assert report["backups"] >= 1 and set(report["checks"]) == {"ok"}
    assert report["counts"] == sorted(report["counts"])  # backups never go back in time
    for i in range(SESSIONS):
        context = engine.context(f"s{i}")
        assert reconstruct(engine.store, context) == expected
    counts = dict(engine.store.conn.execute("SELECT session_id, count(*) FROM messages GROUP BY 1"))
    assert all(counts[f"s{i}"] == len(expected) for i in range(SESSIONS))
    engine.close()
