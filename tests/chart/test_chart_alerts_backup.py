"""The backup PrometheusRule (HermesBackupMissing, HermesBackupFailed, HermesVerifyFailed)
run through real promtool: each alert fires when it must, stays quiet when it must not, and
another agent's series never fire it. backup.interval is 3600 here: missing after 7200 s.

The agent's backup figures must keep HermesBackupMissing firing after the agent's pod is
gone (Prometheus still holds them within `lookback`), and kube-state-metrics' CronJob series
are a second source in cronjob mode, the only one of the verify.
"""

from __future__ import annotations

from pathlib import Path

from alerts_testlib import (
    AGENT,
    KSM,
    OTHER,
    at,
    backup_rule,
    by_alert,
    case,
    expected,
    render_rules,
    run_promtool,
    series,
)
from chart_testlib import FULLNAME, NAMESPACE, render, render_error

HOURLY = {"backup": {"interval": 3600}}
SIDECAR = {
    "backup": {"mode": "sidecar", "interval": 3600},
    "persistence": {"accessModes": ["ReadWriteOncePod"]},
}
RELEASE_LABELS = {"job": FULLNAME, "namespace": NAMESPACE}
UPTIME = series("hermes_runtime_uptime_seconds", AGENT, "0+60x300")
BACKUP_CRON = {**KSM, "cronjob": f"{FULLNAME}-backup"}
VERIFY_CRON = {**KSM, "cronjob": f"{FULLNAME}-verify"}
# kube-state-metrics' alerts keep the CronJob's labels only (its scrape's job, instance, ...
# differ between setups).
BACKUP_ALERT = {"namespace": NAMESPACE, "cronjob": f"{FULLNAME}-backup"}
VERIFY_ALERT = {"namespace": NAMESPACE, "cronjob": f"{FULLNAME}-verify"}


def test_rules_refused_without_the_api_and_when_metrics_are_off() -> None:
    """As the ServiceMonitor: never dropped silently (templates/validate.yaml)."""
    for field in ("metrics.prometheusRule.enabled", "backup.prometheusRule.enabled"):
        section = field.split(".")[0]
        values = {section: {"prometheusRule": {"enabled": True}}}
        error = render_error(values)
        assert f"{field}: the cluster has no monitoring.coreos.com/v1 PrometheusRule API" in error
        assert f"set {field}=false" in error
    error = render_error(
        {"metrics": {"enabled": False}, "backup": {"prometheusRule": {"enabled": True}}}
    )
    assert "backup.prometheusRule.enabled: true while metrics.enabled is false" in error
    assert not render().all("PrometheusRule")  # off by default, like the ServiceMonitor


def test_both_rules_render_with_the_api_and_carry_runbook_urls() -> None:
    docs = render_rules({"backup": {"prometheusRule": {"labels": {"release": "kps"}}}})
    assert [d["metadata"]["name"] for d in docs] == [f"{FULLNAME}-backup", FULLNAME]
    rule = backup_rule()
    assert list(by_alert(rule)) == [
        "HermesBackupMissing",
        "HermesBackupFailed",
        "HermesVerifyFailed",
    ]
    assert docs[0]["metadata"]["labels"]["release"] == "kps"
    base = "https://github.com/hermes-runtime/hermes-runtime/blob/main/docs/runbooks.md"
    for name, alert in by_alert(rule).items():
        assert alert["annotations"]["runbook_url"] == f"{base}#{name.lower()}"
    own = backup_rule({"metrics": {"prometheusRule": {"runbookBaseUrl": "https://wiki/run"}}})
    assert by_alert(own)["HermesBackupFailed"]["annotations"]["runbook_url"] == (
        "https://wiki/run#hermesbackupfailed"
    )
    # Sidecar mode: no CronJob, so no kube-state-metrics part and no verify.
    sidecar = by_alert(backup_rule(SIDECAR))
    assert list(sidecar) == ["HermesBackupMissing", "HermesBackupFailed"]
    assert "kube_cronjob" not in sidecar["HermesBackupMissing"]["expr"]


