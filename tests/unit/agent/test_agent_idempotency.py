"""The durable Idempotency-Key cache (hermes_runtime/agent/idempotency.py) on a real SQLite file.

Hermes' semantics (hit, miss, another fingerprint, one run for concurrent retries) plus what
the cache adds: answers on disk, read by a second cache on the same file (a restarted
gateway), even after the first process was killed with SIGKILL right after its answer; TTL and
size cap; answers JSON cannot hold kept in memory. The install is pinned against the installed
Hermes (0.19.0) in a subprocess, through the gateway process's own ``__main__``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.agent.idempotency import (
    RESULT_FIELDS,
    AnswerStore,
    DurableIdempotencyCache,
    hermes_cache_problem,
    idempotency_db_path,
    install,
    key_digest,
)
from hermes_runtime.common.sqlite import connect

TTL = 300.0


@dataclass
class Clock:
    """Wall-clock seconds the test moves by hand (the cache's rows outlive processes)."""

    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Agent:
    """Stands in for Hermes' ``_run_agent``: counts runs, answers ``(result, usage)``."""

    runs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def compute(self, text: str) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            self.runs += 1
            result = {"final_response": f"{text} #{self.runs}", "session_id": "s1", **self.extra}
            return result, {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}

        return run


def open_cache(path: Path, clock: Clock, max_entries: int = 1000) -> DurableIdempotencyCache:
    return DurableIdempotencyCache.open(path, TTL, max_entries, clock)


def rows(path: Path) -> list[tuple[Any, ...]]:
    conn = connect(path, readonly=True)
    try:
        return [tuple(r) for r in conn.execute("SELECT * FROM answers ORDER BY created")]
    finally:
        conn.close()


def ask(cache: DurableIdempotencyCache, key: str, fingerprint: str, agent: Agent) -> Any:
    return asyncio.run(cache.get_or_set(key, fingerprint, agent.compute("answer")))


def test_the_same_key_and_fingerprint_get_the_first_answer(tmp_path: Path) -> None:
    cache, agent = open_cache(tmp_path / "i.db", Clock()), Agent()
    first = ask(cache, "k1", "fp", agent)
    assert ask(cache, "k1", "fp", agent) == first
    assert agent.runs == 1
    assert first[0]["final_response"] == "answer #1"


def test_another_key_runs_the_agent(tmp_path: Path) -> None:
    cache, agent = open_cache(tmp_path / "i.db", Clock()), Agent()
    ask(cache, "k1", "fp", agent)
    assert ask(cache, "k2", "fp", agent)[0]["final_response"] == "answer #2"
    assert agent.runs == 2


def test_another_fingerprint_under_the_key_runs_anew_and_replaces_the_answer(
    tmp_path: Path,
) -> None:
    """As Hermes' cache: the key keeps one answer, the newest fingerprint's."""
    cache, agent = open_cache(tmp_path / "i.db", Clock()), Agent()
    ask(cache, "k1", "fp-a", agent)
    assert ask(cache, "k1", "fp-b", agent)[0]["final_response"] == "answer #2"
    assert ask(cache, "k1", "fp-b", agent)[0]["final_response"] == "answer #2"
    assert ask(cache, "k1", "fp-a", agent)[0]["final_response"] == "answer #3"
    assert len(rows(tmp_path / "i.db")) == 1


def test_a_second_cache_on_the_file_answers_from_it(tmp_path: Path) -> None:
    """A restarted gateway: a new cache on the same file, nothing in memory."""
    path, clock = tmp_path / "i.db", Clock()
    agent = Agent(extra={"messages": [{"role": "user", "content": "hi"}], "api_calls": 1})
    first = ask(open_cache(path, clock), "k1", "fp", agent)
    again = ask(open_cache(path, clock), "k1", "fp", agent)
    assert agent.runs == 1
    result, usage = again
    assert usage == first[1]
    # Only what the handlers read is stored: api_calls is not among RESULT_FIELDS.
    assert result == {f: first[0][f] for f in RESULT_FIELDS if f in first[0]}
    assert "api_calls" not in result and result["messages"] == first[0]["messages"]


KILLED_AFTER_ANSWER = """
import asyncio, os, signal, sys
from pathlib import Path
from hermes_runtime.agent.idempotency import DurableIdempotencyCache

async def run():
    return {"final_response": "answered before the kill"}, {"total_tokens": 1}

cache = DurableIdempotencyCache.open(Path(sys.argv[1]), 300.0)
result, _ = asyncio.run(cache.get_or_set("k1", "fp", run))
print(result["final_response"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the gateway dies before the answer leaves it
"""


def test_an_answer_returned_is_committed_a_kill_does_not_lose_it(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_ANSWER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "answered before the kill"
    agent = Agent()
    result, _ = ask(open_cache(path, Clock()), "k1", "fp", agent)
    assert result["final_response"] == "answered before the kill"
    assert agent.runs == 0


def test_an_answer_older_than_the_ttl_runs_anew_and_its_row_is_purged(tmp_path: Path) -> None:
    path, clock, agent = tmp_path / "i.db", Clock(), Agent()
    cache = open_cache(path, clock)
    ask(cache, "old", "fp", agent)
    clock.now += TTL  # still within
    assert ask(cache, "old", "fp", agent)[0]["final_response"] == "answer #1"
    clock.now += 1
    ask(cache, "other", "fp", agent)  # a write purges what expired
    assert [r[0] for r in rows(path)] == [key_digest("other")]
    assert ask(cache, "old", "fp", agent)[0]["final_response"] == "answer #3"
    assert agent.runs == 3


def test_expired_rows_are_purged_when_a_gateway_opens_the_file(tmp_path: Path) -> None:
    path, clock = tmp_path / "i.db", Clock()
    ask(open_cache(path, clock), "k1", "fp", Agent())
    clock.now += TTL + 1
    open_cache(path, clock)
    assert rows(path) == []


def test_at_most_max_entries_are_kept_the_oldest_go_first(tmp_path: Path) -> None:
    path, clock, agent = tmp_path / "i.db", Clock(), Agent()
    cache = open_cache(path, clock, max_entries=3)
    for index in range(5):
        clock.now += 1
        ask(cache, f"k{index}", "fp", agent)
    assert len(rows(path)) == 3
    assert ask(cache, "k4", "fp", agent)[0]["final_response"] == "answer #5"
    assert ask(cache, "k0", "fp", agent)[0]["final_response"] == "answer #6"
    assert agent.runs == 6


def test_concurrent_retries_share_one_run(tmp_path: Path) -> None:
    """A retry that arrives while the first run is going waits for it: one run, one answer."""
    cache = open_cache(tmp_path / "i.db", Clock())
    runs = 0

    async def scenario() -> list[Any]:
        release = asyncio.Event()
        started = asyncio.Event()

        async def slow() -> Any:
            nonlocal runs
            runs += 1
            started.set()
            await release.wait()
            return {"final_response": "slow answer"}, {}

        first = asyncio.create_task(cache.get_or_set("k1", "fp", slow))
        await started.wait()
        waiters = [asyncio.create_task(cache.get_or_set("k1", "fp", slow)) for _ in range(3)]
        await asyncio.sleep(0)  # one loop step: each waiter runs up to its first await
        assert not any(w.done() for w in waiters), "a retry did not wait for the run"
        release.set()
        return await asyncio.gather(first, *waiters)

    answers = asyncio.run(scenario())
    assert runs == 1
    assert all(answer[0]["final_response"] == "slow answer" for answer in answers)


def test_a_client_that_gives_up_does_not_cancel_the_run(tmp_path: Path) -> None:
    """Its retry (or another client's) finds the answer stored."""
    path = tmp_path / "i.db"
    cache = open_cache(path, Clock())

    async def scenario() -> None:
        release = asyncio.Event()
        started = asyncio.Event()

        async def slow() -> Any:
            started.set()
            await release.wait()
            return {"final_response": "finished anyway"}, {}

        gone = asyncio.create_task(cache.get_or_set("k1", "fp", slow))
        await started.wait()
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        release.set()
        deadline = time.monotonic() + 10
        while not rows(path) and time.monotonic() < deadline:  # the run goes on and commits
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    agent = Agent()
    assert ask(open_cache(path, Clock()), "k1", "fp", agent)[0]["final_response"] == (
        "finished anyway"
    )
    assert agent.runs == 0


def test_a_failed_run_stores_nothing_and_the_retry_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    cache = open_cache(path, Clock())

    async def failing() -> Any:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        asyncio.run(cache.get_or_set("k1", "fp", failing))
    assert rows(path) == []
    agent = Agent()
    assert ask(cache, "k1", "fp", agent)[0]["final_response"] == "answer #1"


@pytest.mark.parametrize(
    "odd",
    [
        {"messages": [{"role": "tool", "content": {1, 2}}]},  # not JSON
        {"messages": [{"role": "tool", "content": ("a", "b")}]},  # a tuple comes back a list
        {"error": float("nan")},
    ],
)
def test_an_answer_json_cannot_hold_is_kept_in_memory_and_logged(
    tmp_path: Path, odd: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path, clock = tmp_path / "i.db", Clock()
    cache, agent = open_cache(path, clock), Agent(extra=odd)
    first = ask(cache, "secret-key", "fp", agent)
    assert ask(cache, "secret-key", "fp", agent) is first  # in memory: the very same answer
    assert agent.runs == 1
    assert rows(path) == []
    log = capsys.readouterr().err
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events] == ["agent.idempotency.memory_only"]
    assert "secret-key" not in log and "answer #1" not in log  # neither key nor answer
    assert ask(open_cache(path, clock), "secret-key", "fp", agent) != first  # not durable
    assert agent.runs == 2


def test_a_database_that_fails_never_fails_the_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reads and writes refused (here: the connection is gone): the turn runs, is answered,
    and its answer is kept in memory for the key."""
    cache, agent = open_cache(tmp_path / "i.db", Clock()), Agent()
    cache.store.close()
    first = ask(cache, "k1", "fp", agent)
    assert first[0]["final_response"] == "answer #1"
    assert ask(cache, "k1", "fp", agent) is first
    assert agent.runs == 1
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [e["event"] for e in events] == [
        "agent.idempotency.read_failed",
        "agent.idempotency.memory_only",
    ]
    assert events[1]["reason"].startswith("database: ")


def test_a_memory_only_answer_replaces_the_stored_one_for_its_key(tmp_path: Path) -> None:
    """The key's newest answer wins, as in Hermes' cache, wherever it is kept."""
    path, clock = tmp_path / "i.db", Clock()
    cache = open_cache(path, clock)
    ask(cache, "k1", "fp-a", Agent())
    ask(cache, "k1", "fp-b", Agent(extra={"messages": [{"content": {1}}]}))
    assert rows(path) == []
    agent = Agent()
    assert ask(cache, "k1", "fp-a", agent)[0]["final_response"] == "answer #1"
    assert agent.runs == 1


def test_the_stored_key_is_a_digest(tmp_path: Path) -> None:
    path = tmp_path / "i.db"
    ask(open_cache(path, Clock()), "client-key-7f3a", "fp", Agent())
    ((key, fingerprint, _created, response),) = rows(path)
    assert "client-key" not in key and len(key) == 64
    assert fingerprint == "fp"
    assert json.loads(response)["result"]["final_response"] == "answer #1"


def test_the_store_is_in_wal_mode(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "i.db", TTL, 10)
    store.close()
    conn = connect(tmp_path / "i.db", readonly=True)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    finally:
        conn.close()


# -- the install into Hermes ---------------------------------------------------------------


class SyncCache:
    def get_or_set(self, key: str, fingerprint: str, compute_coro: Any) -> Any:
        return None


class OtherSignature:
    async def get_or_set(self, key: str, compute_coro: Any) -> Any:
        return None


class HermesShaped:
    async def get_or_set(self, key: str, fingerprint: str, compute_coro: Any) -> Any:
        return None


@pytest.mark.parametrize(
    ("cache", "problem"),
    [
        (None, "has no _idem_cache"),
        (SyncCache(), "is not an async method"),
        (OtherSignature(), "takes ('key', 'compute_coro')"),
    ],
)
def test_a_hermes_whose_cache_changed_keeps_it(
    tmp_path: Path, cache: Any, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upgrade that changed the cache: a warning, Hermes' own cache stays, no database."""
    module = types.ModuleType("gateway.platforms.api_server")
    if cache is not None:
        module._idem_cache = cache  # type: ignore[attr-defined]
    reason = hermes_cache_problem(module)
    assert reason is not None and problem in reason
    assert install(module, tmp_path / "i.db", TTL) is None
    assert getattr(module, "_idem_cache", None) is cache
    assert not (tmp_path / "i.db").exists()
    (event,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert event["event"] == "agent.idempotency.not_installed" and event["level"] == "warning"
    assert problem in event["reason"]


def test_a_hermes_release_the_adapter_does_not_know_keeps_its_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hermes' cache in the known shape, but a release the adapter was not checked against
    (old code swapped it whatever the version): Hermes' own cache stays, no database, and
    the warning names the version, the internal and what is lost."""
    import gateway.platforms.api_server as api_server

    module = types.ModuleType("gateway.platforms.api_server")
    original = type(api_server._idem_cache)()
    module._idem_cache = original  # type: ignore[attr-defined]
    assert hermes_cache_problem(module) is None
    assert install(module, tmp_path / "i.db", TTL, hermes_version="0.24.0") is None
    assert module._idem_cache is original  # type: ignore[attr-defined]
    assert not (tmp_path / "i.db").exists()
    (event,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert event["event"] == "agent.idempotency.not_installed"
    assert event["hermes_version"] == "0.24.0"
    assert event["internal"] == "gateway.platforms.api_server._idem_cache"
    assert ">=0.19.0,<0.24" in event["reason"] and "in-memory" in event["fallback"]


def test_a_database_that_cannot_be_opened_keeps_hermes_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    module = types.ModuleType("gateway.platforms.api_server")
    original = HermesShaped()
    module._idem_cache = original  # type: ignore[attr-defined]
    assert hermes_cache_problem(module) is None
    assert install(module, tmp_path / "file" / "i.db", TTL) is None  # a file is no directory
    assert module._idem_cache is original  # type: ignore[attr-defined]
    assert "cannot open" in capsys.readouterr().err


# The gateway process's __main__ against the installed Hermes: a stand-in for hermes_cli.main
# that imports the API server module as Hermes' gateway does, and reports its cache.
REPORTER = """
import json, sys
import gateway.platforms.api_server as api_server
from hermes_runtime.agent.idempotency import hermes_cache_problem
cache = api_server._idem_cache
print(json.dumps({"cache": type(cache).__name__, "argv": sys.argv[1:],
                  "problem": hermes_cache_problem(api_server)}))
"""


def run_gateway_main(tmp_path: Path, **env: str) -> tuple[dict[str, Any], str]:
    data = tmp_path / "data"
    (data / ".hermes-runtime").mkdir(parents=True, exist_ok=True)
    scripts = tmp_path / "scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "report_cache.py").write_text(textwrap.dedent(REPORTER))
    child = subprocess.run(
        [sys.executable, "-m", "hermes_runtime.agent.gateway_main", "report_cache", "gateway"],
        env={
            **os.environ,
            "PYTHONPATH": str(scripts),
            "HERMES_HOME": str(data),
            "HOME": str(data),
            **env,
        },
        cwd=data,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1]), child.stderr


def test_the_gateway_process_installs_the_cache_into_the_installed_hermes(
    tmp_path: Path,
) -> None:
    """Pins Hermes 0.19.0: its API server has the ``_idem_cache`` this replaces, and the
    gateway's ``__main__`` replaces it when Hermes imports the module."""
    report, log = run_gateway_main(tmp_path)
    assert report == {
        "cache": "DurableIdempotencyCache",
        "argv": ["gateway"],
        "problem": None,  # ours has Hermes' get_or_set signature too
    }
    assert idempotency_db_path(tmp_path / "data" / ".hermes-runtime").exists()
    assert '"event": "agent.idempotency.installed"' in log


def test_a_ttl_of_zero_leaves_hermes_own_cache(tmp_path: Path) -> None:
    report, log = run_gateway_main(tmp_path, HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS="0")
    assert report["cache"] == "_IdempotencyCache"
    assert not idempotency_db_path(tmp_path / "data" / ".hermes-runtime").exists()
    assert '"event": "agent.idempotency.off"' in log


# -- the file on disk: private, and deleted answers gone -------------------------------------


def modes(path: Path) -> dict[str, int]:
    """Permission bits of the database and its companions that exist."""
    files = [path.with_name(path.name + suffix) for suffix in ("", "-wal", "-shm")]
    return {f.name: f.stat().st_mode & 0o777 for f in files if f.exists()}


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which SQLite alone would create the files 0644."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.usefixtures("open_umask")
def test_the_answer_file_and_its_wal_and_shm_are_created_private(tmp_path: Path) -> None:
    path = tmp_path / "idempotency.db"
    store = AnswerStore(path, TTL, 10)
    try:
        store.put(key_digest("k"), "fp", time.time(), '{"result": {}, "usage": {}}')
        assert modes(path) == {
            "idempotency.db": 0o600,
            "idempotency.db-wal": 0o600,
            "idempotency.db-shm": 0o600,
        }
    finally:
        store.close()


@pytest.mark.usefixtures("open_umask")
def test_files_an_older_version_left_readable_are_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "idempotency.db"
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))  # as an older version left it
    os.chmod(path, 0o644)
    older = connect(path)  # WAL, -wal and -shm (the database's 0644) open while the store opens
    try:
        older.execute("CREATE TABLE t (x)")
        assert set(modes(path).values()) == {0o644} and len(modes(path)) == 3
        AnswerStore(path, TTL, 10).close()
        assert set(modes(path).values()) == {0o600} and len(modes(path)) == 3
    finally:
        older.close()


def test_a_forgotten_answer_leaves_no_trace_in_the_file(tmp_path: Path) -> None:
    """``secure_delete``: the deleted row's bytes are zeroed, not left in a free page."""
    path = tmp_path / "idempotency.db"
    secret = "the-user's-answer-" + "7f3a" * 8
    store = AnswerStore(path, TTL, 10)
    store.put(key_digest("k"), "fp", time.time(), json.dumps({"result": {"x": secret}}))
    store.close()  # the last connection: checkpointed into the file, WAL removed
    assert secret.encode() in path.read_bytes()
    store = AnswerStore(path, TTL, 10)
    store.forget(key_digest("k"))
    store.close()
    assert not path.with_name(f"{path.name}-wal").exists()
    assert secret.encode() not in path.read_bytes()
    assert rows(path) == []
