"""RoCEv2 with DCQCN for the job replicas, beside their TCP transport (`--transport roce`).

- `bth`: the bytes of a RoCEv2 packet after UDP: BTH, AETH, CNP, ICRC.
- `dcqcn`: DCQCN's notification point (CNPs) and reaction point (rates), on a caller's clock.
- `psn`: go-back-N reliability over 24-bit PSNs, as a ConnectX RC QP does it.
- `native`: the same rules compiled (`_roce.c`, with one flow's data path over a UDP socket).
"""