def test_schema_refuses_a_bad_lookback() -> None:
    error = render_error({"backup": {"prometheusRule": {"lookback": "two days"}}})
    assert "lookback" in error, error


def test_missing_fires_from_the_agent_figures_also_after_the_pod_is_gone(tmp_path: Path) -> None:
    rule = backup_rule(HOURLY)
    missing = by_alert(rule)["HermesBackupMissing"]
    fired = [expected(missing, RELEASE_LABELS)]
    success = "hermes_backup_last_success_timestamp_seconds"
    tests = [
        case(  # healthy: a success every minute
            [UPTIME, series(success, AGENT, "0+60x300")],
            [at(290, "HermesBackupMissing", [])],
        ),
        case(  # stalled: the last success at t=0; another agent's stall is not this one's
            [UPTIME, series(success, AGENT, "0x300"), series(success, OTHER, "0x300")],
            [
                at(125, "HermesBackupMissing", []),  # over the gap, not yet `for` 10m
                at(140, "HermesBackupMissing", fired),
            ],
        ),
        case(  # never backed up: no record at all, only the agent's uptime
            [UPTIME],
            [at(100, "HermesBackupMissing", []), at(140, "HermesBackupMissing", fired)],
        ),
        case(  # backups until t=60m, then the pod is gone: no series scraped any more
            [
                series("hermes_runtime_uptime_seconds", AGENT, "0+60x60"),
                series(success, AGENT, "0+60x60"),
            ],
            [at(175, "HermesBackupMissing", []), at(200, "HermesBackupMissing", fired)],
        ),
        case(  # the pod replaced at t=30m: the old pod's older figures do not count
            [
                series(success, AGENT, "0+60x30"),
                series(success, {**AGENT, "pod": f"{FULLNAME}-new"}, "_x30 1800+60x270"),
            ],
            [at(290, "HermesBackupMissing", [])],
        ),
    ]
    output = run_promtool(tmp_path, rule, tests)
    assert "SUCCESS: 3 rules found" in output, output


def test_missing_fires_from_the_cronjob_series_of_kube_state_metrics(tmp_path: Path) -> None:
    """No agent series at all (down past `lookback`): the CronJob's own series still tell."""
    rule = backup_rule(HOURLY)
    missing = by_alert(rule)["HermesBackupMissing"]
    other_cron = {**KSM, "cronjob": "another-agent-backup"}
    tests = [
        case(  # the last success at t=0 (its Unix time 0 here), nothing since
            [
                series("kube_cronjob_status_last_successful_time", BACKUP_CRON, "0x300"),
                series("kube_cronjob_status_last_successful_time", other_cron, "0x300"),
            ],
            [
                at(125, "HermesBackupMissing", []),
                at(140, "HermesBackupMissing", [expected(missing, BACKUP_ALERT)]),
            ],
        ),
        case(  # created at t=0 and never successful
            [series("kube_cronjob_created", BACKUP_CRON, "0x300")],
            [at(140, "HermesBackupMissing", [expected(missing, BACKUP_ALERT)])],
        ),
        case(  # successful every hour
            [
                series("kube_cronjob_created", BACKUP_CRON, "0x300"),
                series(
                    "kube_cronjob_status_last_successful_time",
                    BACKUP_CRON,
                    "0x60 3600x60 7200x60 10800x60 14400x60",
                ),
            ],
            [at(290, "HermesBackupMissing", [])],
        ),
    ]
    run_promtool(tmp_path, rule, tests)


def test_missing_for_sets_how_long_the_backup_may_be_missing(tmp_path: Path) -> None:
    """backup.prometheusRule.missingFor: 2m fires 8 minutes before the default 10m would."""
    rule = backup_rule(
        {**HOURLY, "backup": {"interval": 3600, "prometheusRule": {"missingFor": "2m"}}}
    )
    missing = by_alert(rule)["HermesBackupMissing"]
    stalled = case(
        [UPTIME, series("hermes_backup_last_success_timestamp_seconds", AGENT, "0x300")],
        [
            at(121, "HermesBackupMissing", []),
            at(124, "HermesBackupMissing", [expected(missing, RELEASE_LABELS)]),
        ],
    )
    run_promtool(tmp_path, rule, [stalled])


