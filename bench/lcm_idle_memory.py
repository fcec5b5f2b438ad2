"""What the e5 model costs an idle agent, and what freeing it saves: resident memory and time.

In a fresh process, as the agent's gateway holds it: resident memory (VmRSS) before the model,
with it loaded (after a question and a batch of passages), after the worker's idle release
(``OnnxE5Embedder.release_idle``: the engine dropped; then the C heap trimmed, as the
worker does), and after the next question loads it again; with the first question's time
(the model loaded from its cached graph) beside the reload's and a warm question's. Each
round runs in a new process.

Run: ``.venv/bin/python bench/lcm_idle_memory.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

import runinfo

ROUND = r"""
import json, time
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return round(int(line.split()[1]) / 1024, 1)
import os
from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder
from hermes_runtime.common.idlememory import return_freed_memory
from hermes_runtime.common.modelcache import model_cache_dir
e5 = OnnxE5Embedder(cache_dir=model_cache_dir(os.environ))
out = {"before_mib": rss_mib()}
started = time.perf_counter(); e5.embed_query("Which city does my sister live in now?")
out["first_query_s"] = time.perf_counter() - started
e5.embed(["My sister Clara moved to Lisbon last spring. " * 8] * 64)
out["loaded_mib"] = rss_mib()
started = time.perf_counter(); e5.embed_query("When do the directors meet next?")
out["warm_query_s"] = time.perf_counter() - started
assert e5.release_idle(0)
return_freed_memory()  # as the agent's embedding worker does after a release
out["released_mib"] = rss_mib()
started = time.perf_counter(); e5.embed_query("Where did I leave my vehicle?")
out["reload_query_s"] = time.perf_counter() - started
out["reloaded_mib"] = rss_mib()
print(json.dumps(out))
"""


def one_round() -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ROUND], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runinfo.announce()
    one_round()  # builds the cached graph if this machine has none yet
    rounds = [one_round() for _ in range(args.rounds)]
    report: dict[str, Any] = {
        name: round(statistics.median(r[name] for r in rounds), 3) for name in rounds[0]
    }
    report["freed_mib"] = round(report["loaded_mib"] - report["released_mib"], 1)
    report["reload_vs_first_load"] = round(report["reload_query_s"] / report["first_query_s"], 2)
    report["rounds"] = args.rounds
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
