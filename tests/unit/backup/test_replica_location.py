"""Target URLs map to Litestream replicas under ``litestream/<agent>/``; no secret reaches
its config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_runtime.backup import ReplicationSettings, replica_location
from hermes_runtime.backup.continuous import META_RELPATH, litestream_config, private_folder
from hermes_runtime.backup.replica_order import parse_ltx_key
from hermes_runtime.backup.replicas.files import FileReplicas
from hermes_runtime.backup.replicas.s3 import S3Replicas
from hermes_runtime.common.errors import RuntimeFailure

S3_ENV = {
    "AWS_ENDPOINT_URL": "http://seaweedfs:8333",
    "AWS_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
}


def test_a_folder_target_keeps_replicas_in_its_litestream_folder() -> None:
    location = replica_location("file:///backup/", environ={})
    assert location.replica_url("sub/x.db") == "file:///backup/litestream/hermes-runtime/sub/x.db"
    config = location.replica_config("lcm.db")
    assert config == {"type": "file", "path": "/backup/litestream/hermes-runtime/lcm.db"}
    assert location.replicas_root() == "/backup/litestream/hermes-runtime/"
    assert location.replicas_url() == "file:///backup/litestream"


def test_s3_target_keeps_its_prefix_endpoint_and_region() -> None:
    location = replica_location("s3://bkp/team/a/", environ=S3_ENV)
    assert location.replica_config("lcm.db") == {
        "type": "s3",
        "bucket": "bkp",
        "path": "team/a/litestream/hermes-runtime/lcm.db",
        "region": "eu-west-1",
        "endpoint": "http://seaweedfs:8333",
        "force-path-style": True,
    }
    url = location.replica_url("lcm.db")
    assert url.startswith("s3://bkp/team/a/litestream/hermes-runtime/lcm.db?")
    assert "forcePathStyle=true" in url and "region=eu-west-1" in url
    assert location.replicas_root() == "team/a/litestream/hermes-runtime/"
    bare = replica_location("s3://bkp", "https://minio:9000", environ={})
    assert isinstance(bare, S3Replicas)
    assert bare.replica_config("x.db")["path"] == "litestream/hermes-runtime/x.db"
    assert bare.endpoint == "https://minio:9000" and bare.region == "us-east-1"


def test_the_kind_of_replicas_is_chosen_from_the_url_alone() -> None:
    """The AWS variables of the environment never make a folder target an S3 one."""
    assert isinstance(replica_location("file:///backup", environ=S3_ENV), FileReplicas)
    assert isinstance(replica_location("s3://bkp", environ={}), S3Replicas)


def test_aws_itself_needs_no_endpoint_nor_path_style() -> None:
    config = replica_location("s3://bkp/p", environ={"AWS_REGION": "us-west-2"}).replica_config(
        "a.db"
    )
    assert "endpoint" not in config and "force-path-style" not in config


def test_each_agent_replicates_into_a_folder_of_its_own() -> None:
    first = replica_location("s3://bkp/fleet", environ=S3_ENV, agent="team-a.hermes")
    second = replica_location("s3://bkp/fleet", environ=S3_ENV, agent="team-a.hermes-2")
    assert first.replicas_root() == "fleet/litestream/team-a.hermes/"
    assert second.replicas_root() == "fleet/litestream/team-a.hermes-2/"
    # no agent's folder holds another's: every name is one segment, and roots end in "/"
    assert not second.replica_path("lcm.db").startswith(first.replicas_root())
    assert first.replicas_url() == second.replicas_url() == "s3://bkp/fleet/litestream"


@pytest.mark.parametrize("agent", ["a/b", "..", "-x", "x-", "", "a" * 129, "x y"])
def test_an_agent_name_that_is_not_one_segment_is_refused(agent: str) -> None:
    with pytest.raises(RuntimeFailure, match="--agent"):
        replica_location("s3://bkp/fleet", environ={}, agent=agent)


@pytest.mark.parametrize("url", ["ftp://x/y", "file://host/path", "s3:///prefix", "/plain"])
def test_other_urls_are_refused_naming_them(url: str) -> None:
    with pytest.raises(RuntimeFailure, match="expected file:///path or s3://bucket/prefix"):
        replica_location(url, environ={})


def test_config_names_paths_and_intervals_but_never_a_credential(tmp_path: Path) -> None:
    location = replica_location("s3://bkp/agent", environ=S3_ENV)
    settings = ReplicationSettings(sync_interval_seconds=0.5)
    config = litestream_config(tmp_path, location, ["lcm.db", "sub/x.db"], settings)
    text = repr(config)
    assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in text and S3_ENV["AWS_ACCESS_KEY_ID"] not in text
    first, second = config["dbs"]
    assert first["path"] == str(tmp_path / "lcm.db")
    assert first["meta-path"] == str(tmp_path / META_RELPATH / "lcm.db-litestream")
    assert second["replica"]["path"] == "agent/litestream/hermes-runtime/sub/x.db"
    assert first["monitor-interval"] == first["replica"]["sync-interval"] == "500ms"


@pytest.mark.parametrize(
    ("key", "database"),
    [
        ("lcm.db/ltx/0/0000000000000001-0000000000000001.ltx", "lcm.db"),  # file replica
        ("lcm.db/0009/0000000000000001-0000000000000001.ltx", "lcm.db"),  # S3 replica
        ("plugins/x/data.db/0001/0000000000000002-0000000000000005.ltx", "plugins/x/data.db"),
        ("lcm.db/ltx/0/file.tmp", None),
        ("stray.ltx", None),
    ],
)
def test_replica_files_name_their_database(key: str, database: str | None) -> None:
    parsed = parse_ltx_key(key)
    assert (parsed.relpath if parsed else None) == database


def test_litestreams_config_folder_is_new_private_and_removed(tmp_path: Path) -> None:
    """Whoever could replace the config before Litestream reads it would run its ``exec:``."""
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    planted = shared / "hermes-litestream.yml"  # the old fixed name: no longer used
    planted.write_text("exec: cat /proc/self/environ\n")
    with private_folder(shared) as first, private_folder(shared) as second:
        assert first != second and first.parent == second.parent == shared
        assert (first.stat().st_mode & 0o777) == 0o700 and first.stat().st_uid == os.getuid()
    assert not first.exists() and not second.exists()
    assert planted.read_text() == "exec: cat /proc/self/environ\n"
