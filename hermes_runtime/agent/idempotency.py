"""A durable ``Idempotency-Key`` cache for Hermes' API server: a retry after a crash is answered.

Why: Hermes 0.19.0 answers a non-streaming ``POST /v1/chat/completions`` or ``/v1/responses``
that carries ``Idempotency-Key`` through ``_IdempotencyCache`` (``gateway/platforms/
api_server.py``): the same key with the same request fingerprint gets the first run's result,
and a retry that arrives while the first run is going waits for it. That cache lives in the
gateway's memory. When the gateway answers a turn (reply stored in ``state.db`` and LCM) and is
killed before the answer leaves it (SIGKILL, OOM), the client's retry reaches a restarted
gateway with an empty cache and the turn runs, and is stored, twice (docs/retries.md, "An
answer lost with the gateway"). This module keeps Hermes' semantics and adds one thing: the
finished result is committed to a small SQLite file on the data volume before the handler
sees it, so a retry after a restart is answered from there without running the agent.

How it gets into the gateway: Hermes' handlers read the module global ``_idem_cache`` at call
time, so replacing that one object is enough. ``gateway_main.py`` (the gateway process's
``__main__``) calls :func:`install_on_import` before it runs Hermes; when Hermes itself
imports its API server module, right after the module body ran and before any adapter
exists, :func:`install` checks the module still has the cache this replaces and swaps it.
Why not a Hermes plugin (``hermes_agent.plugins`` entry point, as LCM is): Hermes loads
those only when ``plugins.enabled`` in ``config.yaml`` lists them (a file the user edits) and
not at all under ``HERMES_SAFE_MODE``; durable retries should not depend on either. Why not
import the API server ourselves before Hermes starts: ``hermes_cli.main`` applies the profile
and loads ``.env`` when it is imported, and Hermes' modules would then be imported before
that, in an order Hermes never runs. The data dir rule (``zygote.py``: nothing touches it
before the data dir lock) holds: the gateway process runs Hermes only after the entrypoint
holds the lock, and the database is opened only when Hermes imports its API server.

Kept from Hermes: the same key and fingerprint get the first result; a different fingerprint
under the same key runs anew and its result replaces the first; concurrent requests with the
same key and fingerprint share one run (``asyncio.shield``: a client that disconnects does
not cancel it); a run that raises stores nothing. Added: the result is written, as JSON, to
``D/.hermes-runtime/idempotency.db`` (WAL, ``common.sqlite.connect``), committed before the
response is returned; rows older than the TTL are ignored and purged, and at most
``MAX_ENTRIES`` rows are kept (the oldest go first). Only what the handlers read back from the
result is stored (``RESULT_FIELDS`` and the usage dict); the key is stored as its SHA-256.
A result that does not survive JSON unchanged, or that the database refuses, is kept in memory
for its key (as Hermes would) and logged: the request never fails because of this cache.

The file holds answers, so it is the user's conversation, as ``state.db`` is: it lives on the
data volume beside it and nothing here logs keys, requests or answers. It is ``0600`` from its
creation (and so are its ``-wal`` and ``-shm``, which SQLite gives the database's mode; files
left by an older version are narrowed when opened), so no other user of the volume reads it,
and ``secure_delete`` is on: an expired or replaced answer is overwritten with zeros, not left
in a free page for anyone who later copies the file (a backup, a restored volume). Durability is
SQLite's WAL with ``synchronous = NORMAL``: a commit survives the process being killed; a
power loss of the node may lose the last ones. Streaming requests are not cached (Hermes
does not pass them through ``_idem_cache``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import importlib.abc
import json
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

import apsw

from hermes_runtime.common.logs import log_event
from hermes_runtime.common.sqlite import connect
from hermes_runtime.compat import API_SERVER_MODULE, CACHE_GLOBAL, cache_problem, check_cache

DB_NAME = "idempotency.db"  # under the entrypoint's state dir, D/.hermes-runtime/
MAX_ENTRIES = 1000  # Hermes' own cap
# What the two handlers read from a result after ``get_or_set`` (Hermes 0.19.0): chat
# completions the first six, responses ``final_response``, ``error`` and ``messages``
# (its output items and stored history). ``usage`` is the second item of the pair.
RESULT_FIELDS = (
    "final_response",
    "partial",
    "failed",
    "completed",
    "error",
    "session_id",
    "messages",
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key_sha256 TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS answers_created ON answers (created);
"""

Compute = Callable[[], Awaitable[Any]]


class Unstorable(ValueError):
    """A response the database cannot hold faithfully (the message says why, never what)."""


def idempotency_db_path(state_dir: Path) -> Path:
    """Where the gateway keeps answers: beside the entrypoint's other records."""
    return state_dir / DB_NAME


def key_digest(key: str) -> str:
    """The stored form of a client's key: fixed size, and not the client's text."""
    return hashlib.sha256(key.encode("utf-8", errors="surrogatepass")).hexdigest()


