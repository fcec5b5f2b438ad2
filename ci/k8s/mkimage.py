#!/usr/bin/env python3
"""Write a single-layer image tarball in `docker save` format without a daemon.

Why: no registry is reachable and the local cluster must not depend on a Docker
engine, so the few FROM-scratch images it needs (pause, CoreDNS, the storage
provisioner and its busybox helper) are assembled here from static binaries and
imported with `ctr images import`. Output is written to a temp file and renamed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tag", required=True, help="repository:tag, e.g. hermes-runtime/pause:3.10")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--entrypoint", required=True, help="JSON list")
    parser.add_argument("--cmd", default="[]", help="JSON list")
    parser.add_argument("--user", default="")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--file", action="append", default=[], help="HOSTPATH:IMAGEPATH[:MODE]")
    parser.add_argument("--symlink", action="append", default=[], help="IMAGEPATH:TARGET")
    parser.add_argument("--dir", action="append", default=[], help="IMAGEPATH[:MODE]")
    return parser.parse_args()


def add_dir(tar: tarfile.TarFile, path: str, mode: int, seen: set[str]) -> None:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        name = "/".join(parts[:i])
        if name in seen:
            continue
        seen.add(name)
        info = tarfile.TarInfo(name)
        info.type = tarfile.DIRTYPE
        info.mode = mode if i == len(parts) else 0o755
        tar.addfile(info)


def build_layer(args: argparse.Namespace) -> bytes:
    buf = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for spec in args.dir:
            path, _, mode = spec.partition(":")
            add_dir(tar, path, int(mode or "755", 8), seen)
        for spec in args.file:
            host, image_path, *rest = spec.split(":")
            parent = os.path.dirname(image_path.strip("/"))
            if parent:
                add_dir(tar, parent, 0o755, seen)
            data = Path(host).read_bytes()
            info = tarfile.TarInfo(image_path.strip("/"))
            info.size = len(data)
            info.mode = int(rest[0], 8) if rest else 0o755
            tar.addfile(info, io.BytesIO(data))
        for spec in args.symlink:
            image_path, target = spec.split(":", 1)
            parent = os.path.dirname(image_path.strip("/"))
            if parent:
                add_dir(tar, parent, 0o755, seen)
            info = tarfile.TarInfo(image_path.strip("/"))
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def main() -> None:
    args = parse_args()
    layer = build_layer(args)
    diff_id = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": json.loads(args.entrypoint),
            "Cmd": json.loads(args.cmd) or None,
            "User": args.user,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", *args.env],
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "ci/k8s/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": f"{config_id}.json", "RepoTags": [args.tag], "Layers": [f"{diff_id}/layer.tar"]}]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".mkimage-")
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as out:
        for name, data in (
            (f"{diff_id}/layer.tar", layer),
            (f"{config_id}.json", config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            out.addfile(info, io.BytesIO(data))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
