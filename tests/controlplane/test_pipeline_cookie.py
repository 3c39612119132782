"""A changed device config is pushed: `has_pipeline` compares the cookie, not only the P4Info.

On bmv2 `--no-p4`, a pipeline pushed with an empty device config is accepted
with no program loaded; pushing the compiled JSON afterwards must not be
skipped because the P4Info is the same. Checked on the software target,
which keeps the cookie as bmv2 does.
"""

from __future__ import annotations

from controlplane.p4info import load_p4info
from controlplane.program import program_topology
from controlplane.session import P4RuntimeSession, pipeline_cookie
from controlplane.settings import ControlPlaneSettings
from emulation.softswitch.p4runtime_service import serve
from topologies.chip_mapping import map_to_chip
from topologies.library import load_topology


def test_a_changed_device_config_is_pushed_and_an_unchanged_one_is_not() -> None:
    index = load_p4info()
    topo = load_topology("leaf-spine:2:2:2")
    chip = map_to_chip(topo)
    wred = ControlPlaneSettings().wred
    device = serve(device_id=1)
    try:
        with P4RuntimeSession.connect(device.address, 1, election_id=(0, 1), p4info=index) as s:
            assert not s.has_pipeline(index, b"")
            s.set_pipeline(index, b"")
            assert s.has_pipeline(index) and s.has_pipeline(index, b"")
            assert not s.has_pipeline(index, b'{"program": "cassini.json"}')
            assert s.pipeline_cookie() == pipeline_cookie(index, b"")
            first = program_topology(s, topo, chip, wred, index, device_config=b"{}")
            assert first.pipeline_pushed
            assert s.pipeline_cookie() == pipeline_cookie(index, b"{}")
            again = program_topology(s, topo, chip, wred, index, device_config=b"{}")
            assert not again.pipeline_pushed
    finally:
        device.stop()
