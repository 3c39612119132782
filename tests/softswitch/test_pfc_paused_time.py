"""The switch's own paused time per port (issue 26, section 2): how long the traffic
manager held a port's ingress paused, from the XOFF that paused it to the XON that
resumed it, served over gNMI as `pfc-paused-us` beside the pause frames it sent."""

from __future__ import annotations

from emulation.softswitch.gnmi_tree import interfaces_tree
from emulation.softswitch.port_stats import port_counters
from emulation.softswitch.tm_config import PfcConfig, TmConfig
from emulation.softswitch.traffic_manager import TrafficManager
from tests.softswitch.test_traffic_manager import one_cell_seconds, udp_frame


def test_paused_time_runs_from_the_xoff_to_the_xon_by_hand() -> None:
    # 1 Mbit/s egress, XOFF above 5 cells, XON at 2; eight one-cell frames from port 1 at
    # t = 0. A frame leaves the queue when its serialisation starts: the first at once,
    # so the 7th arrival holds 6 cells > 5 (XOFF at t = 0); frame k + 1 starts at k cell
    # times, holding 7 - k cells: <= 2 at k = 5, the XON at 5 cell times.
    config = TmConfig(
        default_rate_gbps=0.001,
        pfc=PfcConfig(enabled=True, xoff_cells=5, xon_cells=2, pause_quanta=65535),
    )
    tm = TrafficManager(config, [1, 2], {})
    for _ in range(8):
        tm.enqueue(udp_frame(80), 1, 2, 0.0)
    assert tm.ingress_paused[1] and tm.pfc_paused_us[1] == 0  # counted at the XON
    now = 0.0
    while now < 0.02:
        now += 1e-4
        tm.advance(now)
    cell = one_cell_seconds(config, 2)
    assert cell == 0.000832  # (80 + 24) B x 8 at 1 Mbit/s
    assert not tm.ingress_paused[1] and tm.pfc_resumes_sent[1] == 1
    assert tm.pfc_paused_us[1] == int(5 * cell * 1e6) == 4160
    assert tm.pfc_paused_us[2] == 0  # the egress port paused nobody


def test_paused_time_is_a_gnmi_counters_leaf() -> None:
    stats = {"pfc_paused_us": {1: 4160}, "pfc_pauses_sent": {1: 3}}
    tree = interfaces_tree(port_counters(stats, {1: "tor1-eth1"}, [1, 2]))
    entries = tree["interfaces"]["interface"].entries
    counters = {name: entry["state"]["counters"] for name, entry in entries.items()}
    assert counters["tor1-eth1"]["pfc-paused-us"] == 4160
    assert counters["tor1-eth1"]["pfc-pauses-sent"] == 3
    assert counters["port2"]["pfc-paused-us"] == 0
