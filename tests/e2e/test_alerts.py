"""The chart's alerts, fired by real faults and seen by a real Prometheus (issue 30).

Prometheus (Debian's 2.42, tests/e2e/charts/prometheus) runs in the test namespace with the
scrape config the chart's ServiceMonitor stands for and the rule groups of its PrometheusRule
objects, both rendered by helm from the release's own values (tests/e2e/prometheus_testlib.py).
It scrapes the agent's metrics port through the chart's NetworkPolicy (metricsFrom names the
Prometheus pod). Two chat clients keep talking to the agent the whole time (the fault suite's
load pod); after each fault every acknowledged turn is in LCM exactly once and the databases
pass integrity_check (tests/e2e/faults_testlib.py).

- Bucket down: backups every 60 s from the sidecar to SeaweedFS (its data on a PVC), then
  SeaweedFS scaled to 0: HermesBackupFailed and HermesBackupMissing go pending, then firing;
  the status record's error names the endpoint; SeaweedFS back: both clear (the next backup
  succeeds into the same repository).
- Gateway killed in a loop (SIGKILL three times; the supervisor restarts it in place):
  HermesGatewayRestarting fires, with nothing of the agent restarted by the kubelet. Right
  after each kill more connections than the front door holds (`agent.frontDoorMaxHeld`, set
  to 16 here) are opened from inside the pod: those past its maximum are refused with a 503,
  and HermesFrontDoorSaturated fires (quiet before: a healthy agent refuses nothing).
- Data volume filled (a tmpfs volume, tests/e2e/storage_testlib.py): HermesDataVolumeFull
  goes pending then firing while the volume still has room (filled to halfway between the
  alert's threshold and `agent.dataVolume.minFreeMiB`, so the turns the clients store while
  the alert goes pending and firing do not reach the reserve: the pod still serves,
  HermesDataVolumeReserveReached stays quiet); then filled
  to the last byte (a new file is refused) while the clients keep chatting, until
  HermesDataVolumeReserveReached and HermesAgentUnready (/ready answers 503) fire, and
  FULL_SECONDS at least; the ballast removed, the three alerts clear and the agent serves.
  The full volume's own checks come last (so the alert's clearing and the data checks run
  whatever they find): /ready's data check answers 503 while the volume is full (under the
  reserve the front door refuses new turns with a 503), and every turn answered with HTTP 200
  meanwhile is in LCM exactly once (issue 30: 45-60 were missing and one was stored twice
  before LCM held the writes the volume refused and the agent stopped taking turns it could
  not store).

Before each fault its alert is asserted quiet, so an alert that fires anyway fails the test,
and one that never fires fails its wait. The times (fault -> firing, fault end -> answering
and -> cleared), failed requests and the data checks are printed as one `figures:` line per
fault, the source of docs/benchmarks.md "Faults beyond restarts"; they are never asserted.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.chat_load import fault_figures

from . import faults_testlib as lib
from . import images, kube
from . import prometheus_testlib as prom
from . import storage_testlib as storage
from .test_scenario_conversation import BACKENDS_CHART, CHART, RELEASE, agent_exec

IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs", "prometheus", "busybox"]
FULLNAME = f"{RELEASE}-hermes-agent"
JOB = f'job="{FULLNAME}"'
STATUS_FILE = "/opt/data/.hermes-runtime/backup-status.json"
S3_ENDPOINT = "http://s3:8333"
COMMON = {
    **images.agent_values(),
    "plugins": [],
    "tests": {"enabled": False},
    "lcm": {"embeddings": {"mode": "off"}},
}
BACKUP_VALUES = {
    "backup": {
        "enabled": True,
        "mode": "sidecar",
        "interval": 60,  # the schema's minimum: HermesBackupMissing allows 120 s
        "target": {
            "type": "s3",
            "s3": {
                "bucket": "backups",
                "prefix": "hermes",
                "endpoint": S3_ENDPOINT,
                "region": "us-east-1",
                "existingSecret": "s3-credentials",
            },
        },
        "prometheusRule": {"failedFor": "15s", "missingFor": "15s"},
    },
}
VOLUME_MIB = 128
VOLUME_CLAIM = "small-data"
FREE_RATIO = 0.25  # HermesDataVolumeFull's threshold in this test
RESTART_VALUES = {
    "backup": {"enabled": False},
    "metrics": {
        "prometheusRule": {
            "dataVolumeFreeRatio": FREE_RATIO,
            "dataVolumeFor": "10s",
            "gatewayCrashes": 3,
            "gatewayCrashWindow": "2m",
            "frontDoorWindow": "2m",
            "reserveFor": "5s",
            "unreadyFor": "5s",
        }
    },
}
SATURATED = "HermesFrontDoorSaturated"
FULL_ALERTS = ("HermesDataVolumeReserveReached", "HermesAgentUnready")
# The reserve under which the agent takes no new turns: far below the alert's threshold (32
# MiB free of 128), so the alert fires while the pod still serves; the full volume is under it.
RESERVE_MIB = 4
VOLUME_VALUES = {
    **RESTART_VALUES,
    "persistence": {"existingClaim": VOLUME_CLAIM},
    "agent": {"dataVolume": {"minFreeMiB": RESERVE_MIB}},
}
# The free share the first ballast leaves: halfway between the alert's threshold and the
# reserve (18 MiB), a margin of 14 MiB for what the chatting clients store meanwhile.
NEAR_FULL_RATIO = (FREE_RATIO + RESERVE_MIB / VOLUME_MIB) / 2
KILLS = 3  # under the supervisor's 5 crashes a minute, after which the container exits
# The front door's cap on held connections in the kill test, and the knocks after each kill:
# a small cap, so the front door reaches more than its cap of the knocks (and refuses some)
# before the gateway is back, which on a loaded 2-core machine can be within 4 s of a kill.
MAX_HELD = 16
KNOCKS = 4 * MAX_HELD
KILL_VALUES = {**RESTART_VALUES, "agent": {"frontDoorMaxHeld": MAX_HELD}}
# In the agent container: SIGKILL the gateway KILLS times, each time once its successor runs
# (a new pid in the gateway's own pid file), then opens argv[2] connections to the front door;
# prints the time of each kill, the pid killed and how many of its knocks the front door refused.
KILL_LOOP = """
import json, os, selectors, signal, socket, sys, time
port = int(os.environ.get("API_SERVER_PORT", "8642"))
killed = []
def knock(count):
    # Connections to the front door while no gateway accepts: up to its maximum are held,
    # the rest refused with a 503. All stay open until a refusal is read (or 5 s passed): the
    # front door may accept them later than the kernel did, and a held connection whose client
    # left no longer counts against its maximum.
    opened = []
    for _ in range(count):
        try:
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            pass
    refused = 0
    with selectors.DefaultSelector() as waiting:
        for conn in opened:
            waiting.register(conn, selectors.EVENT_READ)
        deadline = time.monotonic() + 5
        while not refused and time.monotonic() < deadline:
            for key, _ in waiting.select(timeout=0.2):
                waiting.unregister(key.fileobj)
                try:
                    refused += key.fileobj.recv(64).split(b" ")[1:2] == [b"503"]
                except OSError:
                    pass
    for conn in opened:
        conn.close()
    return refused
