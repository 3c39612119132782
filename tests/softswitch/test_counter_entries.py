"""Counter writes: what a MODIFY may set (spec 9.5)."""

from __future__ import annotations

import pytest
from google.rpc import code_pb2

from controlplane.p4info import load_p4info
from controlplane.proto.p4.v1 import p4runtime_pb2
from emulation.softswitch.counter_entries import counter_change
from emulation.softswitch.errors import EntryError


def _entry(packets: int, octets: int, cell: int | None = 3) -> p4runtime_pb2.CounterEntry:
    index = load_p4info()
    counter = index.counters[0]
    entry = p4runtime_pb2.CounterEntry(counter_id=counter.id)
    if cell is not None:
        entry.index.index = cell
    entry.data.packet_count = packets
    entry.data.byte_count = octets
    return entry


def test_a_modify_sets_one_cell_to_the_values_given() -> None:
    change = counter_change(load_p4info(), _entry(7, 700), p4runtime_pb2.Update.MODIFY)
    assert change is not None
    assert (change.index, change.packets, change.byte_count) == (3, 7, 700)


@pytest.mark.parametrize(("packets", "octets"), [(-1, 0), (0, -5), (-(2**63), 0)])
def test_a_negative_count_is_refused(packets: int, octets: int) -> None:
    with pytest.raises(EntryError) as err:
        counter_change(load_p4info(), _entry(packets, octets), p4runtime_pb2.Update.MODIFY)
    assert err.value.code == code_pb2.INVALID_ARGUMENT
    assert "must be >= 0" in err.value.message


@pytest.mark.parametrize(("packets", "octets"), [(2**63 - 1, 0), (0, 2**62 + 1)])
def test_a_count_that_would_overflow_is_refused(packets: int, octets: int) -> None:
    """A MODIFY to 2**63 - 1 was accepted and read back negative after 3 frames."""
    with pytest.raises(EntryError) as err:
        counter_change(load_p4info(), _entry(packets, octets), p4runtime_pb2.Update.MODIFY)
    assert err.value.code == code_pb2.INVALID_ARGUMENT
    assert "at most 4611686018427387904 (2**62)" in err.value.message
    change = counter_change(load_p4info(), _entry(2**62, 2**62), p4runtime_pb2.Update.MODIFY)
    assert change is not None and change.packets == 2**62
