"""The agent's PrometheusRule run through real promtool, one test per way an agent fails:
each alert fires when it must, stays quiet when it must not (and for another agent's series),
with its runbook link. Default thresholds unless a test says otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

from alerts_testlib import (
    AGENT,
    KSM,
    OTHER,
    agent_rule,
    at,
    by_alert,
    case,
    expected,
    render_rules,
    run_promtool,
    series,
)
from chart_testlib import FULLNAME, NAMESPACE, REPO, render_error

ALERTS = [
    "HermesAgentDown",
    "HermesAgentUnready",
    "HermesGatewayRestarting",
    "HermesFrontDoorSaturated",
    "HermesDataVolumeFull",
    "HermesDataVolumeReserveReached",
    "HermesPluginSyncStale",
    "HermesVaultRefreshFailing",
    "HermesEmbeddingBacklogGrowing",
]
RUNBOOKS = "https://github.com/hermes-runtime/hermes-runtime/blob/main/docs/runbooks.md"
RELEASE_LABELS = {"job": FULLNAME, "namespace": NAMESPACE}


def test_every_alert_is_rendered_with_its_runbook() -> None:
    rule = agent_rule({"metrics": {"prometheusRule": {"labels": {"release": "kps"}}}})
    assert rule["metadata"]["labels"]["release"] == "kps"
    alerts = by_alert(rule)
    assert list(alerts) == ALERTS
    for name, alert in alerts.items():
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOKS}#{name.lower()}"
        assert alert["labels"]["severity"] in {"critical", "warning"}
    routed = agent_rule({"metrics": {"prometheusRule": {"alertLabels": {"team": "ai"}}}})
    assert all(a["labels"]["team"] == "ai" for a in by_alert(routed).values())


def test_every_alert_has_a_runbook_section_and_every_section_an_alert() -> None:
    """docs/runbooks.md: one `## <alert>` section per alert of both rules (the anchor the
    runbook_url names), each saying what to look at and what to do."""
    text = (REPO / "docs" / "runbooks.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    alerts = [name for doc in render_rules() for name in by_alert(doc)]
    assert sorted(sections) == sorted(alerts)
    for name, body in sections.items():
        assert "Look at" in body and "Do:" in body, name


def test_schema_refuses_bad_alert_thresholds() -> None:
    for bad, where in (
        ({"dataVolumeFreeRatio": 1.5}, "dataVolumeFreeRatio"),
        ({"gatewayCrashes": 0}, "gatewayCrashes"),
        ({"gatewayCrashWindow": "a while"}, "gatewayCrashWindow"),
        ({"frontDoorHeldRatio": 0}, "frontDoorHeldRatio"),
        ({"runbookBaseUrl": "wiki/runbooks"}, "runbookBaseUrl"),
        ({"kubeStateMetricsSelector": "{job=1}"}, "kubeStateMetricsSelector"),
        ({"embeddingBacklogMin": -1}, "embeddingBacklogMin"),
    ):
        error = render_error({"metrics": {"prometheusRule": bad}})
        assert where in error, error
    error = render_error({"backup": {"prometheusRule": {"missingFor": "soon"}}})
    assert "missingFor" in error, error


def test_agent_down_and_unready(tmp_path: Path) -> None:
    rule = agent_rule()
    alerts = by_alert(rule)
    down, unready = alerts["HermesAgentDown"], alerts["HermesAgentUnready"]
    lcm = {**AGENT, "endpoint": "lcm-metrics"}
    main = {**AGENT, "endpoint": "metrics"}
    tests = [
        case(  # both targets down from t=10m; only the LCM port down earlier is no outage
            [
                series("up", main, "1x9 0x100"),
                series("up", lcm, "1x4 0x100"),
                series("up", {**OTHER, "endpoint": "metrics"}, "0x110"),
            ],
            [
                at(8, "HermesAgentDown", []),
                at(13, "HermesAgentDown", []),  # down, not yet `for` 5m
                at(20, "HermesAgentDown", [expected(down, RELEASE_LABELS)]),
            ],
        ),
        case(  # no target at all (pod never scheduled, or gone past staleness)
            [series("up", OTHER, "1x60")],
            [at(20, "HermesAgentDown", [expected(down, RELEASE_LABELS)])],
        ),
        case(  # /ready 503 from t=10m; a blip of 2m before is not an alert
            [series("hermes_runtime_ready", AGENT, "1x2 0 0 1x5 0x60")],
            [
                at(5, "HermesAgentUnready", []),
                at(13, "HermesAgentUnready", []),
                at(20, "HermesAgentUnready", [expected(unready, AGENT)]),
            ],
        ),
    ]
    output = run_promtool(tmp_path, rule, tests)
    assert f"SUCCESS: {len(ALERTS)} rules found" in output, output


def test_gateway_crash_loop_and_a_saturated_front_door(tmp_path: Path) -> None:
    """3 crashes within 15m (planned restarts are not in the crash counter:
    tests/unit/agent/test_agent_metrics_faults.py); any refusal within 5m, or held over 80%."""
    rule = agent_rule()
    alerts = by_alert(rule)
    crashing, saturated = alerts["HermesGatewayRestarting"], alerts["HermesFrontDoorSaturated"]
    connections = "hermes_runtime_front_door_connections_total"
    tests = [
        case(  # crashes at 11m, 12m, 13m; one crash at 60m is not a loop
            [
                series("hermes_runtime_gateway_crashes_total", AGENT, "0x10 1 2 3x46 4x60"),
                series("hermes_runtime_gateway_crashes_total", OTHER, "0+1x120"),
            ],
            [
                at(12, "HermesGatewayRestarting", []),
                at(
                    14,
                    "HermesGatewayRestarting",
                    [expected(crashing, AGENT, {'{{ $value | printf "%.0f" }}': "3"})],
                ),
                at(35, "HermesGatewayRestarting", []),
                at(65, "HermesGatewayRestarting", []),
            ],
        ),
        case(  # two refusals at t=20m; forwarded ones never count
            [
                series(connections, {**AGENT, "outcome": "refused"}, "0x19 2x60"),
                series(connections, {**AGENT, "outcome": "forwarded"}, "0+50x80"),
                series(connections, {**OTHER, "outcome": "refused"}, "0+1x80"),
            ],
            [
                at(15, "HermesFrontDoorSaturated", []),
                at(22, "HermesFrontDoorSaturated", [expected(saturated, AGENT)]),
                at(30, "HermesFrontDoorSaturated", []),  # none within the last 5m
            ],
        ),
        case(  # 90 of 100 held at t=10m..20m
            [
                series("hermes_runtime_front_door_held", AGENT, "5x9 90x10 5x20"),
                series("hermes_runtime_front_door_max_held", AGENT, "100x40"),
            ],
            [
                at(5, "HermesFrontDoorSaturated", []),
                at(15, "HermesFrontDoorSaturated", [expected(saturated, AGENT)]),
                at(25, "HermesFrontDoorSaturated", []),
            ],
        ),
    ]
    run_promtool(tmp_path, rule, tests)


def test_data_volume_full_and_its_reserve_reached(tmp_path: Path) -> None:
    rule = agent_rule()
    alerts = by_alert(rule)
    full, reserve = alerts["HermesDataVolumeFull"], alerts["HermesDataVolumeReserveReached"]
    size = "1000000000x120"
    mib64 = str(64 << 20)
    tests = [
        case(  # 50% free, then 5% from t=31m to 60m, then 50% again
            [
                series("hermes_runtime_data_volume_size_bytes", AGENT, size),
                series(
                    "hermes_runtime_data_volume_free_bytes",
                    AGENT,
                    "500000000x30 50000000x29 500000000x60",
                ),
                series("hermes_runtime_data_volume_size_bytes", OTHER, size),
                series("hermes_runtime_data_volume_free_bytes", OTHER, "0x120"),
            ],
            [
                at(33, "HermesDataVolumeFull", []),  # under 10%, not yet `for` 5m
                at(
                    40,
                    "HermesDataVolumeFull",
                    [expected(full, AGENT, {"{{ $value | humanizePercentage }}": "5%"})],
                ),
                at(65, "HermesDataVolumeFull", []),
                at(40, "HermesDataVolumeReserveReached", []),  # 50 MB is over no reserve
            ],
        ),
        case(  # 32 MiB free under a 64 MiB reserve from t=10m; a reserve of 0 never fires
            [
                series(
                    "hermes_runtime_data_volume_free_bytes", AGENT, f"{1 << 30}x9 {32 << 20}x30"
                ),
                series("hermes_runtime_data_volume_reserve_bytes", AGENT, f"{mib64}x40"),
                series("hermes_runtime_data_volume_free_bytes", OTHER, "0x40"),
                series("hermes_runtime_data_volume_reserve_bytes", OTHER, "0x40"),
            ],
            [
                at(10, "HermesDataVolumeReserveReached", []),
                at(
                    12,
                    "HermesDataVolumeReserveReached",
                    [expected(reserve, AGENT, {"{{ $value | humanize1024 }}": "32Mi"})],
                ),
            ],
        ),
    ]
    run_promtool(tmp_path, rule, tests)


def test_plugin_sync_stale_from_the_link_or_git_sync_restarts(tmp_path: Path) -> None:
    rule = agent_rule()
    stale = by_alert(rule)["HermesPluginSyncStale"]
    plugin = {**AGENT, "plugin": "tools"}
    git_sync = {**KSM, "pod": AGENT["pod"], "container": "git-sync-tools"}
    restarts = "kube_pod_init_container_status_restarts_total"
    tests = [
        case(  # the newest commit failed its link at t=10m (the last good one still runs)
            [
                series("hermes_runtime_plugin_linked", plugin, "1x9 0x60"),
                series("hermes_runtime_plugin_linked", {**plugin, "plugin": "ok"}, "1x70"),
            ],
            [
                at(30, "HermesPluginSyncStale", []),
                at(45, "HermesPluginSyncStale", [expected(stale, plugin)]),
            ],
        ),
        case(  # git-sync (a native sidecar) restarted every 10 minutes from t=10m
            [
                series(restarts, git_sync, "0x9 1x10 2x10 3x10 4x10 5x10 6x10 7x10"),
                # the agent container's restarts and another release's git-sync are not this
                series(restarts, {**git_sync, "container": "agent"}, "0+1x80"),
                series(restarts, {**git_sync, "pod": "other-7c9d5b8f6d-x2x9k"}, "0+1x80"),
            ],
            [
                at(30, "HermesPluginSyncStale", []),
                at(
                    60,
                    "HermesPluginSyncStale",
                    [
                        expected(
                            stale,
                            {
                                "namespace": NAMESPACE,
                                "pod": AGENT["pod"],
                                "container": "git-sync-tools",
                            },
                        )
                    ],
                ),
            ],
        ),
    ]
    run_promtool(tmp_path, rule, tests)


def test_vault_refresh_failing(tmp_path: Path) -> None:
    rule = agent_rule()
    failing = by_alert(rule)["HermesVaultRefreshFailing"]
    tests = [
        case(
            [
                series("hermes_runtime_secrets_refresh_ok", AGENT, "1x9 0x5 1x5 0x40"),
                series("hermes_runtime_secrets_refresh_ok", OTHER, "0x60"),
            ],
            [
                at(18, "HermesVaultRefreshFailing", []),  # 5 minutes of failures healed
                at(30, "HermesVaultRefreshFailing", []),
                at(40, "HermesVaultRefreshFailing", [expected(failing, AGENT)]),
            ],
        )
    ]
    run_promtool(tmp_path, rule, tests)


def test_embedding_backlog_growing(tmp_path: Path) -> None:
    rule = agent_rule()
    growing = by_alert(rule)["HermesEmbeddingBacklogGrowing"]
    queue, ingested = "lcm_embed_queue", "lcm_messages_ingested_total"
    embedded = "lcm_embedded_items_total"
    tests = [
        case(  # the queue grows by 10 a minute from t=10m; embedding keeps up before
            [
                series(queue, AGENT, "0x9 0+10x60"),
                series(embedded, AGENT, "0+10x70"),
                series(ingested, AGENT, "0+10x70"),
                series(queue, OTHER, "0+100x70"),
            ],
            [
                at(15, "HermesEmbeddingBacklogGrowing", []),  # 50 queued: under the minimum
                at(30, "HermesEmbeddingBacklogGrowing", [expected(growing, AGENT)]),
            ],
        ),
        case(  # turns stored from t=0, nothing embedded (the embedder fails; the queue
            # gauge is only set after a batch, so it stays 0)
            [
                series(queue, AGENT, "0x70"),
                series(embedded, AGENT, "0x70"),
                series(ingested, AGENT, "0x9 0+3x60"),
            ],
            [
                at(5, "HermesEmbeddingBacklogGrowing", []),
                at(20, "HermesEmbeddingBacklogGrowing", [expected(growing, AGENT)]),
            ],
        ),
    ]
    run_promtool(tmp_path, rule, tests)
    # Embeddings off: nothing is ever embedded, and that is no backlog.
    off = by_alert(agent_rule({"lcm": {"embeddings": {"mode": "off"}}}))
    assert "lcm_embedded_items_total" not in off["HermesEmbeddingBacklogGrowing"]["expr"]