def current():
    try:
        pid = json.load(open("/opt/data/gateway.pid"))["pid"]
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError, KeyError):
        return None
for _ in range(int(sys.argv[1])):
    deadline = time.monotonic() + 120
    while (pid := current()) is None or pid in killed:
        if time.monotonic() > deadline:
            sys.exit(f"no new gateway after {killed}")
        time.sleep(0.1)
    time.sleep(1)
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)
    print(time.time(), pid, knock(int(sys.argv[2])), flush=True)
"""
# In the agent container: write a ballast until only argv[1] of the data volume is free (0:
# until the volume refuses a write); prints the bytes written and the error that stopped it.
FILL = """
import json, os, sys
keep = float(sys.argv[1])
stats = os.statvfs("/opt/data")
size, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
want = max(0, int(free - keep * size)) if keep > 0 else size
written, error = 0, ""
with open("/opt/data/fault-ballast.bin", "ab") as ballast:
    block = b"\\xa5" * (1 << 20)
    try:
        while written < want:
            written += ballast.write(block[: min(len(block), want - written)])
            ballast.flush()
        os.fsync(ballast.fileno())
    except OSError as exc:
        error = exc.strerror
print(json.dumps({"written": written, "error": error}))
"""
FULL_SECONDS = 10  # how long the volume stays full, the clients chatting
WRITE_NEW_FILE = """
try:
    with open("/opt/data/fault-probe.new", "w") as handle:
        handle.write("x" * 8192)
        handle.flush()
    print("written")
