"""Fixtures of the software target's tests: the P4Info, a P4Runtime server and its
clients, and a lab of network namespaces that must be empty afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from google.rpc import code_pb2

from controlplane.p4info import P4InfoIndex, load_p4info
from emulation.fabric.netns import NetnsLab
from emulation.housekeeping.prefixes import new_prefix
from emulation.softswitch.p4runtime_service import RunningServer, serve
from tests.helpers.leftovers import leftovers
from tests.helpers.p4runtime import DEVICE_ID, Client


@pytest.fixture(scope="module")
def p4() -> P4InfoIndex:
    return load_p4info()


@pytest.fixture
def server() -> Iterator[RunningServer]:
    running = serve(DEVICE_ID)
    yield running
    running.stop(grace=0)


@pytest.fixture
def clients(server: RunningServer) -> Iterator[Callable[[], Client]]:
    """Makes clients of `server`; each is closed afterwards."""
    made: list[Client] = []

    def make() -> Client:
        client = Client(server.address)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def primary(server: RunningServer, clients: Callable[[], Client], p4: P4InfoIndex) -> Client:
    """A primary client (election id 10) that has pushed the Cassini pipeline."""
    client = clients()
    assert client.arbitrate(10).status.code == code_pb2.OK
    client.set_pipeline(p4.p4info)
    return client


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    lab = NetnsLab(new_prefix())
    try:
        yield lab
    finally:
        lab.close()
        assert leftovers(lab.prefix) == []
