"""The chip's path is the router's, for every server pair, with the entries `cassini
program` writes (issue 31, section 1).

Each topology's entries go through the software switch's P4Runtime device (which
holds them to the P4Info's sizes) into its dataplane; one Read returns them all
(the Read cap follows the P4Info). Then one frame per ordered server pair runs
through the switch program, the Python reference and the compiled one, hop by
hop: a frame that leaves on a loopback cable's end is fed back at the other end,
as the chip's cables do, until it leaves on a server port. The logical switches it
crossed must be `Router.path`'s, and it must leave on the destination's port.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controlplane.compile import FORWARD_TABLE
from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.p4info import P4InfoIndex, index_p4info, load_p4info
from controlplane.program import topology_entries
from controlplane.proto.p4.v1 import p4runtime_pb2
from controlplane.settings import WredSettings
from emulation.softswitch.arbitration import Session
from emulation.softswitch.device import Device
from emulation.softswitch.fast_pipeline import FastSwitchProgram, available
from emulation.softswitch.reference_program import ReferenceSwitchProgram
from emulation.softswitch.service_limits import read_capacity
from emulation.softswitch.state import DataplaneState, LocalDataplane
from emulation.softswitch.switch_program import SwitchProgram
from emulation.softswitch.tm_config import TmConfig
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.library import load_topology
from topologies.model import Topology
from topologies.routing import Router

DEVICE_ID = 1
Set = p4runtime_pb2.SetForwardingPipelineConfigRequest
# name, ordered server pairs, forwarding entries
TOPOLOGIES = [
    ("cassini-testbed", 24 * 23, 1_656),
    ("fat-tree:4", 16 * 15, 1_168),
    ("leaf-spine:4:2:8", 32 * 31, 1_440),
    ("leaf-spine:8:4:16", 128 * 127, 23_936),
]


def _device(p4: P4InfoIndex) -> tuple[Device, DataplaneState]:
    """A software switch device running `p4`, with one primary client."""
    state = DataplaneState()
    device = Device(DEVICE_ID, LocalDataplane(state), p4)
    arbitration = p4runtime_pb2.MasterArbitrationUpdate(device_id=DEVICE_ID)
    arbitration.election_id.low = 1
    device.arbitrate(Session(), arbitration)
    push = Set(device_id=DEVICE_ID, action=Set.VERIFY_AND_COMMIT)
    push.election_id.low = 1
    push.config.p4info.CopyFrom(p4.p4info)
    device.set_pipeline(push)
    return device, state


def _insert(device: Device, p4: P4InfoIndex, entries: list[TableEntry]) -> list[Any]:
    """Write `entries` in batches of 4,000; each update's error (None: done)."""
    results: list[Any] = []
    for start in range(0, len(entries), 4_000):
        request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID)
        request.election_id.low = 1
        request.updates.extend(
            Update(UpdateType.INSERT, e).to_proto(p4) for e in entries[start : start + 4_000]
        )
        results += device.write(request)
    return results


def _read_everything(device: Device) -> Any:
    """One Read of every table and every counter, as `cassini program` reads back."""
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID)
    request.entities.add().table_entry.SetInParent()
    request.entities.add().counter_entry.SetInParent()
    return device.read(request)


def _frame(topo: Topology, src: str, dst: str) -> bytes:
    a, b = topo.server(src), topo.server(dst)
    packet = Ether(src=a.mac, dst=b.mac) / IP(src=a.ip, dst=b.ip) / UDP(sport=4000, dport=5000)
    return bytes(packet / bytes(20))


def _hops(program: SwitchProgram, chip: ChipMap, port: int, frame: bytes, now: float) -> list[int]:
    """The chip ports `frame` enters on, from `port` until it leaves on a server port
    (the last item: that port); [] plus the last port reached when it is lost."""
    tm = program.tm
    entered = [port]
    for _ in range(16):
        program.receive(port, frame, now)
        now += 1e-3
        program.advance(now)
        out = list(tm.transmitted)
        tm.transmitted.clear()
        tm.transmitted_due.clear()
        if len(out) != 1 or out[0][1] != frame:
            return [*entered, -1]  # lost or duplicated: cannot equal a router path
        egress = out[0][0]
        peer = chip.peer_port(egress)
        if peer is None:
            return [*entered, egress]
        entered.append(peer)
        port = peer
    return [*entered, -1]


@pytest.mark.parametrize(("name", "pairs", "forwarding"), TOPOLOGIES)
def test_the_chip_forwards_on_the_routers_path_for_every_pair(
    name: str, pairs: int, forwarding: int
) -> None:
    assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    p4 = load_p4info()
    topo = load_topology(name)
    chip = map_to_chip(topo)
    device, state = _device(p4)
    results = _insert(device, p4, topology_entries(topo, chip, WredSettings(), p4))
    assert results == [None] * (forwarding + len(chip.ports()))
    assert len(state.forward) == forwarding
    snapshot = _read_everything(device)
    cells = sum(c.size for c in p4.p4info.counters)
    assert snapshot.count == forwarding + len(chip.ports()) + cells <= read_capacity(p4)
    assert snapshot.count == len(list(snapshot.entities()))
    router = Router(topo)
    # Ports unbounded by rate: every frame leaves at once, none queues behind another.
    config = TmConfig(default_rate_gbps=1_000.0)
    programs: list[SwitchProgram] = [
        ReferenceSwitchProgram(state, config, chip.ports()),
        FastSwitchProgram(state, config, chip.ports()),
    ]
    checked = 0
    for program in programs:
        now = 0.0
        for src, dst in permutations(topo.server_names(), 2):
            entered = _hops(program, chip, chip.server_port[src], _frame(topo, src, dst), now)
            now += 0.1
            assert entered[-1] == chip.server_port[dst], (src, dst, entered)
            switches = [chip.switch_of_port[p] for p in entered[:-1]]
            assert switches == list(router.path(src, dst)[1:-1]), (src, dst)
            assert chip.switch_of_port[entered[-1]] == switches[-1]
            checked += 1
        assert program.port_stats()["forward_misses"] == {}
    assert checked == 2 * pairs


def test_the_forwarding_table_refuses_an_entry_past_its_p4info_size() -> None:
    """The software switch holds a table to its P4Info `size`: a P4Info of 1,655
    forwarding entries cannot take the testbed's 1,656."""
    p4 = load_p4info()
    message = type(p4.p4info)()
    message.CopyFrom(p4.p4info)
    (table,) = [t for t in message.tables if t.preamble.name == FORWARD_TABLE]
    table.size = 1_655
    small = index_p4info(message)
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    device, state = _device(small)
    entries = topology_entries(topo, chip, WredSettings(), p4)
    results = _insert(device, small, [e for e in entries if e.table == FORWARD_TABLE])
    failed = [r for r in results if r is not None]
    assert len(results) == 1_656 and len(failed) == 1 and len(state.forward) == 1_655
    assert f"table {FORWARD_TABLE} is full (1655 entries)" in failed[0].message
