"""Does MLTCP's F change a DCQCN flow's rate at all? One flow on a fake clock.

`.venv/bin/python benchmarks/mltcp_fake_clock.py`: a flow sends 1106-byte
packets (a RoCE payload of 1024 B on the wire) at its Rc for 0.5 s and gets
a CNP 10 us after every k-th packet; printed, its mean rate with F = 0.25 and
F = 1.75 (`mltcp.increase_scaled`), under the NIC's defaults and the DCQCN
paper's, both scaled to S = 0.001 as the fabric runs them (`dcqcn.scaled`).
"""

from __future__ import annotations

from emulation.roce import dcqcn
from emulation.roce.dcqcn import DcqcnSettings, paper_settings, scaled
from emulation.roce.mltcp import increase_scaled

PACKET = 1106
SECONDS = 0.5


def mean_rate_mbps(settings: DcqcnSettings, every: int) -> float:
    """The flow's mean rate (Mbit/s) with a CNP after every `every`-th packet."""
    state, now, sent = dcqcn.rp_start(settings), 0.0, 0
    while now < SECONDS:
        state = dcqcn.rp_on_sent(settings, state, PACKET, now)
        sent += 1
        if sent % every == 0:
            state = dcqcn.rp_on_cnp(settings, state, now + 10e-6)
        now += PACKET * 8 / state.rc
    return sent * PACKET * 8 / now / 1e6


def main() -> int:
    cases = {
        "NIC defaults": scaled(DcqcnSettings(line_rate_bps=50e9), 0.001),
        "paper": scaled(paper_settings(50e9), 0.001),
    }
    print("| settings | CNP after every | F = 0.25 | F = 1.75 |")
    print("|---|---|---|---|")
    for name, base in cases.items():
        for every in (1, 4):
            low, high = (mean_rate_mbps(increase_scaled(base, f), every) for f in (0.25, 1.75))
            print(f"| {name} | {every} packets | {low:.2f} Mbit/s | {high:.2f} Mbit/s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
