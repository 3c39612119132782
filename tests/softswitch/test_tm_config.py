"""The traffic-manager config file: every number finite and in range, or one clear line.

A NaN rate or cable delay passed validation before (NaN <= 0 is false) and put
the packet loop to sleep for ever; 2**63 killed it with OverflowError at start;
a port key 1.7 became port 1.
"""

from __future__ import annotations

import pytest

from emulation.softswitch.tm_config import tm_config_from_dict
from topologies.errors import UserInputError


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"default_rate_gbps": float("nan")}, r"tm.yaml.default_rate_gbps must be a rate"),
        ({"ports": {1: {"rate_gbps": float("nan")}}}, r"tm.yaml: ports.1.rate_gbps must be a rate"),
        ({"ports": {1: {"rate_gbps": float("inf")}}}, r"ports.1.rate_gbps must be a rate"),
        (
            {"loopback_cables": [{"port_a": 1, "port_b": 2, "delay_us": float("nan")}]},
            r"loopback_cables\[0\].delay_us must be a number in 0..1e\+06, got nan",
        ),
        ({"buffer_cells": 2**63}, r"tm.yaml.buffer_cells must be an integer in 1..1099511627776"),
        ({"ports": {1.7: {"rate_gbps": 1}}}, r"tm.yaml: ports: port 1.7 is not an integer"),
        ({"ports": {"1.7": {"rate_gbps": 1}}}, r"tm.yaml: ports: port '1.7' is not an integer"),
        ({"ports": {True: {"rate_gbps": 1}}}, r"port True is not an integer"),
    ],
)
def test_a_number_that_is_not_finite_or_in_range_is_refused(doc, message) -> None:
    with pytest.raises(UserInputError, match=message):
        tm_config_from_dict(doc, source="tm.yaml")


def test_ports_as_text_keys_still_read() -> None:
    # JSON keys are strings: "3" is port 3.
    tm = tm_config_from_dict({"ports": {"3": {"rate_gbps": 0.05}}}, source="tm.json")
    assert tm.rate_gbps(3) == 0.05
