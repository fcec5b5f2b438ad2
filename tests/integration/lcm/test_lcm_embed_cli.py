"""`hermes-runtime lcm embed` and what changed around it, as an operator runs them.

Subprocesses on real files with the real default model (e5 on ONNX Runtime):
an import leaves its items to embed, ``lcm search`` says so instead of
embedding them in memory, ``lcm embed`` (or ``lcm import --embed``) stores
them, a killed job resumes, a job runs beside a live Hermes gateway whose
worker drains the same queue, and ``lcm doctor`` says how long is left.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, rows_when
from support.lcm_conversations import simple_conversation

BIN = Path(sys.executable).parent


def cli(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "lcm", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(*args: str | Path) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def jsonl(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def numbered(count: int) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [
        {"role": roles[i % 2], "content": f"note {i}: the shipment for order {i} left the depot"}
        for i in range(count)
    ]


def vector_rows(db: Path) -> tuple[int, int]:
    """(vectors, distinct items) of the default model in ``db``."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        model = conn.execute("SELECT model FROM embeddings LIMIT 1").fetchall()
        if not model:
            return 0, 0
        row = conn.execute(
            "SELECT count(*), count(DISTINCT kind || item_id) FROM embeddings WHERE model = ?",
            (model[0][0],),
        ).fetchall()[0]
        return int(row[0]), int(row[1])
    finally:
        conn.close()


def test_search_after_an_import_says_what_waits_and_embeds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    ok("import", "--db", db, "--session", "chat", jsonl(tmp_path / "c.jsonl", numbered(300)))
    items = ok("stats", "--db", db)["messages"] + ok("stats", "--db", db)["summaries"]
    found = ok("search", "--db", db, "--mode", "vector", "shipment of order 12")
    assert found["results"] == [] and found["pending_embeddings"] == items
    text = cli("search", "--db", db, "shipment of order 12")
    assert text.returncode == 0, text.stderr
    assert f"{items} items not embedded yet" in text.stdout and "lcm embed" in text.stdout
    assert ok("stats", "--db", db)["embeddings"] == 0  # read-only: nothing stored


def test_import_with_embed_leaves_nothing_to_embed(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    messages = simple_conversation(40)
    imported = ok("import", "--db", db, "--session", "c", jsonl(tmp_path / "c.jsonl", messages),
                  "--budget", "3000", "--embed")  # fmt: skip
    stats = ok("stats", "--db", db)
    items = stats["messages"] + stats["summaries"]
    assert imported["embedding"]["embedded"] == items and imported["embedding"]["remaining"] == 0
    assert stats["embed_queue"] == 0 and vector_rows(db) == (items, items)
    found = ok("search", "--db", db, "--mode", "vector", "question about topic7")
    assert found["pending_embeddings"] == 0 and found["results"]


def test_a_killed_embed_resumes_and_embeds_each_item_once(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    ok("import", "--db", db, "--session", "big", jsonl(tmp_path / "b.jsonl", numbered(1_500)))
    job = subprocess.Popen(
        [sys.executable, "-m", "hermes_runtime", "lcm", "embed", "--db", str(db),
         "--threads", "1", "--batch-size", "32"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while vector_rows(db)[0] == 0:
        assert job.poll() is None and time.monotonic() < deadline, "no batch was committed"
        time.sleep(0.02)
    job.send_signal(signal.SIGKILL)
    job.wait(30)
    done_before, _ = vector_rows(db)
    assert 0 < done_before < 1_500 and done_before % 32 == 0  # whole batches only
    resumed = ok("embed", "--db", db)
    assert resumed["embedded"] == 1_500 - done_before and resumed["remaining"] == 0
    assert vector_rows(db) == (1_500, 1_500)
    assert ok("stats", "--db", db)["embed_queue"] == 0


def test_embed_beside_a_running_gateway_whose_worker_drains_the_same_queue(
    tmp_path: Path, make_gateway: Any, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway(gateway_config(fake_llm, {"embeddings": "e5"}))
    gateway.start()
    gateway.chat("The gateway opens lcm.db with this turn.")
    db = gateway.db_path
    ok("import", "--db", db, "--session", "old", jsonl(tmp_path / "o.jsonl", numbered(2_000)))
    job = subprocess.Popen(
        [sys.executable, "-m", "hermes_runtime", "lcm", "embed", "--db", str(db), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    answers = [gateway.chat(f"turn {i} beside the job: pier amaranth-{i}").text for i in range(5)]
    out, err = job.communicate(timeout=600)
    assert job.returncode == 0, err
    result = json.loads(out)
    assert all(answers) and gateway.healthy()
    rows = rows_when(  # the gateway's last turns, committed and embedded by its worker
        db,
        "SELECT count(*) FROM embed_queue",
        lambda r: r[0][0] == 0,
        timeout=120,
    )
    assert rows[0][0] == 0
    stats = ok("stats", "--db", db)
    items = stats["messages"] + stats["summaries"]
    assert vector_rows(db) == (items, items)  # every item once: nothing embedded twice
    assert 0 < result["embedded"] + result["already"] <= items
    assert ok("doctor", "--db", db)["ok"] is True


def test_doctor_says_how_long_until_everything_is_searchable(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    ok("import", "--db", db, "--session", "c", jsonl(tmp_path / "c.jsonl", numbered(400)))
    report = ok("doctor", "--db", db)["embeddings"]
    assert report["not_embedded"] == 400 and report["queued"] == 400
    assert report["items_per_s_one_core"] > 0 and report["eta_worker_s"] > 0
    assert report["eta_embed_s"] > 0
    text = cli("doctor", "--db", db)
    assert "400 items not embedded yet" in text.stdout and "searchable in about" in text.stdout
    ok("embed", "--db", db)
    assert ok("doctor", "--db", db)["embeddings"]["not_embedded"] == 0


def test_on_a_terminal_embed_draws_a_bar_with_the_rate(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    ok("import", "--db", db, "--session", "c", jsonl(tmp_path / "c.jsonl", numbered(200)))
    parent, child = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "lcm", "embed", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=child, text=True, timeout=300, check=False,
        env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    os.close(child)
    screen = b""
    while True:
        try:
            chunk = os.read(parent, 65_536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.close(parent)
    assert done.returncode == 0 and "embedded 200 items" in done.stdout
    drawn = screen.decode(errors="replace")
    assert "200/200" in drawn and "items/s" in drawn and "lcm.embed.progress" not in drawn
