"""A reduced batch of changes leaves the packet path's state as the changes in order would."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from emulation.softswitch.state import (
    COUNTER_CELLS,
    Change,
    ClearTables,
    CounterChange,
    DataplaneState,
    ForwardChange,
    WredChange,
    WredProfile,
    apply_changes,
)

COUNTER = "CassiniEgress.ecn_marked"


def apply_in_order(state: DataplaneState, changes: list[Change]) -> None:
    """The reference: one change at a time, exactly as each one reads."""
    for change in changes:
        if isinstance(change, ForwardChange):
            key = (change.ingress_port, change.dst_mac)
            if change.egress_port is None:
                state.forward.pop(key, None)
            else:
                state.forward[key] = change.egress_port
        elif isinstance(change, WredChange):
            if change.profile is None:
                state.wred.pop(change.egress_port, None)
            else:
                state.wred[change.egress_port] = change.profile
        elif isinstance(change, CounterChange):
            cells = state.counter(change.counter)
            value = (change.packets, change.byte_count)
            if change.index is None:
                cells[: change.size] = value
            else:
                cells[change.index] = value
        else:
            state.forward.clear()
            state.wred.clear()
            if change.zero_counters:
                for cells in state.counters.values():
                    cells[:] = 0


ports = st.integers(1, 4)
macs = st.sampled_from([bytes([2, 0, 0, 0, 0, i]) for i in range(3)])
changes = st.lists(
    st.one_of(
        st.builds(ForwardChange, ports, macs, st.one_of(st.none(), ports)),
        st.builds(
            WredChange,
            ports,
            st.one_of(
                st.none(),
                st.builds(WredProfile, st.integers(1, 9), st.integers(10, 20), st.just(50)),
            ),
        ),
        st.builds(
            CounterChange,
            st.just(COUNTER),
            st.one_of(st.none(), st.integers(0, 7)),
            st.just(8),
            st.integers(0, 99),
            st.integers(0, 9999),
        ),
        st.builds(ClearTables, st.booleans()),
    ),
    max_size=30,
)


def _state() -> DataplaneState:
    state = DataplaneState()
    state.forward[(1, bytes([2, 0, 0, 0, 0, 0]))] = 3
    state.wred[2] = WredProfile(1, 2, 3)
    state.counter(COUNTER)[:] = 5
    return state


@settings(max_examples=300, deadline=None)
@given(changes)
def test_a_reduced_batch_equals_the_changes_in_order(batch: list[Change]) -> None:
    reduced, reference = _state(), _state()
    apply_changes(reduced, batch)
    apply_in_order(reference, batch)
    assert reduced.forward == reference.forward
    assert reduced.wred == reference.wred
    assert np.array_equal(reduced.counter(COUNTER), reference.counter(COUNTER))
    assert reduced.counter(COUNTER).shape == (COUNTER_CELLS, 2)
