"""Benchmark: `vault render` latency, refresher cost per tick, rotation-to-file latency.

Usage:
    PYTHONPATH=tests .venv/bin/python bench/vault_render.py [--secrets 4,50] [--interval 1.0]
        [--json]

Against a real OpenBao dev server (the test tier's container, tests/support/openbao.py; build
its image first with `NO_PUSH=1 ci/build-images.sh openbao`), token auth:
* render (in-process): login + read every path + write the 0600 file, median of 10,
  for N secrets spread over N/5 KV v2 paths (5 keys per path);
* render (CLI): the same through `hermes-runtime vault render`, interpreter start
  included (what an init container costs), median of 5;
* refresher tick: this process's CPU time per steady-state tick (nothing changed,
  so nothing written), over 50 ticks at 0.1 s;
* rotation: time from a KV write to the env file holding the new value with
  `--refresh INTERVAL`, median and max of 5 (expected: up to one interval).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import runinfo

from hermes_runtime.vault import (
    SecretSpec,
    VaultSettings,
    read_env_file,
    render_once,
    run_refresh,
)

try:  # tests/support: the integration tier's OpenBao, shared
    from support.openbao import OpenBaoServer, openbao_dev_server
except ModuleNotFoundError as exc:
    raise runinfo.missing_test_helpers(exc) from exc

KEYS_PER_PATH = 5


def seed_secrets(server: OpenBaoServer, count: int, tag: str) -> list[SecretSpec]:
    client = server.client()
    specs = []
    for path_index in range((count + KEYS_PER_PATH - 1) // KEYS_PER_PATH):
        keys = {f"K{k}": f"value-{tag}-{path_index}-{k}" for k in range(KEYS_PER_PATH)}
        client.secrets.kv.v2.create_or_update_secret(
            path=f"bench/{tag}/{path_index}", secret=keys, mount_point="secret"
        )
        for key in keys:
            if len(specs) < count:
                specs.append(
                    SecretSpec(
                        f"secret/data/bench/{tag}/{path_index}", key, f"V_{path_index}_{key}"
                    )
                )
    return specs


def median_seconds(run: Any, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_render(server: OpenBaoServer, count: int, workdir: Path) -> dict[str, float]:
    specs = seed_secrets(server, count, f"n{count}")
    settings = VaultSettings(addr=server.addr, auth="token")
    environ = {"VAULT_TOKEN": server.root_token}
    sink = io.StringIO()
    counter = iter(range(10**6))

    def in_process() -> None:
        render_once(settings, specs, workdir / f"env-{next(counter)}", environ, sink)

    argv = [
        sys.executable,
        "-m",
        "hermes_runtime",
        "vault",
        "render",
        "--addr",
        server.addr,
        "--auth",
        "token",
    ]
    for spec in specs:
        argv += ["--secret", str(spec)]
    cli_env = {**os.environ, "VAULT_TOKEN": server.root_token}

    def via_cli() -> None:
        out = workdir / f"cli-{next(counter)}"
        subprocess.run([*argv, "--out", str(out)], env=cli_env, check=True, capture_output=True)

    return {
        "secrets": count,
        "paths": len({spec.path for spec in specs}),
        "render_in_process_ms": round(median_seconds(in_process, 10) * 1000, 1),
        "render_cli_ms": round(median_seconds(via_cli, 5) * 1000, 1),
    }


def bench_refresh_tick(server: OpenBaoServer, workdir: Path, ticks: int = 50) -> dict[str, float]:
    specs = seed_secrets(server, 4, "tick")
    settings = VaultSettings(addr=server.addr, auth="token")
    out, stop, sink = workdir / "tick-env", threading.Event(), io.StringIO()
    interval = 0.1
    thread = threading.Thread(
        target=run_refresh,
        args=(settings, specs, out, interval, stop, {"VAULT_TOKEN": server.root_token}, sink),
    )
    thread.start()
    while not out.exists():
        time.sleep(0.01)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    time.sleep(ticks * interval)
    cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    stop.set()
    thread.join()
    return {
        "tick_interval_s": interval,
        "cpu_ms_per_tick": round(cpu / (wall / interval) * 1000, 2),
    }


def bench_rotation(
    server: OpenBaoServer, workdir: Path, interval: float, samples: int = 5
) -> dict[str, float]:
    client = server.client()
    client.secrets.kv.v2.create_or_update_secret(
        path="bench/rotate", secret={"K": "v0"}, mount_point="secret"
    )
    settings = VaultSettings(addr=server.addr, auth="token")
    out, stop, sink = workdir / "rotate-env", threading.Event(), io.StringIO()
    spec = [SecretSpec("secret/data/bench/rotate", "K", "ROTATED")]
    args = (settings, spec, out, interval, stop, {"VAULT_TOKEN": server.root_token}, sink)
    thread = threading.Thread(target=run_refresh, args=args)
    thread.start()
    while not out.exists():
        time.sleep(0.01)
    latencies = []
    for index in range(1, samples + 1):
        time.sleep(interval * 0.37)  # land the write at varying points of the interval
        value = f"v{index}"
        client.secrets.kv.v2.create_or_update_secret(
            path="bench/rotate", secret={"K": value}, mount_point="secret"
        )
        start = time.perf_counter()
        while read_env_file(out).get("ROTATED") != value:
            time.sleep(0.005)
        latencies.append(time.perf_counter() - start)
    stop.set()
    thread.join()
    return {
        "interval_s": interval,
        "rotation_median_s": round(statistics.median(latencies), 3),
        "rotation_max_s": round(max(latencies), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--secrets", default="4,50", help="comma-separated secret counts")
    parser.add_argument(
        "--interval", type=float, default=1.0, help="refresh interval for the rotation test"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runinfo.announce()
    results: dict[str, Any] = {}
    with openbao_dev_server() as server, tempfile.TemporaryDirectory(prefix="vault-bench-") as tmp:
        workdir = Path(tmp)
        results["render"] = [bench_render(server, int(n), workdir) for n in args.secrets.split(",")]
        results["refresh_tick"] = bench_refresh_tick(server, workdir)
        results["rotation"] = bench_rotation(server, workdir, args.interval)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results["render"]:
            print(
                f"render {row['secrets']:>3} secrets / {row['paths']:>2} paths: "
                f"in-process {row['render_in_process_ms']} ms, CLI {row['render_cli_ms']} ms"
            )
        tick = results["refresh_tick"]
        print(f"refresher steady state: {tick['cpu_ms_per_tick']} ms CPU per tick")
        rot = results["rotation"]
        print(
            f"rotation with --refresh {rot['interval_s']}: median {rot['rotation_median_s']} s, "
            f"max {rot['rotation_max_s']} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