def encode_response(response: object) -> str:
    """Hermes' ``(result, usage)`` as JSON, the result cut to ``RESULT_FIELDS``.

    Raises ``Unstorable`` for another shape or for values JSON would change (tuples, NaN,
    non-string keys): the handler must read back exactly what the first run returned."""
    if not (
        isinstance(response, tuple)
        and len(response) == 2
        and all(isinstance(part, dict) for part in response)
    ):
        raise Unstorable(f"the answer is a {type(response).__name__}, not (result, usage)")
    result, usage = response
    payload = {"result": {f: result[f] for f in RESULT_FIELDS if f in result}, "usage": usage}
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise Unstorable(f"not JSON ({type(exc).__name__})") from None
    if json.loads(text) != payload:
        raise Unstorable("changed by JSON (a tuple or a non-string key)")
    return text


def decode_response(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    payload = json.loads(text)
    return payload["result"], payload["usage"]


@dataclass(frozen=True)
class Entry:
    """One key's newest answer: the fingerprint it answers and when it was stored."""

    fingerprint: str
    created: float
    response: Any


class AnswerStore:
    """The SQLite file: one row per key, the newest fingerprint's answer.

    One connection, shared by the event loop (lookups) and the cache's writer thread under a
    lock: a gateway is the only process that writes here (the data dir lock)."""

    def __init__(self, path: Path, ttl_seconds: float, max_entries: int) -> None:
        self.path = path
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._lock = threading.Lock()
        _private(path)
        self._conn = connect(path)
        self._conn.execute("PRAGMA secure_delete = ON")  # per connection: deleted = zeroed
        with self._lock, self._conn:
            self._conn.execute(SCHEMA)

    def get(self, digest: str, now: float) -> tuple[str, str] | None:
        """``(fingerprint, response JSON)`` of ``digest`` unless older than the TTL."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT fingerprint, response FROM answers WHERE key_sha256 = ? AND created >= ?",
                (digest, now - self.ttl_seconds),
            ).fetchall()
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def put(self, digest: str, fingerprint: str, now: float, text: str) -> None:
        """Store (or replace) the key's answer and purge, in one committed transaction."""
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO answers (key_sha256, fingerprint, created, response)"
                " VALUES (?, ?, ?, ?)",
                (digest, fingerprint, now, text),
            )
            self._purge(now)

    def forget(self, digest: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM answers WHERE key_sha256 = ?", (digest,))

    def purge(self, now: float) -> None:
        with self._lock, self._conn:
            self._purge(now)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _purge(self, now: float) -> None:
        self._conn.execute("DELETE FROM answers WHERE created < ?", (now - self.ttl_seconds,))
        self._conn.execute(
            "DELETE FROM answers WHERE key_sha256 IN (SELECT key_sha256 FROM answers"
            " ORDER BY created DESC LIMIT -1 OFFSET ?)",
            (self.max_entries,),
        )


def _private(path: Path) -> None:
    """Create the database file ``0600`` before SQLite opens it (SQLite would create it with the
    process umask's mode, and gives its -wal and -shm the database's), and narrow the files of
    an older version that made them readable by the group."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path.with_name(name), 0o600)


class MemoryAnswers:
    """Answers kept in memory only (they would not survive JSON): Hermes' own TTL and cap."""

    def __init__(self, ttl_seconds: float, max_entries: int) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def get(self, digest: str, now: float) -> Entry | None:
        self._purge(now)
        return self._entries.get(digest)

    def put(self, digest: str, entry: Entry) -> None:
        self._entries.pop(digest, None)
        self._entries[digest] = entry
        self._purge(entry.created)

    def forget(self, digest: str) -> None:
        self._entries.pop(digest, None)

    def _purge(self, now: float) -> None:
        for digest in [d for d, e in self._entries.items() if now - e.created > self._ttl]:
            del self._entries[digest]
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


class DurableIdempotencyCache:
    """Hermes' ``_IdempotencyCache`` (``get_or_set``) with its answers on disk; see the module."""

    def __init__(self, store: AnswerStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock  # wall clock: rows outlive the process
        # The store's retention: an answer kept in memory lives exactly as long as on disk.
        self._memory = MemoryAnswers(store.ttl_seconds, store.max_entries)
        self._inflight: dict[tuple[str, str], asyncio.Task[Any]] = {}
        # Its own writer thread: Hermes runs every agent turn in the loop's default executor,
        # and a finished turn's commit must not queue behind turns still running there.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idempotency")

    @classmethod
    def open(
        cls,
        path: Path,
        ttl_seconds: float,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> DurableIdempotencyCache:
        """The cache on the database at ``path`` (created if new), expired rows purged."""
        store = AnswerStore(path, ttl_seconds, max_entries)
        store.purge(clock())
        return cls(store, clock)

    async def get_or_set(self, key: str, fingerprint: str, compute_coro: Compute) -> Any:
        """The answer stored for ``key`` and ``fingerprint``, else ``compute_coro()``'s, stored.

        The lookup and the start of a run happen without an ``await`` between them, and a run
        stays in flight until its answer is committed: a retry either waits for the run or
        finds its row, never misses both."""
        digest = key_digest(key)
        task = self._inflight.get((digest, fingerprint))
        if task is None:
            entry = self._lookup(digest)
            if entry is not None and entry.fingerprint == fingerprint:
                return entry.response
            task = asyncio.create_task(self._run(digest, fingerprint, compute_coro))
            self._inflight[(digest, fingerprint)] = task
            task.add_done_callback(functools.partial(self._done, (digest, fingerprint)))
        return await asyncio.shield(task)

    def _lookup(self, digest: str) -> Entry | None:
        now = self._clock()
        entry = self._memory.get(digest, now)
        if entry is not None:
            return entry
        try:
            found = self.store.get(digest, now)
            if found is None:
                return None
            return Entry(found[0], now, decode_response(found[1]))
        except (apsw.Error, ValueError, KeyError, TypeError) as exc:
            # Unreadable: run the turn again rather than fail the request.
            log_event("agent.idempotency.read_failed", level="warning", error=type(exc).__name__)
            return None

    async def _run(self, digest: str, fingerprint: str, compute: Compute) -> Any:
        response = await compute()
        now = self._clock()
        problem = await asyncio.get_running_loop().run_in_executor(
            self._writer, self._persist, digest, fingerprint, now, response
        )
        if problem is None:
            self._memory.forget(digest)
        else:
            self._memory.put(digest, Entry(fingerprint, now, response))
            log_event("agent.idempotency.memory_only", level="warning", reason=problem)
        return response

    def _persist(self, digest: str, fingerprint: str, now: float, response: Any) -> str | None:
        """Commit the answer (on the writer thread: the JSON may be large); why not, or None."""
        try:
            self.store.put(digest, fingerprint, now, encode_response(response))
            return None
        except Unstorable as exc:
            problem = str(exc)
        except Exception as exc:  # apsw.Error, a full disk...: the answer is still returned
            problem = f"database: {type(exc).__name__}"
        with contextlib.suppress(Exception):  # the key's newest answer is now the one in memory
            self.store.forget(digest)
        return problem

    def _done(self, inflight_key: tuple[str, str], task: asyncio.Task[Any]) -> None:
        if self._inflight.get(inflight_key) is task:
            del self._inflight[inflight_key]


def hermes_cache_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no cache this one can replace (None: it has Hermes 0.19.0's).

    The check lives in the Hermes adapter (``compat/idempotency.py``)."""
    return cache_problem(module)


def install(
    module: ModuleType,
    path: Path,
    ttl_seconds: float,
    max_entries: int = MAX_ENTRIES,
    hermes_version: str | None = None,
) -> DurableIdempotencyCache | None:
    """Replace ``module``'s ``_idem_cache`` by a durable one on ``path``; None: not done.

    A Hermes release the adapter does not know, one whose cache is not the one this
    replaces (an upgrade changed it), or a database that cannot be opened, keeps Hermes'
    own in-memory cache, with a warning in the log: the gateway must run either way.
    ``hermes_version``: the installed distribution's by default."""
    found = check_cache(module, hermes_version)
    if not found.ok:
        log_event(
            "agent.idempotency.not_installed",
            level="warning",
            reason=found.describe(),
            internal=found.internal,
            hermes_version=found.version,
            fallback="Hermes keeps its in-memory cache: a retry after a restart runs again",
        )
        return None
    try:
        cache = DurableIdempotencyCache.open(path, ttl_seconds, max_entries)
    except (apsw.Error, OSError) as exc:
        log_event(
            "agent.idempotency.not_installed",
            level="warning",
            reason=f"cannot open {path}: {type(exc).__name__}: {exc}",
        )
        return None
    setattr(module, CACHE_GLOBAL, cache)
    log_event(
        "agent.idempotency.installed",
        path=str(path),
        ttl_seconds=ttl_seconds,
        max_entries=max_entries,
    )
    return cache


class _ThenLoader(importlib.abc.Loader):
    """Another loader's module, and then ``then(module)``; everything else is the inner one's."""

    def __init__(self, inner: importlib.abc.Loader, then: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._then = then

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._then(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks
        return getattr(self._inner, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: lets the other finders find ``name`` once, and wraps its loader."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self._name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenLoader(spec.loader, self._then)
                return spec
        return None


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Run ``then(module)`` right after module ``name`` is first imported (now if it was)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def _install_quietly(path: Path, ttl_seconds: float, module: ModuleType) -> None:
    """``install``, never raising into Hermes' import of its API server."""
    try:
        install(module, path, ttl_seconds)
    except Exception as exc:
        log_event(
            "agent.idempotency.not_installed",
            level="warning",
            reason=f"{type(exc).__name__}: {exc}",
        )


def install_on_import(state_dir: Path, ttl_seconds: float) -> None:
    """Install the durable cache when Hermes imports its API server (``gateway_main.py``).

    A TTL of 0 turns it off: Hermes keeps its own in-memory cache."""
    if ttl_seconds <= 0:
        log_event("agent.idempotency.off", reason="HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS is 0")
        return
    path = idempotency_db_path(state_dir)
    after_import(API_SERVER_MODULE, functools.partial(_install_quietly, path, ttl_seconds))