except OSError as exc:
    print(exc.strerror)
"""
READY = """
import json, urllib.error, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:9090/ready", timeout=10) as answer:
        print(json.dumps({"status": answer.status, "body": json.loads(answer.read())}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code, "body": json.loads(exc.read())}))
"""


@dataclass(frozen=True)
class FaultRow:
    """One fault's figures (docs/benchmarks.md); printed, never asserted."""

    fault: str
    detect_s: float  # fault start -> alert seen firing
    answering_s: float  # fault end -> both clients answered again
    cleared_s: float | None  # fault end -> alert gone (None: not waited for)
    failed_requests: int
    checked_turns: int  # acknowledged turns due in LCM
    lost: int  # of those, missing from LCM (goal 0)
    duplicates: int  # answered twice: the gateway killed before its idempotency commit
    integrity: str

    def show(self) -> None:
        print("figures: " + json.dumps(self.__dict__), flush=True)


def values_files(tmp_path: Path, *overrides: dict[str, Any]) -> list[Path]:
    """ci.yaml, the common values, Prometheus let in, then each override, in helm's order."""
    paths = [
        images.ci_values(),
        prom.values_file(tmp_path, "common.yaml", COMMON),
        prom.values_file(tmp_path, "monitoring.yaml", prom.monitoring_values()),
    ]
    for index, values in enumerate(overrides):
        paths.append(prom.values_file(tmp_path, f"override-{index}.yaml", values))
    return paths


def install(helm: kube.Helm, namespace: str, tmp_path: Path, values: list[Path]) -> list[str]:
    """Backends, Prometheus for the release's values, the release; the alert names."""
    backends = {
        "fakeLlm.image": images.ref("fake-llm"),
        "gitServer.image": images.ref("git-server"),
    }
    helm.install("backends", BACKENDS_CHART, set_values=backends, timeout="3m")
    alerts = prom.install_prometheus(helm, namespace, RELEASE, values, tmp_path)
    helm.install(RELEASE, CHART, values=values, timeout="5m")
    return alerts


def after_fault(
    cluster: kube.Cluster,
    namespace: str,
    name: str,
    times: tuple[float, float, float, float | None],
    *,
    tolerate_lost_or_twice: bool = False,
) -> FaultRow:
    """Clients answered again after the fault's end, the data checked; the figures."""
    start, firing, end, cleared = times
    found = lib.wait_answered(cluster, namespace, end)
    answering = min(a.started + a.total_s for a in found.attempts if a.ok and a.started > end)
    settled = time.time() + 3
    time.sleep(3)
    found = lib.records(cluster, namespace)
    checked = lib.check_data(
        cluster, namespace, found, settled - 5, tolerate_lost_or_twice=tolerate_lost_or_twice
    )
    figures = fault_figures(found.attempts, found.health, start, settled)
    row = FaultRow(
        fault=name,
        detect_s=round(firing - start, 1),
        answering_s=round(max(0.0, answering - end), 1),
        cleared_s=None if cleared is None else round(cleared - end, 1),
        failed_requests=figures.failed_requests,
        checked_turns=checked.checked,
        lost=len(checked.missing),
        duplicates=len(checked.resent) + len(checked.twice),
        integrity="ok",  # check_data asserted integrity_check == ok on every database
    )
    row.show()
    if checked.missing:
        print(f"acknowledged turns missing from LCM: {checked.missing}")
    if checked.twice:
        print(f"acknowledged turns stored more than once in LCM: {checked.twice}")
    return row


def sidecar_idle(cluster: kube.Cluster, namespace: str) -> bool:
    """Whether the backup sidecar's last run ended, create then prune, so it now sleeps for
    backup.interval: the bucket then goes down between two runs and the next run's quick
    reachability check fails it. (Down in the middle of a run, restic retries for up to
    15 minutes and only HermesBackupMissing can tell; the run stays stuck meanwhile.)"""
    pod = lib.serving_pod_name(cluster, namespace)
    lines = kube.pod_log(cluster, namespace, pod, "backup").strip().splitlines()
    created = [i for i, line in enumerate(lines) if '"backup.create.finished"' in line]
    return bool(created) and any(line.startswith("kept ") for line in lines[created[-1] :])


