"""Our target URLs map to restic repositories; the password is required up front."""

from __future__ import annotations

import pytest

from hermes_runtime.backup import open_repository
from hermes_runtime.common.errors import RuntimeFailure

PW = {"RESTIC_PASSWORD": "pw"}


def test_a_folder_is_a_local_repository() -> None:
    repo = open_repository("file:///backup/agent", environ=PW)
    assert (repo.repository, repo.options) == ("/backup/agent", ())


def test_s3_maps_to_restics_s3_backend_with_path_style_for_self_hosted() -> None:
    env = {**PW, "AWS_ENDPOINT_URL": "http://seaweedfs:8333/", "AWS_REGION": "eu-west-1"}
    repo = open_repository("s3://bkp/team/a/", environ=env)
    assert repo.repository == "s3:http://seaweedfs:8333/bkp/team/a"
    assert repo.options == ("-o", "s3.bucket-lookup=path")
    assert repo.env["AWS_DEFAULT_REGION"] == "eu-west-1"  # restic reads this one
    flag = open_repository("s3://bkp", "https://minio:9000", environ=env)
    assert flag.repository == "s3:https://minio:9000/bkp"


def test_s3_without_an_endpoint_is_aws() -> None:
    repo = open_repository("s3://bkp/agent", environ={"RESTIC_PASSWORD_FILE": "/run/pw"})
    assert (repo.repository, repo.options) == ("s3:https://s3.amazonaws.com/bkp/agent", ())


@pytest.mark.parametrize("url", ["ftp://x/y", "file://host/path", "s3:///prefix", "/plain/path"])
def test_other_urls_are_refused_naming_them(url: str) -> None:
    with pytest.raises(RuntimeFailure, match="expected file:///path or s3://bucket/prefix"):
        open_repository(url, environ=PW)


def test_no_password_names_restics_variables() -> None:
    with pytest.raises(RuntimeFailure, match="RESTIC_PASSWORD or RESTIC_PASSWORD_FILE"):
        open_repository("file:///backup", environ={"RESTIC_PASSWORD": ""})
