"""The gateway's e5 runs in a process of its own: same vectors, started on demand, ended idle.

Real processes, the real e5 model (its graph from the machine's model cache): the child is
``python -m hermes_runtime.lcm.embed.embedprocess`` as the gateway starts it.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hermes_runtime.common.modelcache import model_cache_dir
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder
from hermes_runtime.lcm.embed.embedders import ReleasesIdleModel, RunsAProcess
from hermes_runtime.lcm.embed.embedprocess import (
    EmbedProcessError,
    ProcessEmbedder,
    exchange,
    gateway_embedder,
)
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.host.hostsettings import PluginHostSettings
from hermes_runtime.lcm.search.hybrid import hybrid_search

MODEL_CACHE = model_cache_dir(os.environ)
QUESTION = "Who keeps the harbour's keys?"
PASSAGES = ["The harbour master, Ana, keeps the keys.", "", "Lunch is at noon."]


@pytest.fixture
def e5() -> Iterator[ProcessEmbedder]:
    embedder = ProcessEmbedder("e5", MODEL_CACHE)
    try:
        yield embedder
    finally:
        embedder.close()


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_child_gives_the_in_process_models_vectors(e5: ProcessEmbedder) -> None:
    local = OnnxE5Embedder(cache_dir=MODEL_CACHE)
    assert (e5.model, e5.dim, e5.rank_weight) == (local.model, local.dim, local.rank_weight)
    assert e5.pid() is None  # nothing started before the first call
    assert np.array_equal(e5.embed_query(QUESTION), local.embed_query(QUESTION))
    passages = e5.embed(PASSAGES)
    assert np.array_equal(passages, local.embed(PASSAGES))
    assert not passages[1].any()  # a blank text: a zero vector, as in-process
    assert e5.embed([]).shape == (0, e5.dim)
    assert e5.pid() is not None


def test_an_idle_child_is_ended_and_the_next_call_starts_another(e5: ProcessEmbedder) -> None:
    assert isinstance(e5, ReleasesIdleModel) and isinstance(e5, RunsAProcess)
    before = e5.embed_query(QUESTION)
    first = e5.pid()
    assert first is not None
    assert not e5.release_idle(3600)  # used a moment ago: kept
    assert e5.pid() == first
    assert e5.release_idle(0)
    assert e5.pid() is None and not running(first)
    assert not e5.release_idle(0)  # nothing left to end
    assert np.array_equal(e5.embed_query(QUESTION), before)
    assert e5.pid() not in (None, first)


def test_warm_starts_the_child_without_a_call_and_a_turn_begins_with_it(
    tmp_path: Path,
) -> None:
    """``pre_llm_call`` (a turn begins) starts the child, so its model loads while the model
    answers; an engine not open yet is not opened by it."""
    e5 = ProcessEmbedder("e5", MODEL_CACHE)
    try:
        e5.warm()
        started = e5.pid()
        assert started is not None
        e5.warm()  # running: the same child
        assert e5.pid() == started
        assert e5.embed_query(QUESTION).shape == (e5.dim,) and e5.pid() == started
    finally:
        e5.close()
    shared = LcmContextEngine(
        LcmConfig.for_home(tmp_path), settings=PluginHostSettings(model_cache=MODEL_CACHE)
    )._shared
    shared.warm_embedder(session_id="s", user_message="hi")
    assert shared._engine is None  # not opened by a hook
    engine = shared.engine()
    try:
        assert isinstance(engine.embedder, ProcessEmbedder) and engine.embedder.pid() is None
        shared.warm_embedder(session_id="s", user_message="hi")
        assert engine.embedder.pid() is not None
    finally:
        engine.close()
    assert engine.embedder.pid() is None


def test_a_child_that_died_while_idle_is_replaced_by_the_next_call(e5: ProcessEmbedder) -> None:
    before = e5.embed_query(QUESTION)
    dead = e5.pid()
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: not running(dead))
    assert np.array_equal(e5.embed_query(QUESTION), before)
    assert e5.pid() not in (None, dead)


def test_a_child_that_cannot_start_fails_the_call_naming_its_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked twice (a new child each time), then the call fails: the worker keeps the work."""
    broken = tmp_path / "broken" / "numpy"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken install')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))  # the child's numpy: this one
    e5 = ProcessEmbedder("e5", MODEL_CACHE)
    with pytest.raises(EmbedProcessError, match=r"embedding process \(e5\) exited with code 1"):
        e5.embed_query(QUESTION)
    assert e5.pid() is None


