"""Which snapshots a prune policy keeps: exactly what it says, never the protected one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hermes_runtime.backup.manifest import new_snapshot_id
from hermes_runtime.backup.prune import PrunePolicy, select_kept
from hermes_runtime.common.errors import RuntimeFailure

START = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)  # a Monday


def every_six_hours(days: int) -> list[str]:
    return [new_snapshot_id(START + timedelta(hours=6 * i)) for i in range(days * 4)]


def test_keep_last_keeps_the_newest_n() -> None:
    ids = every_six_hours(2)
    assert select_kept(ids, PrunePolicy(keep_last=3), None) == set(ids[-3:])


def test_keep_daily_keeps_the_newest_of_each_recent_day() -> None:
    ids = every_six_hours(5)
    kept = select_kept(ids, PrunePolicy(keep_daily=3), None)
    assert kept == {ids[19], ids[15], ids[11]}  # last of day 5, 4, 3


def test_keep_weekly_uses_iso_weeks() -> None:
    ids = every_six_hours(21)  # three ISO weeks, Monday to Sunday
    kept = select_kept(ids, PrunePolicy(keep_weekly=2), None)
    assert kept == {ids[-1], ids[4 * 14 - 1]}  # last of week 3 and of week 2


def test_policies_combine_as_a_union() -> None:
    ids = every_six_hours(3)
    kept = select_kept(ids, PrunePolicy(keep_last=2, keep_daily=3), None)
    assert kept == {ids[11], ids[10], ids[7], ids[3]}


def test_the_protected_snapshot_is_always_kept() -> None:
    ids = every_six_hours(2)
    assert ids[2] in select_kept(ids, PrunePolicy(keep_last=1), ids[2])


@pytest.mark.parametrize("policy", [PrunePolicy(), PrunePolicy(keep_last=-1, keep_daily=2)])
def test_a_policy_that_keeps_nothing_is_refused(policy: PrunePolicy) -> None:
    with pytest.raises(RuntimeFailure, match="--keep"):
        policy.validate()
