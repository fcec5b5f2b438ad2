#!/usr/bin/env python3
"""Serve bare git repositories over HTTP with `git http-backend` (smart HTTP, push allowed).

For tests only (hermes-runtime/git-server:dev): no auth, one process. Why not Python's CGI
handler: it is deprecated and, as root, drops to nobody, which makes git refuse the repository
("dubious ownership"). This server runs as its own non-root user and runs the backend itself.

--seed DIR: each sub-directory DIR/<name>/ becomes the repository <root>/<name>.git with one
commit on ``main`` (when that repository does not exist yet), so a ConfigMap can define a plugin.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


def seed_repositories(root: Path, seed: Path) -> None:
    if not seed.is_dir():
        return
    for source in sorted(p for p in seed.iterdir() if p.is_dir() and not p.name.startswith(".")):
        bare = root / f"{source.name}.git"
        if bare.exists():
            continue
        with tempfile.TemporaryDirectory() as work:
            # ConfigMap volumes are symlink farms (..data); copy dereferenced files.
            shutil.copytree(
                source,
                work,
                dirs_exist_ok=True,
                symlinks=False,
                ignore=shutil.ignore_patterns("..*"),
            )
            git = ["git", "-C", work, "-c", "user.name=seed", "-c", "user.email=seed@localhost"]
            subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
            subprocess.run([*git, "add", "-A"], check=True)
            subprocess.run([*git, "commit", "-q", "-m", f"seed {source.name}"], check=True)
            subprocess.run(["git", "clone", "-q", "--bare", work, str(bare)], check=True)
        print(f"git-server: seeded {bare}", file=sys.stderr, flush=True)


class GitHandler(BaseHTTPRequestHandler):
    root: Path

    def do_GET(self) -> None:
        if self.path in ("/", "/healthz"):
            self._reply(200, b"ok\n")
            return
        self._backend(b"")

    def do_POST(self) -> None:
        self._backend(self._read_body())

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

    def _backend(self, body: bytes) -> None:
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "test",
            "REMOTE_ADDR": self.client_address[0],
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        if not _:
            self._reply(500, result.stderr or b"git http-backend failed\n")
            return
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("/srv/git"))
    parser.add_argument("--seed", type=Path, default=Path("/srv/seed"))
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    seed_repositories(args.root, args.seed)
    GitHandler.root = args.root
    server = ThreadingHTTPServer((args.host, args.port), GitHandler)
    print(
        f"git-server: serving {args.root} on {args.host}:{args.port}", file=sys.stderr, flush=True
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
