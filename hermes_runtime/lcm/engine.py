"""The LCM engine without any host: ingest, sync a host transcript, compact, tools.

Hermes (``hermes_plugin.py``) and the CLI both drive this class. One engine
is shared by every copy Hermes makes (``share()``); it holds the store, one
lock per session (compactions of one session never overlap; different
sessions run in parallel), and the background embedding worker.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm import hostview, metrics, retrieval
from hermes_runtime.lcm.assembly import (
    assemble,
    context_within,
    count_tokens,
    summary_refs_in,
)
from hermes_runtime.lcm.compaction import CompactionReport, compact
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.doctor import retention
from hermes_runtime.lcm.embeddings import (
    Embedder,
    EmbeddingWorker,
    OpenAIEmbedder,
    VectorIndex,
    offline_embedder,
)
from hermes_runtime.lcm.replay import collapse_merged_replay
from hermes_runtime.lcm.store import LcmStore
from hermes_runtime.lcm.summarize import OpenAISummarizer, Summarizer
from hermes_runtime.lcm.writebehind import HostState, Job

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "lcm_grep",
        "description": (
            "Full-text search of the whole conversation history, including parts folded "
            "into summaries. Returns message/summary ids to pass to lcm_expand; identical "
            "messages come back once, with their count and ids."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to find (all must match)"},
                "scope": {"type": "string", "enum": ["session", "all"], "default": "session"},
                "regex": {"type": "boolean", "default": False},
                "limit": {"type": "integer", "default": 10},
            },
            "required": ["query"],
        },
    },
    {
        "name": "lcm_search",
        "description": (
            "Semantic + keyword search of past conversation (use when wording may differ). "
            "Returns ids to pass to lcm_expand; identical messages come back once, with "
            "their count and ids."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "scope": {"type": "string", "enum": ["session", "all"], "default": "session"},
                "limit": {"type": "integer", "default": 8},
            },
            "required": ["query"],
        },
    },
    {
        "name": "lcm_describe",
        "description": "Metadata of a summary (sum_N), message (msg_N) or output (out_HEX).",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    },
    {
        "name": "lcm_expand",
        "description": (
            "Expand a summary id into its sources (paginated), or return a message or "
            "externalized output in full."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "offset": {"type": "integer", "default": 0},
                "limit": {"type": "integer", "default": 20},
            },
            "required": ["id"],
        },
    },
    {
        "name": "lcm_read_output",
        "description": "Read a character range of an externalized output (out_HEX).",
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "offset": {"type": "integer", "default": 0},
                "limit": {"type": "integer", "default": 8000},
            },
            "required": ["id"],
        },
    },
    {
        "name": "lcm_recent",
        "description": (
            "The conversations (sessions) active most recently, other than this one: "
            "size, time span and the last user message. Use to pick up work from another "
            "session, then lcm_load_session or lcm_grep with scope all."
        ),
        "parameters": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "default": 10}},
        },
    },
    {
        "name": "lcm_load_session",
        "description": (
            "Another session's stored context (its summaries and newest messages) within "
            "a token budget, newest first; ids expand with lcm_expand."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "session_id": {"type": "string"},
                "budget": {"type": "integer", "default": 4000},
            },
            "required": ["session_id"],
        },
    },
    {
        "name": "lcm_dag",
        "description": (
            "The summary DAG: with id (sum_N), that summary's child summaries down to "
            "max_depth levels; without, the summaries in this session's live context. "
            "Ids, depths, message spans and sizes only (lcm_expand reads contents)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "max_depth": {"type": "integer", "default": 2},
            },
        },
    },
]
TOOL_NAMES = frozenset(t["name"] for t in TOOL_SCHEMAS)

# Extra compaction passes when the assembled context measures over budget.
MAX_REFIT_PASSES = 4
# How often compactions refresh the retention gauges: a dozen lookups each time,
# ~2% of a compress() in the engine loop, for figures scraped every 15-60 s.
# ``lcm stats`` always reads them fresh.
RETENTION_REFRESH_SECONDS = 10.0


# Version of ``fingerprint`` recorded in a session's host state ("fp"): a state
# with another scheme holds prints we cannot compare, so it counts as empty.
FINGERPRINT_SCHEME = 2


def _digest(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(data.encode(), digest_size=12).hexdigest()


_json_str = json.encoder.encode_basestring  # json.dumps' own string encoder (ensure_ascii=False)


def _plain_digest(content: str | None, role: str | None, call_id: str | None) -> str:
    """``_digest`` of a plain message's canonical dict, byte for byte the same JSON
    (sorted keys, default separators), built directly: the hook prints every new
    message, and the generic encoder was most of a print's cost."""
    data = (
        '{"content": '
        + ("null" if content is None else _json_str(content.strip()))
        + ', "role": '
        + ("null" if role is None else _json_str(role))
        + ', "tool_call_id": '
        + ("null" if call_id is None else _json_str(call_id))
        + ', "tool_calls": null}'
    )
    return hashlib.blake2b(data.encode(), digest_size=12).hexdigest()


