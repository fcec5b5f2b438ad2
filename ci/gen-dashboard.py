#!/usr/bin/env python3
"""Generate charts/hermes-agent/files/dashboard.json, the chart's Grafana dashboard.

The JSON follows Grafana's documented dashboard model (JSON model, schemaVersion 39:
`panels` with `gridPos`, `targets` and `fieldConfig`, `templating.list` variables): Grafana
itself cannot be built here, and no registry reachable here serves a dashboard library, so
the model is written out by this script and the chart ships its output. `--check` exits 1
when the committed file differs from what this script makes (tests/chart runs it);
otherwise the file is rewritten.

Two views in one dashboard. The agent rows show one release (`$release`, the `job` label the
ServiceMonitor gives its series, i.e. the release's full name) in `$namespace`: health, turns
and latency, LCM's size and embedding backlog, backups and plugins. The fleet row shows every
release of the selected namespaces side by side, one series per release. Every query returns
data on a running agent with backups and a plugin (tests/e2e/test_alerts_oncall.py runs each
against a live Prometheus); series that exist only after an event (a retrieval, a restart
reason, a Vault refresh) are left to Explore.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generated import write_or_check  # ci/generated.py, beside this script

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "charts" / "hermes-agent" / "files" / "dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
AGENT = 'job="$release",namespace="$namespace"'
FLEET = 'job=~".+",namespace=~"$namespace"'
WIDTH = 24  # Grafana's grid is 24 columns wide
RATE = "[$__rate_interval]"


def agent(metric: str) -> str:
    """``metric`` of the selected release."""
    return f"{metric}{{{AGENT}}}"


def fleet(metric: str) -> str:
    """``metric`` of every release in the selected namespaces."""
    return f"{metric}{{{FLEET}}}"


def p95(bucket: str) -> str:
    return f"histogram_quantile(0.95, sum by (le) (rate({agent(bucket)}{RATE})))"


@dataclass
class Panel:
    """One panel: its title, kind (timeseries or stat), queries (expr, legend) and unit."""

    title: str
    kind: str
    queries: list[tuple[str, str]]
    unit: str = "short"
    description: str = ""
    width: int = 6
    height: int = 8
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    title: str
    panels: list[Panel]


def agent_rows() -> list[Row]:
    """The one-agent view."""
    return [
        Row(
            "Agent health",
            [
                Panel("Scraped", "stat", [(f"max({agent('up')})", "up")], "none", width=4),
                Panel(
                    "Ready (/ready)",
                    "stat",
                    [(f"max({agent('hermes_runtime_ready')})", "ready")],
                    "none",
                    width=4,
                ),
                Panel(
                    "Gateway running",
                    "stat",
                    [(f"max({agent('hermes_runtime_gateway_up')})", "gateway")],
                    "none",
                    width=4,
                ),
                Panel(
                    "Uptime",
                    "stat",
                    [(f"max({agent('hermes_runtime_uptime_seconds')})", "uptime")],
                    "s",
                    width=4,
                ),
                Panel(
                    "Gateway starts and crashes",
                    "timeseries",
                    [
                        (
                            f"sum(increase({agent('hermes_runtime_gateway_starts_total')}{RATE}))",
                            "starts",
                        ),
                        (
                            f"sum(increase({agent('hermes_runtime_gateway_crashes_total')}{RATE}))",
                            "crashes",
                        ),
                    ],
                    width=8,
                    description=(
                        "Crashes are restarted in place by the supervisor; planned restarts "
                        "(plugins, secrets, SIGHUP) are starts without a crash."
                    ),
                ),
            ],
        ),
        Row(
            "Turns and latency",
            [
                Panel(
                    "Connections on the API port",
                    "timeseries",
                    [
                        (
                            "sum by (outcome) (rate("
                            f"{agent('hermes_runtime_front_door_connections_total')}{RATE}))",
                            "{{outcome}}",
                        )
                    ],
                    "reqps",
                    width=8,
                    description=(
                        "forwarded to the gateway, relayed to a successor, gave_up, refused "
                        "(front door full), full (data volume under its reserve)."
                    ),
                ),
                Panel(
                    "Turns stored by LCM",
                    "timeseries",
                    [
                        (
                            f"sum(rate({agent('lcm_messages_ingested_total')}{RATE}))",
                            "messages stored",
                        ),
                        (f"sum(rate({agent('lcm_replayed_turns_total')}{RATE}))", "replayed turns"),
                    ],
                    "ops",
                    width=8,
                ),
                Panel(
                    "Wait for a gateway and LCM ingest (p95)",
                    "timeseries",
                    [
                        (
                            p95("hermes_runtime_front_door_wait_seconds_bucket"),
                            "front door wait",
                        ),
                        (
                            p95("lcm_ingest_seconds_bucket"),
                            "LCM ingest",
                        ),
                    ],
                    "s",
                    width=8,
                ),
                Panel(
                    "Connections held for a gateway",
                    "timeseries",
                    [
                        (f"max({agent('hermes_runtime_front_door_held')})", "held"),
                        (f"max({agent('hermes_runtime_front_door_max_held')})", "maximum"),
                    ],
                    width=12,
                ),
                Panel(
                    "Turn writes held in memory",
                    "timeseries",
                    [(f"max({agent('lcm_turn_writes_held')})", "held")],
                    width=12,
                    description=(
                        "Writes the volume refused (full, read-only, locked), kept until it "
                        "takes them."
                    ),
                ),
            ],
        ),
        Row(
            "LCM and the data volume",
            [
                Panel(
                    "LCM database size",
                    "timeseries",
                    [(f"max({agent('lcm_database_bytes')})", "bytes")],
                    "bytes",
                ),
                Panel(
                    "Messages stored",
                    "timeseries",
                    [(f"max({agent('lcm_messages_stored')})", "messages")],
                ),
                Panel(
                    "Embedding backlog",
                    "timeseries",
                    [
                        (f"max({agent('lcm_embed_queue')})", "queued"),
                        (f"sum(rate({agent('lcm_embedded_items_total')}{RATE}))", "embedded/s"),
                    ],
                ),
                Panel(
                    "Data volume free",
                    "timeseries",
                    [
                        (f"max({agent('hermes_runtime_data_volume_free_bytes')})", "free"),
                        (f"max({agent('hermes_runtime_data_volume_reserve_bytes')})", "reserve"),
                        (f"max({agent('hermes_runtime_data_volume_size_bytes')})", "size"),
                    ],
                    "bytes",
                ),
            ],
        ),
        Row(
            "Backups and plugins",
            [
                Panel(
                    "Since the last successful backup",
                    "stat",
                    [
                        (
                            "time() - max("
                            f"{agent('hermes_backup_last_success_timestamp_seconds')})",
                            "age",
                        )
                    ],
                    "s",
                ),
                Panel(
                    "Last backup run succeeded",
                    "stat",
                    [(f"min({agent('hermes_backup_last_run_success')})", "ok")],
                    "none",
                ),
                Panel(
                    "Last backup",
                    "timeseries",
                    [
                        (f"max({agent('hermes_backup_last_duration_seconds')})", "duration (s)"),
                        (f"max({agent('hermes_backup_last_bytes_added')})", "bytes added"),
                    ],
                ),
                Panel(
                    "Plugins linked",
                    "timeseries",
                    [
                        (
                            f"max by (plugin) ({agent('hermes_runtime_plugin_linked')})",
                            "{{plugin}}",
                        ),
                        (
                            f"sum by (outcome) ({agent('hermes_runtime_plugin_link_runs_total')})",
                            "link passes {{outcome}}",
                        ),
                    ],
                    description=(
                        "1: the plugin's last commit is linked; 0: it failed its checks and "
                        "the last good one runs."
                    ),
                ),
            ],
        ),
    ]


def fleet_row() -> Row:
    """Every release of the selected namespaces, one series each."""
    by = "max by (namespace, job)"
    return Row(
        "Fleet: every release of $namespace",
        [
            Panel(
                "Ready by release",
                "timeseries",
                [(f"{by} ({fleet('hermes_runtime_ready')})", "{{namespace}}/{{job}}")],
                "none",
            ),
            Panel(
                "Turns stored by release",
                "timeseries",
                [
                    (
                        "sum by (namespace, job) (rate("
                        f"{fleet('lcm_messages_ingested_total')}{RATE}))",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "ops",
            ),
            Panel(
                "Since the last backup by release",
                "timeseries",
                [
                    (
                        f"time() - {by} ({fleet('hermes_backup_last_success_timestamp_seconds')})",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "s",
            ),
            Panel(
                "Data volume free by release",
                "timeseries",
                [
                    (
                        f"{by} ({fleet('hermes_runtime_data_volume_free_bytes')})"
                        f" / {by} ({fleet('hermes_runtime_data_volume_size_bytes')})",
                        "{{namespace}}/{{job}}",
                    )
                ],
                "percentunit",
            ),
            Panel(
                "Gateway crashes by release (1h)",
                "timeseries",
                [
                    (
                        "sum by (namespace, job) (increase("
                        f"{fleet('hermes_runtime_gateway_crashes_total')}[1h]))",
                        "{{namespace}}/{{job}}",
                    )
                ],
                width=12,
            ),
            Panel(
                "LCM database size by release",
                "timeseries",
                [(f"{by} ({fleet('lcm_database_bytes')})", "{{namespace}}/{{job}}")],
                "bytes",
                width=12,
            ),
        ],
    )


def panel_json(panel: Panel, ident: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
        for i, (expr, legend) in enumerate(panel.queries)
    ]
    options: dict[str, Any] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}
    }
    if panel.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
        }
    return {
        "id": ident,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": options,
        "targets": targets,
    }


def layout(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows and panels left to right, wrapping at the grid's width; ids from 1."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x, line = 0, 0
        for panel in row.panels:
            if x + panel.width > WIDTH:
                x, y = 0, y + line
                line = 0
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
            line = max(line, panel.height)
        y += line
    return panels


def variables() -> list[dict[str, Any]]:
    def query(name: str, label: str, expr: str, multi: bool) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": expr, "refId": f"{name}-variable"},
            "definition": expr,
            "refresh": 2,  # on time range change
            "sort": 1,
            "multi": multi,
            "includeAll": multi,
            "current": {},
            "options": [],
        }

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "options": [],
            "refresh": 1,
        },
        query(
            "namespace", "Namespace", "label_values(hermes_runtime_uptime_seconds, namespace)", True
        ),
        query(
            "release",
            "Release",
            'label_values(hermes_runtime_uptime_seconds{namespace=~"$namespace"}, job)',
            False,
        ),
    ]


def dashboard() -> dict[str, Any]:
    return {
        "uid": "hermes-agent",
        "title": "Hermes agent",
        "description": (
            "One Hermes agent (release) and the fleet of its namespaces; shipped by the "
            "hermes-agent chart (metrics.dashboard)."
        ),
        "tags": ["hermes", "hermes-agent"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": variables()},
        "panels": layout([*agent_rows(), fleet_row()]),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the dashboard file")
    args = parser.parse_args()
    return write_or_check(args.output, render(), "ci/gen-dashboard.py", args.check)


if __name__ == "__main__":
    sys.exit(main())
