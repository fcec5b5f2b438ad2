"""The gateway opens an existing lcm.db as soon as LCM is loaded, not at the first turn.

After an upgrade that migrates (schema 3 -> 4 moved the full-text postings into lcm-fts.db),
a read-only reader (`lcm grep` from the CLI, an operator at 3 a.m.) found no index until
somebody talked to the agent: "LCM full-text index ... no such file". Found by the
upgrade-and-rollback scenario (tests/e2e/test_upgrade_rollback.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig
from hermes_runtime.lcm.host.plugin_host import open_existing_database
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import MIGRATIONS


def schema_3(db: Path) -> None:
    conn = connect(db)
    for step in MIGRATIONS[:3]:
        conn.execute(step)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO sessions(id, created_at, next_seq) VALUES ('old', 1.0, 2)")
    conn.execute(
        "INSERT INTO messages(session_id, seq, role, content, token_count, created_at) "
        "VALUES ('old', 1, 'user', 'a numbat from before the upgrade', 9, 1.0)"
    )
    conn.close()


def home(tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> LcmConfig:
    (tmp_path / "config.yaml").write_text(
        f"context:\n  engine: {engine}\nlcm:\n  embeddings: off\n  import_hermes_state: false\n"
    )
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    return LcmConfig.for_home(tmp_path, {"embeddings": "off", "import_hermes_state": False})


def test_an_existing_database_is_migrated_and_indexed_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = home(tmp_path, "lcm", monkeypatch)
    schema_3(config.db_path)
    opened: list[LcmStore] = []

    def open_engine() -> LcmStore:
        store = LcmStore(config.db_path, config.outputs_dir)  # what the engine's open does
        opened.append(store)
        return store

    thread = open_existing_database(open_engine, HermesConfigFile.read(tmp_path))
    assert thread is not None
    thread.join(60)
    reader = LcmStore(config.db_path, readonly=True)  # the CLI beside the gateway
    try:
        hits = grep(reader, "numbat")
        assert [hit.snippet for hit in hits] == ["a [numbat] from before the upgrade"]
    finally:
        reader.close()
        for store in opened:
            store.close()


@pytest.mark.parametrize("engine", ["lcm", "compressor"])
def test_nothing_is_created_on_a_new_volume_or_for_another_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    config = home(tmp_path, engine, monkeypatch)
    calls: list[int] = []
    if engine == "compressor":
        schema_3(config.db_path)  # there, but LCM is not the engine: left alone
    assert open_existing_database(lambda: calls.append(1), HermesConfigFile.read(tmp_path)) is None
    assert calls == []
    assert config.db_path.exists() is (engine == "compressor")