def test_failed_fires_on_the_agent_figures_and_on_the_cronjob(tmp_path: Path) -> None:
    rule = backup_rule(HOURLY)
    failed = by_alert(rule)["HermesBackupFailed"]
    last = "kube_cronjob_status_last_schedule_time"
    good = "kube_cronjob_status_last_successful_time"
    active = "kube_cronjob_status_active"
    tests = [
        case(  # the last run failed from t=61m to 120m; another agent fails all along
            [
                series("hermes_backup_last_run_success", AGENT, "1x60 0x59 1x100"),
                series("hermes_backup_last_run_success", OTHER, "0x300"),
            ],
            [
                at(63, "HermesBackupFailed", []),  # failed, not yet `for` 5m
                at(70, "HermesBackupFailed", [expected(failed, AGENT)]),
                at(130, "HermesBackupFailed", []),
            ],
        ),
        case(  # runs at 0, 60, 120 min: the second fails (its Job ends at 70), the third runs
            [
                series(last, BACKUP_CRON, "0x59 3600x60 7200x100"),
                series(good, BACKUP_CRON, "300x125 7500x100"),
                series(active, BACKUP_CRON, "0x59 1x10 0x50 1x5 0x100"),
            ],
            [
                at(65, "HermesBackupFailed", []),  # running
                at(80, "HermesBackupFailed", [expected(failed, BACKUP_ALERT)]),
                at(123, "HermesBackupFailed", []),  # the next run is on
                at(140, "HermesBackupFailed", []),  # and succeeded
            ],
        ),
        case(  # never successful: scheduled, ended, no success time
            [series(last, BACKUP_CRON, "0x100"), series(active, BACKUP_CRON, "1x5 0x95")],
            [
                at(3, "HermesBackupFailed", []),
                at(20, "HermesBackupFailed", [expected(failed, BACKUP_ALERT)]),
            ],
        ),
    ]
    run_promtool(tmp_path, rule, tests)


def test_verify_failed_fires_on_its_cronjob_only(tmp_path: Path) -> None:
    rule = backup_rule(HOURLY)
    verify = by_alert(rule)["HermesVerifyFailed"]
    other = {**KSM, "cronjob": "another-agent-verify"}
    tests = [
        case(
            [
                series("kube_cronjob_status_last_schedule_time", VERIFY_CRON, "0x59 3600x100"),
                series("kube_cronjob_status_last_successful_time", VERIFY_CRON, "600x160"),
                series("kube_cronjob_status_active", VERIFY_CRON, "0x59 1x20 0x80"),
                # another release's failed verify, and this release's backup running
                series("kube_cronjob_status_last_schedule_time", other, "3600x160"),
                series("kube_cronjob_status_last_successful_time", other, "600x160"),
                series("kube_cronjob_status_active", other, "0x160"),
            ],
            [
                at(30, "HermesVerifyFailed", []),  # the first run succeeded
                at(75, "HermesVerifyFailed", []),  # the second still runs
                at(90, "HermesVerifyFailed", [expected(verify, VERIFY_ALERT)]),
            ],
        )
    ]
    run_promtool(tmp_path, rule, tests)
    # Without the verify CronJob (turned off) the alert is not rendered.
    off = backup_rule({"backup": {"verify": {"enabled": False}}})
    assert "HermesVerifyFailed" not in by_alert(off)


def test_promtool_test_fails_when_an_alert_must_fire_but_does_not(tmp_path: Path) -> None:
    """The harness itself can fail: a healthy agent claimed to alert is refused."""
    rule = backup_rule(HOURLY)
    missing = by_alert(rule)["HermesBackupMissing"]
    wrong = case(
        [UPTIME, series("hermes_backup_last_success_timestamp_seconds", AGENT, "0+60x300")],
        [at(290, "HermesBackupMissing", [expected(missing, RELEASE_LABELS)])],
    )
    try:
        run_promtool(tmp_path, rule, [wrong])
    except AssertionError as exc:
        assert "HermesBackupMissing" in str(exc)
    else:
        raise AssertionError("promtool passed an alert that never fires")
