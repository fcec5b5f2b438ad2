"""The embedding queue and the vectors table: every statement the embedding pipeline runs.

Why a module of its own: ingest appends to ``embed_queue`` in the store's
own transactions; what reads, backfills and drains that queue and writes
``embeddings`` rows lives here, so the batching (``embedbatch``) and the
worker thread (``embedworker``) never hold a connection. Vectors carry
their model name, and every read here filters on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.messagereads import top_id
from hermes_runtime.lcm.store.schema import Row, rows_for_ids

ENQUEUE_PAGE = 50_000  # item ids scanned a transaction: a gateway's turns wait for one page
ITEM_TABLES = (("message", "messages"), ("summary", "summaries"))
# kind -> the text embedded: the stub stands in for externalized content
ITEM_TEXT = {
    "message": "SELECT id, session_id, coalesce(content, content_json, '') FROM messages "
    "WHERE id IN",
    "summary": "SELECT id, session_id, content FROM summaries WHERE id IN",
}
HAS_VECTOR = "SELECT item_id FROM embeddings WHERE model = ? AND kind = ? AND item_id IN"

QueueEntry = tuple[int, str, int]  # (queue id, kind, item id)


def enqueue_missing(store: LcmStore, model: str) -> int:
    """Queue every message and summary without a vector of ``model``; returns how many.

    Run when a worker starts and by ``lcm embed``: after a model change the
    old vectors stay (and are ignored: queries filter on the model) and the
    history is re-embedded. Items already queued are not queued twice. The
    history is scanned ``ENQUEUE_PAGE`` ids a transaction, so a writer of
    another process (the gateway's turns) waits for one page at most.
    """
    queued = 0
    for kind, table in ITEM_TABLES:
        for low in range(1, top_id(store, table) + 1, ENQUEUE_PAGE):
            high = low + ENQUEUE_PAGE - 1
            with store.writing() as conn:
                conn.execute(
                    f"INSERT INTO embed_queue(kind, item_id) SELECT ?, t.id FROM {table} t "
                    "WHERE t.id BETWEEN ? AND ? AND t.id NOT IN "
                    "(SELECT item_id FROM embed_queue WHERE kind = ? AND item_id BETWEEN ? AND ?) "
                    "AND NOT EXISTS (SELECT 1 FROM embeddings e "
                    "WHERE e.model = ? AND e.kind = ? AND e.item_id = t.id) ORDER BY t.id",
                    (kind, low, high, kind, low, high, model, kind),
                )
                queued += conn.changes()
    return queued


def queued(store: LcmStore, limit: int, oldest_first: bool = True) -> list[QueueEntry]:
    """(queue id, kind, item id) of the oldest (or newest) ``limit`` queued items."""
    order = "" if oldest_first else " DESC"
    return [
        (int(r[0]), str(r[1]), int(r[2]))
        for r in store.conn.execute(
            f"SELECT id, kind, item_id FROM embed_queue ORDER BY id{order} LIMIT ?", (limit,)
        )
    ]


def _ids_of(batch: Sequence[QueueEntry], kind: str) -> list[int]:
    return sorted({item_id for _, k, item_id in batch if k == kind})


def texts_for(store: LcmStore, batch: Sequence[QueueEntry]) -> list[tuple[str, str]]:
    """(session_id, text) per queued item, two queries per batch; ("", "") for a missing item."""
    found: dict[tuple[str, int], tuple[str, str]] = {}
    for kind, _ in ITEM_TABLES:
        rows = rows_for_ids(store.conn, ITEM_TEXT[kind], _ids_of(batch, kind))
        for item_id, session, text in rows:
            found[(kind, int(item_id))] = (str(session), str(text or ""))
    return [found.get((kind, item_id), ("", "")) for _, kind, item_id in batch]


def with_vectors(store: LcmStore, model: str, batch: Sequence[QueueEntry]) -> set[tuple[str, int]]:
    """The queued items that already have a vector of ``model`` (another process embedded them)."""
    return {
        (kind, int(item_id))
        for kind, _ in ITEM_TABLES
        for (item_id,) in rows_for_ids(store.conn, HAS_VECTOR, _ids_of(batch, kind), (model, kind))
    }


def store_vectors(store: LcmStore, rows: list[Row], batch: Sequence[QueueEntry]) -> None:
    """Insert vector rows and dequeue exactly ``batch``, in one transaction.

    ``rows``: (kind, item id, model, dim, session id, encoded vector).
    """
    with store.writing() as conn:
        conn.executemany(
            "INSERT OR IGNORE INTO embeddings(kind, item_id, model, dim, session_id, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        # Exactly the rows embedded: queue ids are reused once the table empties, and a
        # worker of another process may have emptied it meanwhile; "id <= last" then
        # deleted items queued since, which were never embedded.
        conn.executemany("DELETE FROM embed_queue WHERE id = ? AND kind = ? AND item_id = ?", batch)
