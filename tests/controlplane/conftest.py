"""Fixtures of the control plane's tests: the P4Info, the default testbed on one chip,
and a software target to program."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.p4info import P4InfoIndex, load_p4info
from emulation.softswitch.p4runtime_service import RunningServer, serve
from topologies.chip_mapping import ChipMap, map_to_chip
from topologies.library import load_topology
from topologies.model import Topology


@pytest.fixture(scope="module")
def index() -> P4InfoIndex:
    return load_p4info()


@pytest.fixture(scope="module")
def testbed() -> tuple[Topology, ChipMap]:
    """The default testbed and its logical switches on one chip."""
    topo = load_topology("cassini-testbed")
    return topo, map_to_chip(topo)


@pytest.fixture
def device_id() -> int:
    """The device id `device` serves; a module overrides it to test a flag that sets it."""
    return 1


@pytest.fixture
def device(device_id: int) -> Iterator[RunningServer]:
    """A software target's P4Runtime server on 127.0.0.1, no pipeline yet."""
    server = serve(device_id=device_id)
    try:
        yield server
    finally:
        server.stop()
