"""Logical switches and links as Mininet sees and fails them, without root.

The chip's side of a failed cable (both programs drop what is sent to a down
port, counted as its tail drops, and forward again once it is up), the gNMI
Set that carries it, and the map from `link tor1 agg2` to chip ports.
"""

from __future__ import annotations

import grpc
import pytest
from pygnmi.spec.v080 import gnmi_pb2

from emulation.fabric.mininet_logical import logical_link, logical_switches
from emulation.softswitch.fast_pipeline import FastSwitchProgram, available
from emulation.softswitch.gnmi_config import enabled_changes, enabled_request, serve_set
from emulation.softswitch.gnmi_tree import PathError
from emulation.softswitch.reference_program import ReferenceSwitchProgram
from emulation.softswitch.state import DataplaneState
from emulation.softswitch.tm_config import LoopbackCable, TmConfig
from tests.softswitch.test_fast_pipeline import A, udp_frame
from topologies.chip_mapping import map_to_chip
from topologies.errors import UserInputError
from topologies.library import load_topology
from topologies.routing import Router


def _program(kind: type) -> ReferenceSwitchProgram | FastSwitchProgram:
    """Port 1 -> cable 10/11 -> port 2, at 0.1 Gbit/s."""
    state = DataplaneState()
    state.forward.update({(1, A): 10, (11, A): 2})
    config = TmConfig(default_rate_gbps=0.1, loopback_cables=(LoopbackCable(10, 11, 1.0),))
    return kind(state, config, [1, 2])


def _sent(program: ReferenceSwitchProgram | FastSwitchProgram, count: int, at: float) -> int:
    """Frames that reached port 2 out of `count` received on port 1 from `at` on."""
    tm = program.tm
    for k in range(count):
        program.receive(1, udp_frame(A, 2, 200, False), at + k * 1e-4)
    program.advance(at + 1.0)
    reached = sum(1 for port, _ in tm.transmitted if port == 2)
    tm.transmitted.clear()
    tm.transmitted_due.clear()
    return reached


@pytest.mark.parametrize("kind", [ReferenceSwitchProgram, FastSwitchProgram])
def test_a_down_cable_drops_and_counts_what_is_sent_to_it_until_it_is_up(kind: type) -> None:
    if kind is FastSwitchProgram:
        assert available(), "the compiled packet path is not built: run scripts/setup.sh"
    program = _program(kind)
    assert _sent(program, 5, 0.0) == 5
    program.port_down[10] = program.port_down[11] = 1  # what the loop does for gNMI's Set
    assert _sent(program, 7, 2.0) == 0
    stats = program.port_stats()
    assert stats["tail_dropped"] == {10: 7}  # counted at the down port, nowhere else
    assert stats["port_down"] == {10: 1, 11: 1}  # gNMI's oper-status DOWN
    program.port_down[10] = program.port_down[11] = 0
    assert _sent(program, 4, 4.0) == 4
    assert program.port_stats()["tail_dropped"] == {10: 7}


def test_gnmi_set_of_config_enabled_is_the_only_change_served() -> None:
    assert enabled_changes(enabled_request("tor1-eth6", False)) == [("tor1-eth6", False)]
    assert enabled_changes(enabled_request("port27", True)) == [("port27", True)]
    other = enabled_request("tor1-eth6", False)
    other.update[0].path.elem[3].name = "description"
    with pytest.raises(PathError) as caught:
        enabled_changes(other)
    assert caught.value.code == grpc.StatusCode.UNIMPLEMENTED
    assert "/interfaces/interface/config/description cannot be set" in caught.value.message
    not_bool = enabled_request("tor1-eth6", False)
    not_bool.update[0].val.CopyFrom(gnmi_pb2.TypedValue(json_val=b'"no"'))
    with pytest.raises(PathError, match="takes a boolean"):
        enabled_changes(not_bool)
    with pytest.raises(PathError, match="delete is not served"):
        enabled_changes(gnmi_pb2.SetRequest(delete=[gnmi_pb2.Path()]))


def test_logical_switches_name_their_chip_ports_and_links_as_gnmi_does() -> None:
    topo = load_topology("leaf-spine:2:2:2")
    chip = map_to_chip(topo)
    switches = logical_switches(topo, chip)
    assert sorted(switches) == ["leaf1", "leaf2", "spine1", "spine2"]
    leaf1 = switches["leaf1"]
    assert leaf1.servers == {"s01": chip.server_port["s01"], "s02": chip.server_port["s02"]}
    assert sorted(leaf1.links) == ["spine1", "spine2"]
    link = logical_link(switches, "leaf1", "spine2")
    assert (link.port_a, link.port_b) == (
        chip.link_ports[("leaf1", "spine2")],
        chip.link_ports[("spine2", "leaf1")],
    )
    assert chip.peer_port(link.port_a) == link.port_b  # the loopback cable's two ends
    assert leaf1.intfNames() == [f"leaf1-eth{k}" for k in range(1, 5)]
    # Mininet's `net` reads each port's far end: the server's interface, the cable's peer.
    far = {str(p): str(p.link.intf2) for p in leaf1.intfList()}
    assert far["leaf1-eth1"] == "s01-eth0" and far[link.name_a] == link.name_b
    assert "leaf1-eth1:1" in repr(leaf1)
    with pytest.raises(UserInputError, match="no link between leaf1 and leaf2 .*spine1, spine2"):
        logical_link(switches, "leaf1", "leaf2")
    with pytest.raises(UserInputError, match="runs no commands"):
        leaf1.cmd("ip link")
    # The path the test on a live fabric cuts (test_mininet_cli): s01 -> s03 crosses one spine.
    path = Router(topo).path("s01", "s03")
    assert path[0:2] == ("s01", "leaf1") and path[2].startswith("spine")


class _Aborted(Exception):
    pass


class _Context:
    """gRPC's servicer context as far as Set uses it: abort raises."""

    def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise _Aborted(code, message)


def test_gnmi_set_applies_each_change_and_names_an_unknown_port() -> None:
    applied: list[tuple[str, bool]] = []

    def apply(name: str, enabled: bool) -> None:
        if name != "tor1-eth6":
            raise UserInputError(f"no interface named {name!r}; did you mean 'tor1-eth6'?")
        applied.append((name, enabled))

    reply = serve_set(enabled_request("tor1-eth6", False), _Context(), apply)
    assert applied == [("tor1-eth6", False)]
    assert [r.op for r in reply.response] == [gnmi_pb2.UpdateResult.UPDATE]
    with pytest.raises(_Aborted) as caught:
        serve_set(enabled_request("tor1-eth9", True), _Context(), apply)
    assert caught.value.args[0] == grpc.StatusCode.NOT_FOUND
    assert "did you mean 'tor1-eth6'" in caught.value.args[1]
    with pytest.raises(_Aborted) as refused:
        serve_set(enabled_request("tor1-eth6", True), _Context(), None)
    assert refused.value.args[0] == grpc.StatusCode.UNIMPLEMENTED
