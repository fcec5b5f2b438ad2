"""The tests' S3 server holds every bucket a long session makes (support.seaweedfs)."""

from __future__ import annotations

import json
import urllib.request
import uuid

from botocore.exceptions import ClientError
from support.seaweedfs import VOLUME_MAX, SeaweedServer

BUCKETS = 60  # more than this suite makes, and more than weed's default cap on a small disk


def test_the_s3_server_takes_a_bucket_per_test_of_a_long_session(seaweed: SeaweedServer) -> None:
    """Each bucket takes a volume of its own; with weed's default cap the last ones answer 500.

    The default cap is free disk / 1 GiB when the server starts, so the writes alone pass on a
    roomy disk: the cap the master reports must be ours, whatever the disk.
    """
    status_url = f"http://127.0.0.1:{seaweed.ports['master.port']}/dir/status"
    with urllib.request.urlopen(status_url, timeout=10) as answer:
        topology = json.load(answer)["Topology"]
    assert topology["Max"] == VOLUME_MAX, topology
    client = seaweed.client()
    prefix = f"cap-{uuid.uuid4().hex[:8]}"
    failed: list[str] = []
    for index in range(BUCKETS):
        bucket = f"{prefix}-{index}"
        seaweed.create_bucket(bucket)
        try:
            client.put_object(Bucket=bucket, Key="object", Body=b"x" * 1024)
            body = client.get_object(Bucket=bucket, Key="object")["Body"].read()
            assert body == b"x" * 1024, bucket
        except ClientError as error:
            failed.append(f"{bucket}: {error}")
    assert not failed, f"{len(failed)} of {BUCKETS} buckets refused a write: {failed[:3]}"
