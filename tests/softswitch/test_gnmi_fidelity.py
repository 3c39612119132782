"""The packet loop's lateness histograms over gNMI: what the emulation's fidelity monitor reads."""

from __future__ import annotations

import pytest

from controlplane.gnmi import GnmiReader
from emulation.emulate.fidelity import switch_lateness
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.port_stats import LATENESS_BUCKETS
from emulation.softswitch.switch import SoftwareSwitch
from emulation.softswitch.tm_config import PortSettings, TmConfig
from tests.helpers.hosts import make_hosts, udp
from tests.helpers.waiting import wait_for


@pytest.mark.root
def test_gnmi_serves_the_histograms_the_switch_counts_and_an_interval_subtracts(
    lab: NetnsLab,
) -> None:
    h1, h2 = make_hosts(lab, 2)
    ports = {1: h1.switch_ifname, 2: h2.switch_ifname}
    tm = TmConfig(ports={2: PortSettings(rate_gbps=0.01)})  # 10 Mbit/s: the loop sleeps
    with SoftwareSwitch(1, ports, "127.0.0.1:0", tm) as switch:
        switch.forward({(1, h2.mac): 2})
        assert switch.grpc_address is not None
        with GnmiReader(switch.grpc_address) as reader:
            before = reader.read_fidelity()
            sent = [udp(h1, h2.mac, seq=i) for i in range(30)]
            for frame in sent:
                h1.send(frame)
            assert h2.received(expect=len(sent)) == sent
            assert wait_for(lambda: switch.fidelity()["departure_lateness"].count == 30)
            after = reader.read_fidelity()
        served = after["departure-lateness"]
        assert set(served) == {f"bucket-{i}" for i in range(LATENESS_BUCKETS)} | {"max-ns"}
        histograms = switch.fidelity_histograms()
        assert [served[f"bucket-{i}"] for i in range(LATENESS_BUCKETS)] == list(
            histograms["departure_lateness"][0]
        )
    window = switch_lateness(before, after)
    assert window["frames"] == 30  # the interval's frames, whatever came before
    assert 0 <= window["late_frames"] <= 30
    assert window["loop_wakeups"] > 0
    assert window["frame_late_p99_ms"] <= max(window["frame_late_max_ms"], 0.002)
