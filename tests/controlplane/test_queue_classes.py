"""Queue-class entries from a policy's DSCP and flow maps, checked against the P4Info."""

from __future__ import annotations

import pytest

from controlplane.p4info import load_p4info
from controlplane.queue_classes import QUEUE_CLASSES, Flow, queue_class_entries
from topologies.errors import UserInputError


def test_entries_carry_the_maps_and_fit_the_p4info() -> None:
    flow = Flow("10.0.0.1", "10.0.0.2", "udp", 4791, 4791)
    entries = queue_class_entries({0: 0, 46: 7, 10: 3}, {flow: 6})
    assert [(e.table, dict(e.match), dict(e.params)) for e in entries] == [
        ("CassiniIngress.queue_class", {"dscp": 0}, {"queue_class": 0}),
        ("CassiniIngress.queue_class", {"dscp": 10}, {"queue_class": 3}),
        ("CassiniIngress.queue_class", {"dscp": 46}, {"queue_class": 7}),
        (
            "CassiniIngress.queue_class_by_flow",
            {
                "src_addr": 0x0A000001,
                "dst_addr": 0x0A000002,
                "protocol": 17,
                "src_port": 4791,
                "dst_port": 4791,
            },
            {"queue_class": 6},
        ),
    ]
    index = load_p4info()
    for entry in entries:
        table = index.table(entry.table)
        assert {m.name for m in table.match_fields} == set(entry.match)
        action = index.action(entry.action)
        (param,) = action.params
        assert 2**param.bitwidth == QUEUE_CLASSES


@pytest.mark.parametrize(
    ("by_dscp", "by_flow", "message"),
    [
        ({64: 1}, {}, "DSCP 64 must be 0..63"),
        ({1: 8}, {}, "queue class 8 must be 0..7"),
        ({}, {Flow("10.0.0.1", "10.0.0.2", "icmp", 1, 2): 1}, "protocol must be tcp or udp"),
        ({}, {Flow("10.0.0.1", "10.0.0.300", "tcp", 1, 2): 1}, "'10.0.0.300' is not an IPv4"),
        ({}, {Flow("10.0.0.1", "10.0.0.2", "tcp", 1, 70000): 1}, "port 70000"),
    ],
)
def test_bad_maps_get_one_line_naming_the_bad_thing(
    by_dscp: dict[int, int], by_flow: dict[Flow, int], message: str
) -> None:
    with pytest.raises(UserInputError) as error:
        queue_class_entries(by_dscp, by_flow)
    assert message in str(error.value)