PlainKey = tuple[str | None, str | None, str | None]


def _plain_key(message: dict[str, Any]) -> PlainKey | None:
    """(content, role, call id) of a message without tool calls, else None.

    All ``fingerprint`` reads of such a message: an equal key is an equal fingerprint.
    """
    content, role = message.get("content"), message.get("role")
    call_id = message.get("tool_call_id")
    if (
        isinstance(content, str | None)
        and isinstance(role, str | None)
        and isinstance(call_id, str | None)
        and not isinstance(message.get("tool_calls"), list)
    ):
        return content, role, call_id
    return None


def fingerprint(message: dict[str, Any]) -> str:
    """What identifies a message across host round trips: role, content, calls, call id.

    Hosts hand the same message back in another shape: Hermes' API server
    reloads a session from ``state.db`` (``X-Hermes-Session-Id``) with extra
    keys (``timestamp``, ``finish_reason``, ``tool_name``...) and stripped
    text. Hashing the whole dict made every reloaded message look new and
    stored each turn again; only the fields the model sees count here.
    """
    plain = _plain_key(message)
    if plain is not None:  # the JSON below, written without the encoder's generic walk
        return _plain_digest(*plain)
    content = message.get("content")
    calls = message.get("tool_calls")
    canonical = {
        "role": message.get("role"),
        "content": content.strip() if isinstance(content, str) else content,
        "tool_calls": [_call_identity(c) for c in calls] if isinstance(calls, list) else None,
        "tool_call_id": message.get("tool_call_id"),
    }
    return _digest(canonical)


