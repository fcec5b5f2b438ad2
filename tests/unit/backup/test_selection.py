"""What a backup takes from the data dir: databases by header, default excludes, specials."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hermes_runtime.backup.selection import make_excluder, scan_data_dir
from hermes_runtime.common.sqlite import connect


def make_db(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path)
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()


@pytest.mark.parametrize(
    ("relpath", "is_dir"),
    [
        (".git-sync", True),
        (".env", False),
        ("auth.json", False),
        ("auth/google_oauth.json", False),
        ("mcp-tokens", True),
        ("whatsapp/session", True),
        ("plugins/weather/secrets", True),
        ("cache", True),
        ("skills/x/__pycache__", True),
        ("lost+found", True),
        (".hermes-restore-data-1234-stage", True),
        ("gateway.pid", False),
        (".hermes-runtime/idempotency.db", False),
        (".hermes-runtime/idempotency.db-wal", False),
        ("tls/server.key", False),
    ],
)
def test_default_excludes_cover_rebuildable_and_secret_paths(relpath: str, is_dir: bool) -> None:
    assert make_excluder().excluded(relpath, is_dir)


@pytest.mark.parametrize(
    ("relpath", "is_dir"),
    [
        ("state.db", False),
        ("config.yaml", False),
        ("SOUL.md", False),
        ("memories/MEMORY.md", False),
        ("outputs/report.txt", False),
        ("skills/cache-helper/SKILL.md", False),  # "cache" only as a directory name
        ("secrets.md", False),
        ("auth", True),  # the folder itself; only auth/google_oauth.json is secret
    ],
)
def test_default_excludes_keep_the_agents_memory(relpath: str, is_dir: bool) -> None:
    assert not make_excluder().excluded(relpath, is_dir)


def test_user_excludes_add_to_defaults_and_can_replace_them() -> None:
    with_defaults = make_excluder(["outputs/*.tmp", "big/"])
    assert with_defaults.excluded("outputs/x.tmp", False)
    assert with_defaults.excluded("big", True)
    assert with_defaults.excluded(".env", False)
    assert not make_excluder(["big/"], defaults=False).excluded(".env", False)


def test_a_double_star_suffix_excludes_the_folder_itself() -> None:
    excluder = make_excluder([".git-sync/**", "outputs/tmp/**"], defaults=False)
    assert excluder.excluded(".git-sync", True)
    assert excluder.excluded("outputs/tmp", True)
    assert not excluder.excluded("outputs", True)


def test_scan_finds_databases_by_header_not_by_name(tmp_path: Path) -> None:
    make_db(tmp_path / "state.db")
    make_db(tmp_path / "plugins_data" / "notes.txt")  # a database with a misleading name
    (tmp_path / "fake.db").write_bytes(b"not a database at all")
    (tmp_path / "state.db-wal").write_bytes(b"x")  # sidecar of a real database
    (tmp_path / "other-wal").write_bytes(b"y")  # a plain file that merely ends in -wal
    selection = scan_data_dir(tmp_path, make_excluder())
    assert sorted(f.relpath for f in selection.databases) == ["plugins_data/notes.txt", "state.db"]
    assert sorted(f.relpath for f in selection.files) == ["fake.db", "other-wal"]


def test_scan_skips_sockets_keeps_symlinks_and_excludes(tmp_path: Path) -> None:
    (tmp_path / ".git-sync" / "weather").mkdir(parents=True)
    (tmp_path / ".git-sync" / "weather" / "plugin.yaml").write_text("name: weather\n")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "weather").symlink_to("../.git-sync/weather")
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "agent.sock"))
    try:
        selection = scan_data_dir(tmp_path, make_excluder())
    finally:
        sock.close()
    assert [(link.relpath, link.target) for link in selection.links] == [
        ("plugins/weather", "../.git-sync/weather")
    ]
    assert selection.skipped_special == ["agent.sock"]
    assert selection.files == []
    assert [d.relpath for d in selection.dirs] == ["plugins"]
