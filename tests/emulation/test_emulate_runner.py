"""The runner polls gNMI where the switch serves it, and runs on P4 counters where it does not."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import grpc
import pytest

from emulation.emulate.runner import EmulateSettings, run_settings, serves_gnmi

if TYPE_CHECKING:
    from emulation.fabric.emulated import EmulatedFabric


@dataclass
class _Fabric:
    grpc_address: str | None
    timeout: float = 5.0


@pytest.fixture
def no_gnmi() -> Iterator[str]:
    """A gRPC server with no service at all: every gNMI call is UNIMPLEMENTED, as bmv2's
    simple_switch_grpc answers."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_a_switch_without_gnmi_is_polled_on_p4_counters_alone(no_gnmi: str) -> None:
    assert serves_gnmi(cast("EmulatedFabric", _Fabric(no_gnmi))) is False
    assert serves_gnmi(cast("EmulatedFabric", _Fabric(None))) is False


def test_run_settings_poll_gnmi_at_the_settings_interval_unless_told_not_to() -> None:
    settings = EmulateSettings(poll_interval_s=0.25)
    assert run_settings(settings).gnmi is True
    assert run_settings(settings).poll_interval_s == 0.25
    assert run_settings(settings, gnmi=False).gnmi is False
