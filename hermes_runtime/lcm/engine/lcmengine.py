"""The LCM engine without any host: ingest, sync a host transcript, compact, tools.

Hermes (``host/hermes_plugin.py``) and the CLI both drive this class. One engine
is shared by every copy Hermes makes (``share()``); it holds the store, one
lock per session (compactions of one session never overlap; different
sessions run in parallel), and the background embedding worker.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm import metrics
from hermes_runtime.lcm.compact.assembly import assemble, summary_refs_in
from hermes_runtime.lcm.compact.compactrun import Compactions
from hermes_runtime.lcm.compact.summarize import Summarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedders import Embedder, RunsAProcess, make_embedder
from hermes_runtime.lcm.embed.embedworker import EmbeddingWorker
from hermes_runtime.lcm.embed.vectorindex import VectorIndex
from hermes_runtime.lcm.engine import failedturns, hostsync, tools
from hermes_runtime.lcm.engine.expandquery import Completion
from hermes_runtime.lcm.engine.failedturns import TurnFailure
from hermes_runtime.lcm.engine.hostsync import (
    FingerprintMemo,
    SyncPlan,
    SyncResult,
    comparable,
    handed_out,
    known_overlap,
    next_host_state,
)
from hermes_runtime.lcm.records import HostState, Job
from hermes_runtime.lcm.store.dag import summary_sessions
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.replay import collapse_merged_replay
from hermes_runtime.lcm.store.sessions import host_state, set_host_state


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
        self.embedder = embedder if embedder is not None else make_embedder(config)
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self.vectors = VectorIndex()
        self._prints = FingerprintMemo()
        self._views = hostsync.HostViews()
        self.worker: EmbeddingWorker | None = None
        # The host's auxiliary model, which ``lcm_expand_query`` needs (None: not offered).
        self.auxiliary: Completion | None = None
        if start_worker and self.embedder is not None:
            self.worker = EmbeddingWorker(
                self.store, self.embedder, release_after=config.embeddings_idle_release_seconds
            )
        # One compaction of a session, and the context fitted to a budget (compacting as
        # needed), each under the session's lock; its summarizer is this engine's.
        self.compactions = Compactions(
            self.store,
            config.policy,
            self.session_lock,
            self.remember_context,
            summarizer,
            self.worker.wake if self.worker is not None else None,
        )

    def start_background(self) -> None:
        """Start a long-lived engine's threads (``start_worker``): the store's, the worker.

        The store's checkpoints and full-text indexing leave the turn's path
        (``LcmStore.start_background``), and the embedding worker starts. The
        constructor starts none: whoever keeps the engine running (the
        gateway's plugin) starts them, and ``close`` stops them.
        """
        self.store.start_background()
        if self.worker is not None:
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
        if self.store.fulltext is not None:
            self.store.fulltext.catch_up()

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
        self,
        session_id: str,
        host_messages: list[dict[str, Any]],
        wait_seconds: float,
        failure: TurnFailure | None = None,
    ) -> SyncResult | None:
        """``sync`` that gives up (None) rather than wait long for the session or the database.

        For callers on a latency-sensitive path: at most ``wait_seconds`` for
        this session's lock (held by a compaction of the same session) and
        for another process's write lock. A skipped sync loses nothing: the
        next sync of the session stores whatever is still new.

        With group commit on (the gateway's engine), the new messages and the
        host state are queued, not written: ``ingested`` is 0 and the writer
        thread stores them in its next batch (``writebehind.py``).

        ``failure``: the host's turn ended without an answer (``failedturns.py``): its
        messages are stored with the failure recorded on them.
        """
        lock = self.session_lock(session_id)
        if not lock.acquire(timeout=wait_seconds):
            return None
        try:
            with self.store.db.busy_timeout(max(1, int(wait_seconds * 1000))):
                return self._sync(session_id, host_messages, defer=True, failure=failure)
        finally:
            lock.release()

    def _sync(
        self,
        session_id: str,
        host_messages: list[dict[str, Any]],
        defer: bool = False,
        failure: TurnFailure | None = None,
    ) -> SyncResult:
        fields = hostsync.columns(host_messages)
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
        # A turn the model never answered: marked; a retry of it: stored once (failedturns.py).
        fresh, state, folded = failedturns.settle(
            comparable(saved), state, fresh, host_messages, failure, self._prints.of
        )
        merged += folded
        changed = state if state != saved else None
        if changed is not None:
            saved_raw, saved = changed, changed  # encoded when written (once a batch)
        count = self.ingest(session_id, fresh, changed, window, defer=defer, merged=merged)
        if plan.viewable and fields is not None:
            self._views.put(
                session_id,
                hostsync.HostView(  # a copy: the host keeps appending to its own list
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
        view: hostsync.HostView,
        host_messages: list[dict[str, Any]],
        fields: hostsync.Columns,
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
            len(prints) + i for i, m in enumerate(added) if not hostsync.is_stable(m)
        ]
        prints += [self._prints.of(m) for m in added]
        return SyncPlan(view.head, view.start, view.block, prints, volatile, True)

    def _plan_full(
        self,
        session_id: str,
        host_messages: list[dict[str, Any]],
        fields: hostsync.Columns | None,
    ) -> SyncPlan:
        """The sync plan read from the whole transcript: head, last block, every print."""
        head = 0
        while head < len(host_messages) and host_messages[head].get("role") == "system":
            head += 1
        block, candidates = self._split_at_last_block(session_id, host_messages[head:])
        prints = [self._prints.of(m) for m in candidates]
        volatile = [i for i, m in enumerate(candidates) if not hostsync.is_stable(m)]
        # A header that is not one of this session's blocks (quoted, or not ours) may
        # become one later: such a transcript is always read in full.
        viewable = fields is not None and not any(summary_refs_in(m) for m in candidates)
        start = len(host_messages) - len(candidates)
        return SyncPlan(head, start, block, prints, volatile, viewable)

    def _saved_host_state(
        self, session_id: str, view: hostsync.HostView | None
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
                sessions = summary_sessions(self.store, ids)
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

        What the host held before (``stale``) is kept too: a host may still
        hand back its pre-compaction transcript (Hermes' turn hook after a
        compaction in the same turn; a host that timed out and dropped our
        context, ``handed_out``).
        """
        block, raw = self._split_at_last_block(session_id, conversation)
        saved = host_state(self.store, session_id)
        state = handed_out(saved, block, [self._prints.of(m) for m in raw])
        set_host_state(self.store, session_id, state)

    # -- compaction and assembly -------------------------------------------

    def context(self, session_id: str) -> list[dict[str, Any]]:
        return assemble(self.store, session_id)

    # -- tools -------------------------------------------------------------

    def handle_tool(self, name: str, args: dict[str, Any], session_id: str | None) -> str:
        """Run a retrieval tool and return its JSON answer (errors are JSON too)."""
        started = time.perf_counter()
        try:
            payload = tools.dispatch(
                self.store,
                self.embedder,
                self.vectors,
                name,
                args or {},
                session_id,
                worker=self.worker is not None,
                complete=self.auxiliary,
            )
        except RuntimeFailure as exc:
            payload = {"error": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            payload = {"error": f"{name}: bad arguments: {type(exc).__name__} {exc}"}
        metrics.RETRIEVAL_SECONDS.labels(tool=name).observe(time.perf_counter() - started)
        return json.dumps(payload, ensure_ascii=False, default=str)

    def warm_embedder(self) -> None:
        """Start loading the embedding model where it runs in a process of its own (a turn
        begins: its search, if any, comes after the model's first reply)."""
        if isinstance(self.embedder, RunsAProcess):
            self.embedder.warm()

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