def test_the_childs_embedder_error_fails_that_call_and_the_child_answers_the_next(
    e5: ProcessEmbedder,
) -> None:
    e5.embed_query(QUESTION)
    child = e5._running_child()
    with pytest.raises(EmbedProcessError, match="IndexError"):
        exchange(child, {"texts": [], "query": True})  # a question with no text
    assert exchange(child, {"texts": [QUESTION], "query": True}).shape == (1, e5.dim)


def test_the_child_gets_no_secret_and_runs_below_the_gateway(
    e5: ProcessEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-embedder")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-the-embedder-either")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    e5.embed_query(QUESTION)
    pid = e5.pid()
    assert pid is not None
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert not names & {"OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"}, names
    assert b"OPENBLAS_NUM_THREADS=1" in environ  # the image's thread cap holds there too
    assert b"not-for-the-embedder" not in b"\0".join(environ)
    assert "not-for-the-embedder" not in Path(f"/proc/{pid}/cmdline").read_text()
    gateway = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, gateway + 10)


def test_the_child_keeps_its_output_for_replies() -> None:
    """What a library prints on the child's stdout goes to stderr, never into a reply."""
    code = (
        "import sys\n"
        "from hermes_runtime.lcm.embed import embedprocess\n"
        "class Noisy:\n"
        "    dim = 2\n"
        "    def embed(self, texts):\n"
        "        print('chatter from a library')\n"
        "        return [[1.0, 0.0]] * len(texts)\n"
        "    def embed_query(self, text):\n"
        "        return [0.0, 1.0]\n"
        "embedprocess.offline_embedder = lambda *a, **k: Noisy()\n"
        "embedprocess.main(['noisy', '1', '/nonexistent', '0'])\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        vectors = exchange(child, {"texts": ["a", "b"], "query": False})
        assert vectors.tolist() == [[1.0, 0.0], [1.0, 0.0]]
        assert exchange(child, {"texts": ["q"], "query": True}).tolist() == [[0.0, 1.0]]
    finally:
        _, err = child.communicate(timeout=30)
    assert child.returncode == 0  # the end of its input ends it
    assert b"chatter from a library" in err


def test_the_gateway_runs_e5_in_a_child_and_static_in_process(tmp_path: Path) -> None:
    e5 = gateway_embedder(LcmConfig.for_home(tmp_path), tmp_path / "models")
    assert isinstance(e5, ProcessEmbedder) and e5.cache_dir == tmp_path / "models"
    static = gateway_embedder(LcmConfig.for_home(tmp_path, {"embeddings": "static"}), None)
    assert static is not None and not isinstance(static, RunsAProcess)
    assert gateway_embedder(LcmConfig.for_home(tmp_path, {"embeddings": "off"}), None) is None


def test_the_worker_ends_the_idle_child_and_search_starts_it_again(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings_idle_release_seconds": 0.5})
    e5 = ProcessEmbedder("e5", MODEL_CACHE)
    engine = LcmEngine(config, embedder=e5, start_worker=True)
    engine.start_background()
    assert engine.worker is not None
    try:
        engine.ingest("s1", [{"role": "user", "content": "Ana, the harbour master, has the keys."}])
        engine.worker.wake()
        wait_for(lambda: engine.store.counts()["embed_queue"] == 0)
        wait_for(lambda: e5.pid() is None)  # nothing to do for half a second: ended
        logged: list[str] = []
        wait_for(lambda: logged.append(capfd.readouterr().err) or "model_released" in logged[-1])
        released = [
            json.loads(line)
            for line in "".join(logged).splitlines()
            if "lcm.embeddings.model_released" in line
        ]
        assert [r["model"] for r in released] == [e5.model]
        found = hybrid_search(
            engine.store, e5, QUESTION, None, 5, mode="vector", index=engine.vectors
        )
        assert [hit.snippet for hit in found][:1] == ["Ana, the harbour master, has the keys."]
        child = e5.pid()
        assert child is not None
        assert engine.worker.errors == []
    finally:
        engine.close()
    assert e5.pid() is None and not running(child)  # the engine's close ends it


def test_neither_side_imports_more_than_its_job() -> None:
    """The gateway's side names the model without ONNX Runtime; the child starts without the
    HTTP client and the settings library (a first search after idling waits for its start)."""
    code = (
        "import sys\n"
        "from hermes_runtime.lcm.embed import embedprocess\n"
        "child = sorted(m for m in ('onnxruntime', 'httpx', 'pydantic') if m in sys.modules)\n"
        "e5 = embedprocess.ProcessEmbedder('e5', embedprocess.Path(sys.argv[1]))\n"
        "print(child, e5.model, 'onnxruntime' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(MODEL_CACHE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["[]", OnnxE5Embedder(cache_dir=MODEL_CACHE).model, "False"], out


def resident_bytes(path: Path) -> int:
    """How much of ``path`` is in the page cache: ``mincore`` over a private mapping of it
    (mapping a file reads none of it; nothing is written, so nothing is copied)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        pages = -(-len(mapped) // mmap.PAGESIZE)
        vector = (ctypes.c_ubyte * pages)()
        start = ctypes.c_char.from_buffer(mapped)
        try:
            if libc.mincore(ctypes.addressof(start), len(mapped), vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
        finally:
            del start  # the mapping closes only once no view of it is left
        return sum(flag & 1 for flag in vector) * mmap.PAGESIZE
    finally:
        mapped.close()


def filesystem_type(path: Path) -> str:
    """The type of the filesystem ``path`` is on, as ``stat -f`` names it."""
    done = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"stat -f {path}: {done.stderr}"
    return done.stdout.strip()


MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


def test_the_models_graph_leaves_the_page_cache_when_the_idle_child_ends(
    tmp_path: Path,
) -> None:
    """The graph's pages stay charged to the container until dropped: the release drops them
    (a copy of the machine's graph in a folder of this test's own, which nothing else reads).
    The folder must be on a disk: a file in memory (tmpfs, as /tmp in the py314 tier) has no
    page cache to drop, its pages are its storage."""
    local = OnnxE5Embedder(cache_dir=MODEL_CACHE)
    local.embed_query(QUESTION)  # the machine's graph built, if it was not
    (graph,) = [f for f in local.model_files() if f.parent == MODEL_CACHE]
    on_disk = [d for d in (tmp_path, MODEL_CACHE) if filesystem_type(d) not in MEMORY_FILESYSTEMS]
    if not on_disk:
        pytest.fail(f"neither {tmp_path} nor {MODEL_CACHE} is on a disk: nothing to test here")
    own = Path(tempfile.mkdtemp(prefix=".page-cache-test-", dir=on_disk[0]))
    try:
        check_the_drop(graph, own)
    finally:
        shutil.rmtree(own)


def check_the_drop(graph: Path, own: Path) -> None:
    copy = own / graph.name
    with copy.open("wb") as handle:
        handle.write(graph.read_bytes())
        os.fsync(handle.fileno())  # clean pages: a dirty page is written back, not dropped
    e5 = ProcessEmbedder("e5", own)
    try:
        assert copy in e5._files
        e5.embed_query(QUESTION)
        assert resident_bytes(copy) > 0
        assert e5.release_idle(0)
        assert resident_bytes(copy) == 0
    finally:
        e5.close()