class FingerprintMemo:
    """Fingerprints of the plain messages a host keeps handing back, remembered.

    Hermes' turn hook passes the whole live transcript every turn, so without
    a memo each turn re-hashes every message it holds (JSON + blake2b, most of
    a turn's cost at a few hundred messages). Only messages without tool
    calls are remembered, keyed on the values ``fingerprint`` reads: a str
    caches its own hash, so looking up the same content object again is
    cheap, and an equal key always means an equal fingerprint. Bounded, and
    local to one engine (no module state).
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._prints: dict[PlainKey, str] = {}
        self._guard = threading.Lock()

    def of(self, message: dict[str, Any]) -> str:
        key = _plain_key(message)
        if key is None:
            return fingerprint(message)
        with self._guard:
            found = self._prints.get(key)
        if found is not None:
            return found
        found = _plain_digest(*key)
        with self._guard:
            if len(self._prints) >= self._capacity:
                self._prints.pop(next(iter(self._prints)))
            self._prints[key] = found
        return found


def _call_identity(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    return [call.get("id"), function.get("name"), function.get("arguments")]


def aligned_prefix(known: list[str], prints: list[str]) -> int:
    """Length of the longest prefix of ``prints`` found as a contiguous run in ``known``.

    Those messages are already stored; the rest of ``prints`` is new. A
    prefix (not any run) because hosts only append after what they hold.
    """
    haystack = "|" + "|".join(known) + "|"
    for k in range(min(len(known), len(prints)), 0, -1):
        if "|" + "|".join(prints[:k]) + "|" in haystack:
            return k
    return 0


def comparable(saved: dict[str, Any]) -> dict[str, Any]:
    """The saved host state if its prints are of the current scheme, else an empty one."""
    return saved if saved.get("fp") == FINGERPRINT_SCHEME else {}


def known_overlap(saved: dict[str, Any], block: list[int], prints: list[str]) -> int:
    """How many leading ``candidates`` (the host's messages after its last block) are stored.

    A host built on our latest context holds our latest block and the raw
    tail after it (``raw``). A host that holds an older block, or none after
    we compacted, replays what it held before that compaction (``stale``):
    Hermes hands its pre-compaction transcript to the turn hook, and its API
    server reloads a session from ``state.db``. Aligning a stale host with
    the tail made every replayed message look new and stored it again.
    """
    saved = comparable(saved)
    raw, stale = saved.get("raw", []), saved.get("stale", [])
    if "block" not in saved or block == saved["block"]:
        return aligned_prefix(raw, prints)
    return aligned_prefix(stale, prints) or aligned_prefix(raw, prints)


def next_host_state(
    saved: dict[str, Any], block: list[int], prints: list[str], overlap: int
) -> dict[str, Any]:
    """What the host holds after this sync, as seen from our latest context."""
    saved = comparable(saved)
    if "block" not in saved or block == saved["block"]:
        return {**saved, "raw": prints, "fp": FINGERPRINT_SCHEME}
    # A stale host: its new messages extend our latest context's raw tail.
    return {**saved, "raw": saved.get("raw", []) + prints[overlap:], "stale": prints}


@dataclass(frozen=True)
class SyncPlan:
    """What one sync works from: where the host's transcript holds what, and its prints.

    ``head``: leading system messages; ``start``: first candidate message; ``block``: the
    last summary block's ids; ``prints``: the candidates' fingerprints, ``volatile`` those
    that may change in place; ``viewable``: the transcript may be kept as a host view.
    """

    head: int
    start: int
    block: list[int]
    prints: list[str]
    volatile: list[int]
    viewable: bool


@dataclass
class SyncResult:
    ingested: int
    system_head: list[dict[str, Any]]


class LcmEngine:
    """Thread-safe LCM operations over one database."""

    def __init__(
        self,
        config: LcmConfig,
        summarizer: Summarizer | None = None,
        embedder: Embedder | None = None,
        start_worker: bool = False,
    ) -> None:
        self.config = config
        # A long-lived engine (the gateway's, with its worker) checkpoints off the turn's
        # path, and its turn hook queues turns for a group commit (``writebehind.py``).
        self.store = LcmStore(
            config.db_path,
            config.outputs_dir,
            config.externalize_chars,
            background_checkpoints=start_worker,
            commit_interval=config.commit_interval_ms / 1000 if start_worker else 0.0,
        )
        self.store.on_stored = self._stored
        if start_worker:  # the turn's path never writes full-text postings (fulltext.py)
            self.store.start_fulltext_thread()
        self.summarizer = summarizer
        self.embedder = embedder if embedder is not None else make_embedder(config)
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self.vectors = VectorIndex()
        self._prints = FingerprintMemo()
        self._retention_due = 0.0  # time.monotonic() of the next gauge refresh
        self._views = hostview.HostViews()
        self.worker: EmbeddingWorker | None = None
        if start_worker and self.embedder is not None:
            self.worker = EmbeddingWorker(self.store, self.embedder)
            self.worker.start()

    def session_lock(self, session_id: str) -> threading.RLock:
        """Serializes sync + compaction of one session; other sessions run in parallel."""
        with self._locks_guard:
            return self._locks.setdefault(session_id, threading.RLock())

    # -- ingest ------------------------------------------------------------

    def ingest(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        host_state: HostState | None = None,
        replay_window: float = 0.0,
        defer: bool = False,
        merged: int = 0,
    ) -> int:
        """Store ``messages`` as they are (an import keeps every row); ``host_state`` (JSON
        text), ``replay_window`` and ``defer``: see ``LcmStore.ingest_many``. Returns how
        many were stored (0 when queued)."""
        started = time.perf_counter()
        stored = self.store.ingest_many(
            session_id,
            messages,
            host_state=host_state,
            replay_window=replay_window,
            defer=defer,
            merged=merged,
        )
        if messages:
            metrics.INGEST_SECONDS.observe(time.perf_counter() - started)
        return len(stored)

    def _stored(self, job: Job) -> None:
        """After a commit (any thread): count what one write stored, wake the embedder."""
        if not job.rows:
            return
        metrics.INGESTED.inc(len(job.stored))
        metrics.EXTERNALIZED.inc(sum(1 for m in job.stored if m.output_id))
        metrics.REPLAYED_TURNS.inc(max(job.merged, len(job.rows) - len(job.stored)))
        if self.worker is not None:
            self.worker.wake()

    def flush(self) -> None:
        """Commit the turns the hook queued (``LcmStore.flush``) and index them."""
        self.store.flush()
        self.store.index_now()

    def sync(self, session_id: str, host_messages: list[dict[str, Any]]) -> SyncResult:
        """Ingest what the host added since we last saw its transcript.

        The host holds our last context (a block of summaries, then raw
        messages) plus whatever it appended. Hosts rewrite what we hand them
        (Hermes merges consecutive user messages, so our summary block can
        swallow the first raw message), so matching is by content: the raw
        messages after the last summary block are aligned with the ones we
        remembered, and only those after the aligned run are new. Leading
        system messages belong to the host (it rebuilds its prompt) and are
        passed through, not stored.
        """
        with self.session_lock(session_id):
            return self._sync(session_id, host_messages)

    def sync_bounded(
        self, session_id: str, host_messages: list[dict[str, Any]], wait_seconds: float
    ) -> SyncResult | None:
        """``sync`` that gives up (None) rather than wait long for the session or the database.

        For callers on a latency-sensitive path: at most ``wait_seconds`` for
        this session's lock (held by a compaction of the same session) and
        for another process's write lock. A skipped sync loses nothing: the
        next sync of the session stores whatever is still new.

        With group commit on (the gateway's engine), the new messages and the
        host state are queued, not written: ``ingested`` is 0 and the writer
        thread stores them in its next batch (``writebehind.py``).
        """
        lock = self.session_lock(session_id)
        if not lock.acquire(timeout=wait_seconds):
            return None
        try:
            with self.store.busy_timeout(max(1, int(wait_seconds * 1000))):
                return self._sync(session_id, host_messages, defer=True)
        finally:
            lock.release()

    def _sync(
        self, session_id: str, host_messages: list[dict[str, Any]], defer: bool = False
    ) -> SyncResult:
        fields = hostview.columns(host_messages)
        view = self._views.get(session_id)
        plan = self._plan_appended(view, host_messages, fields) if view and fields else None
        if plan is None:
            plan = self._plan_full(session_id, host_messages, fields)
        candidates = host_messages[plan.start :]
        saved_raw, saved = self._saved_host_state(session_id, view)
        overlap = known_overlap(saved, plan.block, plan.prints)
        state = next_host_state(saved, plan.block, plan.prints, overlap)
        # A host's transcript may replay a turn a client retried (replay.py): stored once.
        window, now = self.config.replay_window_seconds, time.time()
        fresh = [collapse_merged_replay(m, now, window) for m in candidates[overlap:]]
        merged = sum(1 for a, b in zip(candidates[overlap:], fresh, strict=True) if a is not b)
        changed = state if state != saved else None
        if changed is not None:
            saved_raw, saved = changed, changed  # encoded when written (once a batch)
        count = self.ingest(session_id, fresh, changed, window, defer=defer, merged=merged)
        if plan.viewable and fields is not None:
            self._views.put(
                session_id,
                hostview.HostView(  # a copy: the host keeps appending to its own list
                    list(host_messages),
                    fields,
                    plan.head,
                    plan.start,
                    plan.block,
                    plan.prints,
                    plan.volatile,
                    saved_raw,
                    saved,
                ),
            )
        return SyncResult(count, host_messages[: plan.head])

    def _plan_appended(
        self,
        view: hostview.HostView,
        host_messages: list[dict[str, Any]],
        fields: hostview.Columns,
    ) -> SyncPlan | None:
        """The sync plan of a host that only appended to what it handed us last (None if not).

        Only the appended messages are fingerprinted and scanned for summary
        headers; one that carries a header (a new block?) goes the full path.
        """
        known = view.appended(host_messages, fields)
        if known is None:
            return None
        added = host_messages[known:]
        if any(summary_refs_in(m) for m in added):
            return None
        prints = view.prints.copy()
        for index in view.volatile:
            prints[index] = self._prints.of(host_messages[view.start + index])
        volatile = view.volatile + [
            len(prints) + i for i, m in enumerate(added) if not hostview.is_stable(m)
        ]
        prints += [self._prints.of(m) for m in added]
        return SyncPlan(view.head, view.start, view.block, prints, volatile, True)

    def _plan_full(
        self,
        session_id: str,
        host_messages: list[dict[str, Any]],
        fields: hostview.Columns | None,
    ) -> SyncPlan:
        """The sync plan read from the whole transcript: head, last block, every print."""
        head = 0
        while head < len(host_messages) and host_messages[head].get("role") == "system":
            head += 1
        block, candidates = self._split_at_last_block(session_id, host_messages[head:])
        prints = [self._prints.of(m) for m in candidates]
        volatile = [i for i, m in enumerate(candidates) if not hostview.is_stable(m)]
        # A header that is not one of this session's blocks (quoted, or not ours) may
        # become one later: such a transcript is always read in full.
        viewable = fields is not None and not any(summary_refs_in(m) for m in candidates)
        start = len(host_messages) - len(candidates)
        return SyncPlan(head, start, block, prints, volatile, viewable)

    def _saved_host_state(
        self, session_id: str, view: hostview.HostView | None
    ) -> tuple[HostState | None, dict[str, Any]]:
        """The session's host state as the store has it, and parsed (only if it changed).

        The store hands back the very dict a sync queued (or committed last)
        while that is the state, so an unchanged state is neither encoded nor
        parsed again.
        """
        raw = self.store.host_state_raw(session_id)
        if raw is None:
            return None, {}
        if view is not None and (raw is view.saved_raw or raw == view.saved_raw):
            return raw, view.saved
        if isinstance(raw, dict):
            return raw, raw
        return raw, json.loads(raw) if raw else {}

    def _split_at_last_block(
        self, session_id: str, conversation: list[dict[str, Any]]
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """Ids of the last message carrying this session's summary headers, and what follows."""
        for index in range(len(conversation) - 1, -1, -1):
            ids = summary_refs_in(conversation[index])
            if ids:
                sessions = self.store.summary_sessions(ids)
                if all(sessions.get(i) == session_id for i in ids):
                    return ids, conversation[index + 1 :]
        return [], conversation

    def _after_last_block(
        self, session_id: str, conversation: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The messages after the last one carrying this session's summary headers."""
        return self._split_at_last_block(session_id, conversation)[1]

    def remember_context(self, session_id: str, conversation: list[dict[str, Any]]) -> None:
        """Record the context we hand to the host: its last block and the raw tail after it.

        The raw messages the host held before (``stale``) are kept too: a host
        may still hand back its pre-compaction transcript once (Hermes' turn
        hook after a compaction in the same turn).
        """
        block, raw = self._split_at_last_block(session_id, conversation)
        saved = self.store.host_state(session_id)
        previous = comparable(saved).get("raw", [])
        state = {
            "raw": [self._prints.of(m) for m in raw],
            "block": block,
            "stale": previous,
            "fp": FINGERPRINT_SCHEME,
        }
        self.store.set_host_state(session_id, state)

    # -- compaction and assembly -------------------------------------------

    def compact(
        self,
        session_id: str,
        budget: int,
        extra_tokens: int = 0,
        force: bool = False,
        focus: str = "",
    ) -> CompactionReport:
        with self.session_lock(session_id):
            report = compact(
                self.store,
                session_id,
                budget,
                self.summarizer,
                self.config.policy,
                extra_tokens=extra_tokens,
                force=force,
                focus=focus,
            )
        metrics.COMPACTION_SECONDS.observe(report.seconds)
        metrics.COMPACTION_TOKENS_IN.inc(report.tokens_before)
        metrics.COMPACTION_TOKENS_OUT.inc(report.tokens_after)
        for level in report.levels:
            metrics.SUMMARIES.labels(level=str(level)).inc()
        metrics.COMPACTION_ERRORS.inc(len(report.errors))
        if time.monotonic() >= self._retention_due:  # size, retention and growth gauges
            retention(self.store)
            self._retention_due = time.monotonic() + RETENTION_REFRESH_SECONDS
        if self.worker is not None and report.summaries_created:
            self.worker.wake()
        return report

    def context(self, session_id: str) -> list[dict[str, Any]]:
        return assemble(self.store, session_id)

    def fitted_context(
        self,
        session_id: str,
        budget: int,
        system_head: list[dict[str, Any]] | None = None,
        focus: str = "",
    ) -> tuple[list[dict[str, Any]], CompactionReport]:
        """Compact as needed, then assemble; the host's system messages ride in front."""
        head = system_head or []
        head_tokens = count_tokens(head)
        with self.session_lock(session_id):
            report = self.compact(session_id, budget, extra_tokens=head_tokens, focus=focus)
            messages = assemble(self.store, session_id, report.items)
            counted = report.tokens_after  # by stored per-item counts
            for _ in range(MAX_REFIT_PASSES):
                overflow = head_tokens + count_tokens(messages) - budget
                if overflow <= 0:
                    break
                # Stored per-item counts can miss what assembly adds (stubs, repaired
                # tool results): aim below what the counts say by the measured overflow.
                again = self.compact(
                    session_id, counted - overflow, extra_tokens=head_tokens, focus=focus
                )
                counted = again.tokens_after
                report.summaries_created += again.summaries_created
                report.levels += again.levels
                report.errors += again.errors
                messages = assemble(self.store, session_id, again.items)
            report.tokens_after = head_tokens + count_tokens(messages)
            self.remember_context(session_id, messages)
        return head + messages, report

    # -- tools -------------------------------------------------------------

    def handle_tool(self, name: str, args: dict[str, Any], session_id: str | None) -> str:
        """Run a retrieval tool and return its JSON answer (errors are JSON too)."""
        started = time.perf_counter()
        try:
            payload = self._dispatch(name, args or {}, session_id)
        except RuntimeFailure as exc:
            payload = {"error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            payload = {"error": f"{name}: bad arguments: {type(exc).__name__} {exc}"}
        metrics.RETRIEVAL_SECONDS.labels(tool=name).observe(time.perf_counter() - started)
        return json.dumps(payload, ensure_ascii=False, default=str)

    def _dispatch(self, name: str, args: dict[str, Any], session_id: str | None) -> Any:
        scope = None if args.get("scope") == "all" else session_id
        if name == "lcm_grep":
            hits = retrieval.grep(
                self.store,
                str(args["query"]),
                scope,
                int(args.get("limit", 10)),
                bool(args.get("regex", False)),
            )
            return {"results": [h.as_dict() for h in hits]}
        if name == "lcm_search":
            hits = retrieval.hybrid_search(
                self.store,
                self.embedder,
                str(args["query"]),
                scope,
                int(args.get("limit", 8)),
                index=self.vectors,
            )
            return {"results": [h.as_dict() for h in hits]}
        if name == "lcm_describe":
            return retrieval.describe(self.store, str(args["id"]))
        if name == "lcm_expand":
            return retrieval.expand(
                self.store, str(args["id"]), int(args.get("offset", 0)), int(args.get("limit", 20))
            )
        if name == "lcm_read_output":
            return retrieval.read_output(
                self.store,
                str(args["id"]),
                int(args.get("offset", 0)),
                int(args.get("limit", 8000)),
            )
        if name == "lcm_recent":
            found = retrieval.recent_activity(self.store, int(args.get("limit", 10)), session_id)
            return {"sessions": found}
        if name == "lcm_load_session":
            budget = max(100, min(int(args.get("budget", 4000)), 32_000))
            return context_within(self.store, str(args["session_id"]), budget)
        if name == "lcm_dag":
            ref = str(args["id"]) if args.get("id") else None
            return retrieval.summary_tree(
                self.store, ref, session_id, int(args.get("max_depth", 2))
            )
        raise RuntimeFailure(f"unknown LCM tool {name!r}")

    def close(self) -> None:
        """Commit the queued turns (an error is raised after the rest is shut), then stop."""
        try:
            self.store.stop_group_commit()
        finally:
            if self.worker is not None:
                self.worker.stop()
            try:
                self.store.stop_fulltext()
            finally:
                self.store.stop_checkpoints()
                self.store.close()


def make_embedder(config: LcmConfig) -> Embedder | None:
    if config.embeddings == "off":
        return None
    if config.embeddings == "openai":
        return OpenAIEmbedder(
            config.embeddings_base_url or config.summary_base_url,
            config.embeddings_model,
            config.embeddings_dim,
        )
    return offline_embedder(config.embeddings)


def make_summarizer(base_url: str, model: str, api_key: str = "") -> Summarizer | None:
    return OpenAISummarizer(base_url, model, api_key) if base_url and model else None