def backup_status(cluster: kube.Cluster, namespace: str) -> dict[str, Any]:
    out = agent_exec(cluster, namespace, ["cat", STATUS_FILE], repeatable=True)
    return dict(json.loads(out))


@pytest.mark.timeout(900)
def test_backup_alerts_fire_while_the_bucket_is_down_and_clear_once_it_is_back(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    storage.install_s3_on_a_volume(cluster, namespace, helm)
    alerts = install(helm, namespace, tmp_path, values_files(tmp_path, BACKUP_VALUES))
    assert {"HermesBackupMissing", "HermesBackupFailed"} <= set(alerts), alerts
    lib.start_load(cluster, namespace)
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        # The sidecar's first backup (it waits backup.interval first), as Prometheus saw it.
        watch.wait_scraped(f"hermes_backup_last_run_success{{{JOB}}} == 1", timeout=300)
        kube.wait_until(lambda: sidecar_idle(cluster, namespace), 120, "the sidecar's prune")
        lib.wait_answered(cluster, namespace, 0.0)
        quiet = watch.poll()
        assert not {"HermesBackupFailed", "HermesBackupMissing"} & set(quiet), quiet
        print(f"\ninstalled, first backup scraped in {time.monotonic() - began:.0f} s")

        start = time.time()
        storage.bucket_down(cluster, namespace)
        failed = watch.wait_for("HermesBackupFailed", "firing", 240)
        missing = watch.wait_for("HermesBackupMissing", "firing", 240)
        for alert in ("HermesBackupFailed", "HermesBackupMissing"):
            assert watch.seen[(alert, "pending")] < watch.seen[(alert, "firing")], watch.seen
        error = backup_status(cluster, namespace)["error"]
        assert S3_ENDPOINT.removeprefix("http://") in error, error
        print(f"bucket down: backup error {error!r}")

        end = time.time()
        storage.bucket_up(cluster, namespace)
        cleared = max(
            watch.wait_for(alert, "inactive", 240)
            for alert in ("HermesBackupFailed", "HermesBackupMissing")
        )
        status = backup_status(cluster, namespace)
        assert status["last_attempt_ok"] is True, status
    print(f"HermesBackupMissing firing {missing - start:.1f} s after the bucket went down")
    after_fault(cluster, namespace, "bucket down (backup sidecar)", (start, failed, end, cleared))
    print(f"total {time.monotonic() - began:.0f} s")


def start_release(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path, values: dict[str, Any]
) -> list[str]:
    """Prometheus, the release, the load answered; the alert names."""
    alerts = install(helm, namespace, tmp_path, values_files(tmp_path, values))
    lib.start_load(cluster, namespace)
    lib.wait_answered(cluster, namespace, 0.0)
    return alerts


def quiet_and_scraped(watch: prom.AlertWatch, alert: str, size_mib: int = 0) -> None:
    """The agent scraped (its volume ``size_mib`` MiB when given), ``alert`` quiet."""
    (size,) = watch.wait_scraped(f"hermes_runtime_data_volume_size_bytes{{{JOB}}}")
    if size_mib:
        assert int(float(size["value"][1])) == size_mib << 20, size  # the tmpfs, not the node
    watch.wait_scraped(f"hermes_runtime_gateway_crashes_total{{{JOB}}} == 0")
    quiet = watch.poll()
    assert alert not in quiet, quiet


@pytest.mark.timeout(900)
def test_gateway_killed_in_a_loop_fires_the_restart_alert(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    alert = "HermesGatewayRestarting"
    alerts = start_release(cluster, namespace, helm, tmp_path, KILL_VALUES)
    assert {alert, SATURATED} <= set(alerts), alerts
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        quiet_and_scraped(watch, alert)
        watch.wait_scraped(
            f'hermes_runtime_front_door_connections_total{{{JOB},outcome="refused"}}'
        )
        quiet = watch.poll()
        assert SATURATED not in quiet, quiet
        print(f"\ninstalled and scraped in {time.monotonic() - began:.0f} s")
        pod = lib.serving_pod_name(cluster, namespace)
        start = time.time()
        out = agent_exec(cluster, namespace, ["python3", "-c", KILL_LOOP, str(KILLS), str(KNOCKS)])
        rows = [line.split() for line in out.splitlines() if line.strip()]
        kills = [float(row[0]) for row in rows]
        assert len(kills) == KILLS, out
        assert sum(int(row[2]) for row in rows) > 0, f"no knock was refused a 503: {out}"
        firing = watch.wait_for(alert, "firing", 120)
        assert firing > kills[-1] - 1, (firing, kills)  # not before the loop
        saturated = watch.wait_for(SATURATED, "firing", 120)
        assert saturated > kills[0] - 1, (saturated, kills)
        print(f"front door saturated: firing {saturated - start:.1f} s after the first kill")
        assert lib.serving_pod_name(cluster, namespace) == pod, "the pod was replaced"
        assert lib.agent_container_restarts(cluster, namespace) == 0, "kubelet restart"
        # It clears once the window (2m) holds fewer crashes: not waited for here.
        after_fault(
            cluster, namespace, f"gateway SIGKILL x{KILLS}", (start, firing, kills[-1], None)
        )
    print(f"total {time.monotonic() - began:.0f} s")


@pytest.mark.timeout(900)
def test_a_full_data_volume_fires_its_alert_and_loses_no_acknowledged_turn(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    """Ballast to under FREE_RATIO free: the alert; to the last byte for FULL_SECONDS (a new
    file is refused) while the clients chat; ballast gone: the alert clears, the agent serves.

    The full volume's own checks (/ready 503 while full, no answered turn missing from LCM or
    stored twice) are asserted last, so the alert's clearing and the figures come first."""
    images.require(IMAGES)
    began = time.monotonic()
    alert = "HermesDataVolumeFull"
    failures: list[str] = []
    with storage.small_volume(cluster, namespace, VOLUME_CLAIM, VOLUME_MIB):
        assert alert in start_release(cluster, namespace, helm, tmp_path, VOLUME_VALUES)
        with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
            watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
            quiet_and_scraped(watch, alert, VOLUME_MIB)
            quiet = watch.poll()
            assert not set(FULL_ALERTS) & set(quiet), quiet
            for other in FULL_ALERTS:
                watch.forget(other)  # seen while the pod started (unready then): not this
            print(f"\ninstalled and scraped in {time.monotonic() - began:.0f} s")
            start = time.time()
            near = json.loads(
                agent_exec(cluster, namespace, ["python3", "-c", FILL, str(NEAR_FULL_RATIO)])
            )
            assert near["written"] > 0 and not near["error"], near
            pending = watch.wait_for(alert, "pending", 60)
            firing = watch.wait_for(alert, "firing", 60)
            assert pending < firing
            near = watch.poll()  # over the reserve: the agent still takes turns
            free = watch.query(f"hermes_runtime_data_volume_free_bytes{{{JOB}}}")
            assert not set(FULL_ALERTS) & set(near), (near, free)
            full = json.loads(agent_exec(cluster, namespace, ["python3", "-c", FILL, "0"]))
            assert full["error"] == "No space left on device", full
            refused = agent_exec(cluster, namespace, ["python3", "-c", WRITE_NEW_FILE])
            assert refused.strip() == "No space left on device", refused
            ready = json.loads(agent_exec(cluster, namespace, ["python3", "-c", READY]))
            print(f"volume full (a new file is refused): /ready {ready}")
            if ready["status"] != 503:
                failures.append(f"/ready on a full volume: {ready}")
            filled = time.time()
            for other in FULL_ALERTS:  # the clients keep chatting against the full volume
                seen = watch.wait_for(other, "firing", 90)
                print(f"{other} firing {seen - filled:.1f} s after the volume filled up")
            time.sleep(max(0.0, FULL_SECONDS - (time.time() - filled)))
            end = time.time()
            agent_exec(cluster, namespace, ["rm", "-f", "/opt/data/fault-ballast.bin"])
            cleared = watch.wait_for(alert, "inactive", 120)
            for other in FULL_ALERTS:
                watch.wait_for(other, "inactive", 120)
            row = after_fault(
                cluster,
                namespace,
                "data volume full",
                (start, firing, end, cleared),
                tolerate_lost_or_twice=True,
            )
    if row.lost:
        failures.append(f"{row.lost} acknowledged turns missing from LCM")
    if row.duplicates:
        failures.append(f"{row.duplicates} acknowledged turns stored twice in LCM")
    print(f"total {time.monotonic() - began:.0f} s")
    assert not failures, "; ".join(failures)
