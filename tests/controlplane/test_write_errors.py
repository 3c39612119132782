"""The session's WriteError says how many updates failed, by code, and each code's
first cause once, on one line (controlplane.write_errors)."""

from __future__ import annotations

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.write_errors import UpdateError, WriteError, full_table, write_error_summary


def _error(index: int, code: str, message: str) -> UpdateError:
    entry = TableEntry("wred_profile", {"egress_port": index}, "set_wred", {"max_prob": 1})
    return UpdateError(index, code, message, Update(UpdateType.INSERT, entry))


def test_each_code_is_counted_and_its_first_cause_named_once() -> None:
    details = [_error(9, "NOT_FOUND", "gone")] + [
        _error(i, "RESOURCE_EXHAUSTED", "table t is full (2 entries)") for i in (4, 3, 5)
    ]
    error = WriteError(details, "UNKNOWN: 3 of 500 updates failed ...", total=10)
    assert [d.index for d in error.details] == [3, 4, 5, 9]  # in the caller's order
    assert str(error) == (
        "4 of 10 update(s) failed (3 RESOURCE_EXHAUSTED, 1 NOT_FOUND); the first, #3 INSERT "
        "wred_profile {'egress_port': 3} -> set_wred{'max_prob': 1}: RESOURCE_EXHAUSTED: "
        "table t is full (2 entries); the first NOT_FOUND, #9 INSERT wred_profile "
        "{'egress_port': 9} -> set_wred{'max_prob': 1}: NOT_FOUND: gone"
    )
    assert error.rpc_message.startswith("UNKNOWN")


def test_a_long_or_multiline_cause_stays_one_short_line() -> None:
    summary = write_error_summary([_error(0, "INTERNAL", "x\n" * 1000)])
    assert "\n" not in summary and len(summary) < 450 and summary.endswith("...")


def test_a_table_is_full_at_its_p4info_size() -> None:
    assert full_table("t", 300, 300) == "table t is full (300 entries)"
    assert full_table("t", 300, 299) is None
    assert full_table("t", 0, 10_000) is None  # no size declared: the target's choice
