"""RoCE's queue class from the one PFC priority (emulation/jobs/roce_classes.py): the
DSCP -> class entries, the traffic manager's agreement, and their install/removal
around a run, against a fake switch (no fabric)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4names import QUEUE_CLASS_ACTION, QUEUE_CLASS_TABLE
from emulation.jobs.roce_classes import (
    RoceClasses,
    for_run,
    reply_class,
    roce_class,
    roce_dscp_classes,
    roce_entries,
    tm_mismatch,
)
from emulation.jobs.run_settings import RunSettings
from emulation.roce.pfc import data_tos
from emulation.softswitch.tm_config import ClassSettings, PfcConfig, TmConfig


def _entry(dscp: int, queue_class: int) -> TableEntry:
    return TableEntry(QUEUE_CLASS_TABLE, {"dscp": dscp}, QUEUE_CLASS_ACTION,
                      {"queue_class": queue_class})  # fmt: skip


def test_data_rides_the_pfc_priority_s_class_and_replies_ride_above_it() -> None:
    # priority 3: DSCP 26 (3 x 8 + 2, ConnectX's RoCE default) in class 3; CNPs/ACKs
    # (DSCP 48) in class 6, strict priority over the data
    assert roce_dscp_classes(3) == {26: 3, 48: 6}
    assert roce_entries(3) == [_entry(26, 3), _entry(48, 6)]
    # the DSCP the hosts' data carries is the one the entry matches
    assert data_tos(3) >> 2 == 26
    # another priority moves both: one setting
    assert roce_dscp_classes(5) == {42: 5, 48: 6}
    assert roce_dscp_classes(6) == {50: 6, 48: 6}  # replies share RoCE's class, never below
    assert (roce_class(7), reply_class(7)) == (7, 7)
    with pytest.raises(ValueError, match="priority 8"):
        roce_class(8)


def test_the_tm_s_default_classes_agree_and_a_class_that_does_not_pause_is_named() -> None:
    assert tm_mismatch(TmConfig()) is None  # every class pauses priority 3 by default
    assert tm_mismatch(TmConfig(pfc=PfcConfig(priority=5))) is None
    assert tm_mismatch(TmConfig(pfc=PfcConfig(enabled=False))) is None  # lossy, as asked
    no_pause = TmConfig(classes={3: ClassSettings(pfc_enabled=False)})
    assert tm_mismatch(no_pause) == "queue class 3 (RoCE's) has PFC off, the switch's PFC is on"
    other = TmConfig(classes={3: ClassSettings(pfc_priority=4)})
    assert tm_mismatch(other) == "queue class 3 (RoCE's) pauses priority 4, the hosts honour 3"
    # a class other than RoCE's may differ
    assert tm_mismatch(TmConfig(classes={0: ClassSettings(pfc_enabled=False)})) is None


@dataclass
class FakeSwitch:
    """The queue_class table of a switch, and every write in order."""

    held: set[TableEntry] = field(default_factory=set)
    writes: list[list[Update]] = field(default_factory=list)
    elections: list[tuple[int, int] | None] = field(default_factory=list)
    open_sessions: int = 0
    fail: bool = False


class FakeSession:
    def __init__(self, switch: FakeSwitch) -> None:
        self.switch = switch

    def __enter__(self) -> FakeSession:
        self.switch.open_sessions += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.switch.open_sessions -= 1

    def read_table(self, table: str) -> list[TableEntry]:
        return sorted((e for e in self.switch.held if e.table == table), key=repr)

    def write(self, updates: list[Update]) -> None:
        if self.switch.fail:
            raise RuntimeError("not primary")
        self.switch.writes.append(updates)
        for u in updates:
            if u.type is UpdateType.INSERT:
                assert u.entry not in self.switch.held, "duplicate insert"
                self.switch.held.add(u.entry)
            else:
                self.switch.held.remove(u.entry)


@dataclass
class FakeProfile:
    tm: TmConfig


class FakeFabric:
    def __init__(self, tm: TmConfig, switch: FakeSwitch) -> None:
        self.profile = FakeProfile(tm)
        self.switch = switch
        self.dead: str | None = None

    def session(self, election_id: tuple[int, int] | None = None) -> FakeSession:
        self.switch.elections.append(election_id)
        return FakeSession(self.switch)

    def switch_failure(self) -> str | None:
        return self.dead


def _fabric(tm: TmConfig, switch: FakeSwitch) -> Any:
    return FakeFabric(tm, switch)


def test_a_run_installs_its_entries_before_and_removes_them_after() -> None:
    other = _entry(46, 7)  # someone else's DSCP entry stays
    leftover = _entry(34, 0)  # a killed run's entry for RoCE's DSCP is replaced
    switch = FakeSwitch(held={other, leftover})
    roce = RoceClasses(_fabric(TmConfig(pfc=PfcConfig(priority=4)), switch)).start()
    assert roce.error is None
    assert switch.held == {other, _entry(34, 4), _entry(48, 6)}
    assert switch.open_sessions == 0  # no primary held through the run
    assert switch.elections == [(0, 4)]
    assert roce.record() == {
        "pfc_priority": 4, "dscp_classes": {"34": 4, "48": 6}, "error": None
    }  # fmt: skip
    roce.stop()
    assert switch.held == {other}
    assert switch.open_sessions == 0
    roce.stop()  # twice: nothing more
    assert len(switch.writes) == 3  # delete leftover, insert ours, delete ours


def test_a_mismatched_tm_or_a_failed_write_leaves_roce_in_class_0_and_says_so() -> None:
    switch = FakeSwitch()
    tm = TmConfig(classes={3: ClassSettings(pfc_enabled=False)})
    roce = RoceClasses(_fabric(tm, switch)).start()
    assert roce.error == (
        "RoCE stays in class 0: queue class 3 (RoCE's) has PFC off, the switch's PFC is on"
    )
    assert switch.writes == [] and switch.elections == []
    roce.stop()
    assert switch.writes == []

    failing = FakeSwitch(fail=True)
    roce = RoceClasses(_fabric(TmConfig(), failing)).start()
    assert roce.error == "RoCE stays in class 0: not primary"
    assert failing.held == set()
    roce.stop()
    assert failing.writes == []


def test_a_dead_switch_is_not_written_at_stop() -> None:
    switch = FakeSwitch()
    fabric = FakeFabric(TmConfig(), switch)
    roce = RoceClasses(fabric).start()  # type: ignore[arg-type]  # a fake
    assert switch.held == {_entry(26, 3), _entry(48, 6)}
    fabric.dead = "exited 1"
    roce.stop()
    assert len(switch.writes) == 1


@pytest.mark.parametrize(
    ("transport", "policy", "installed"),
    [("roce", "none", True), ("roce", "mltcp", True), ("tcp", "none", False),
     ("tcp", "crux", False), ("tcp", "echelon", False)],
)  # fmt: skip
def test_every_roce_run_gets_the_entries_and_tcp_runs_none(
    transport: str, policy: str, installed: bool
) -> None:
    """What run_schedule calls with its settings' transport: mltcp runs over RoCE (and
    gets the entries), the class policies over TCP only (and get none)."""
    settings = RunSettings(transport=transport, policy=policy)
    switch = FakeSwitch()
    roce = for_run(_fabric(TmConfig(), switch), settings.transport)
    assert (roce is not None) == installed
    assert switch.held == ({_entry(26, 3), _entry(48, 6)} if installed else set())
    if roce is not None:
        roce.stop()
    assert switch.held == set()
