"""Tofino artifacts (Stratum chassis config, BfRt TM script) and the bmv2 adapter."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from controlplane.bmv2 import bmv2_wred, cells_to_packets, queue_commands
from controlplane.settings import ControlPlaneSettings, PfcSettings, WredSettings
from controlplane.tofino import bfrt_tm_script, chassis_config, panel_layout, write_artifacts
from topologies.errors import UserInputError


def _chassis_config_class() -> Any:
    """The subset of Stratum's ChassisConfig (common.proto) the generator writes, as a real proto."""
    f = descriptor_pb2.FileDescriptorProto(
        name="stratum_subset.proto", package="stratum.hal", syntax="proto3"
    )
    platform = f.enum_type.add(name="Platform")
    platform.value.add(name="PLT_UNKNOWN", number=0)
    platform.value.add(name="PLT_GENERIC_BAREFOOT_TOFINO", number=1)
    admin = f.enum_type.add(name="AdminState")
    admin.value.add(name="ADMIN_STATE_UNKNOWN", number=0)
    admin.value.add(name="ADMIN_STATE_ENABLED", number=1)
    T = descriptor_pb2.FieldDescriptorProto

    def msg(name, fields):
        m = f.message_type.add(name=name)
        for number, (fname, ftype, type_name, repeated) in enumerate(fields, start=1):
            fd = m.field.add(
                name=fname,
                number=number,
                type=ftype,
                label=T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL,
            )
            if type_name:
                fd.type_name = f".stratum.hal.{type_name}"

    msg(
        "Chassis",
        [("platform", T.TYPE_ENUM, "Platform", False), ("name", T.TYPE_STRING, "", False)],
    )
    msg(
        "Node",
        [
            ("id", T.TYPE_UINT64, "", False),
            ("slot", T.TYPE_INT32, "", False),
            ("index", T.TYPE_INT32, "", False),
        ],
    )
    msg("PortConfigParams", [("admin_state", T.TYPE_ENUM, "AdminState", False)])
    msg(
        "SingletonPort",
        [
            ("id", T.TYPE_UINT32, "", False),
            ("name", T.TYPE_STRING, "", False),
            ("slot", T.TYPE_INT32, "", False),
            ("port", T.TYPE_INT32, "", False),
            ("channel", T.TYPE_INT32, "", False),
            ("speed_bps", T.TYPE_UINT64, "", False),
            ("config_params", T.TYPE_MESSAGE, "PortConfigParams", False),
            ("node", T.TYPE_UINT64, "", False),
        ],
    )
    msg(
        "ChassisConfig",
        [
            ("description", T.TYPE_STRING, "", False),
            ("chassis", T.TYPE_MESSAGE, "Chassis", False),
            ("nodes", T.TYPE_MESSAGE, "Node", True),
            ("singleton_ports", T.TYPE_MESSAGE, "SingletonPort", True),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("stratum.hal.ChassisConfig"))


def test_chassis_config_parses_and_lists_every_port(testbed):
    topo, chip = testbed
    text = chassis_config(topo, chip)
    config = text_format.Parse(text, _chassis_config_class()())
    assert config.chassis.platform == 1 and len(config.nodes) == 1
    ports = config.singleton_ports
    assert sorted(p.id for p in ports) == list(chip.ports())
    assert {p.speed_bps for p in ports} == {50_000_000_000}
    # 50G ports: two channels per 100G cage, no (port, channel) used twice.
    assert len({(p.port, p.channel) for p in ports}) == 72
    assert {p.channel for p in ports} == {1, 2}
    assert all(p.config_params.admin_state == 1 and p.node == 1 for p in ports)


def test_panel_layout_never_mixes_speeds():
    layout = panel_layout({1: 25, 2: 25, 3: 100, 4: 25})
    assert [(p.panel_port, p.channel) for p in layout] == [(1, 1), (1, 2), (2, 1), (3, 1)]


def test_unsupported_speed_is_named(testbed):
    import dataclasses

    topo, chip = testbed
    links = list(topo.links)
    links[0] = dataclasses.replace(links[0], gbps=0.5)
    topo2 = dataclasses.replace(topo, links=tuple(links))
    with pytest.raises(UserInputError, match=r"0\.5 Gb/s is not a Tofino port speed"):
        chassis_config(topo2, chip)


class _Recorder:
    """Stands in for bfshell's `bfrt` object: records every call with its path."""

    def __init__(self, calls: list, path: str = "bfrt") -> None:
        self._calls, self._path = calls, path

    def __getattr__(self, name: str) -> _Recorder:
        return _Recorder(self._calls, f"{self._path}.{name}")

    def __call__(self, **kwargs: Any) -> Any:
        self._calls.append((self._path, kwargs))

        class Entry:
            data = {b"pg_id": kwargs.get("dev_port", 0) // 4, b"egress_qid_queues": [5, 6, 7]}

        return Entry()


def test_bfrt_script_configures_pfc_and_queues_on_every_port(testbed):
    _, chip = testbed
    settings = ControlPlaneSettings(pfc=PfcSettings(skid_cells=4000, priority=3), queue_cells=20000)
    script = bfrt_tm_script(chip, settings)
    assert "WRED_MIN_CELLS = 1000" in script and "WRED_MAX_CELLS = 2000" in script
    calls: list = []
    exec(
        compile(script, "cassini_tm.py", "exec"), {"bfrt": _Recorder(calls), "__name__": "__main__"}
    )
    ppg = [kw for path, kw in calls if path == "bfrt.tf1.tm.ppg.cfg.add_with_dev_port"]
    fc = [kw for path, kw in calls if path == "bfrt.tf1.tm.port.flowcontrol.mod"]
    qb = [kw for path, kw in calls if path == "bfrt.tf1.tm.queue.buffer.mod_with_shared_pool"]
    assert sorted(k["dev_port"] for k in ppg) == list(chip.ports())
    assert all(k["pfc_enable"] is True and k["pfc_skid_max_cells"] == 4000 for k in ppg)
    # PPG ids are unique within each pipe.
    ids = [(k["pipe"], k["ppg_id"]) for k in ppg]
    assert len(set(ids)) == len(ids)
    assert all(k["pipe"] == k["dev_port"] >> 7 for k in ppg)
    assert sorted(k["dev_port"] for k in fc) == list(chip.ports())
    assert all(k["mode_tx"] == "PFC" and k["mode_rx"] == "PFC" for k in fc)
    assert fc[0]["cos_to_icos"] == [3, 1, 2, 0, 4, 5, 6, 7]
    assert len(qb) == 72 and all(k["pool_max_cells"] == 20000 and k["pg_queue"] == 5 for k in qb)


def test_bfrt_script_refuses_a_queue_below_the_wred_ramp(testbed):
    _, chip = testbed
    with pytest.raises(UserInputError, match="queue_cells .* must exceed wred.max_cells"):
        bfrt_tm_script(chip, ControlPlaneSettings(queue_cells=1500))


def test_write_artifacts(tmp_path, testbed):
    topo, chip = testbed
    paths = write_artifacts(topo, chip, ControlPlaneSettings(), tmp_path / "out")
    assert sorted(p.name for p in paths) == ["cassini_tm.py", "chassis_config.pb.txt"]
    assert all(p.stat().st_size > 500 for p in paths)


def test_bmv2_converts_cells_to_packets(testbed):
    topo, chip = testbed
    assert cells_to_packets(1000, 80, 1500) == 54  # 80 000 B / 1500 B, rounded up
    assert cells_to_packets(1, 80, 1500) == 1
    assert cells_to_packets(0, 80, 1500) == 0
    settings = ControlPlaneSettings(wred=WredSettings(1000, 2000, 30))
    assert bmv2_wred(settings) == WredSettings(54, 107, 30)
    lines = queue_commands(topo, chip, settings, scale=0.01)
    assert len(lines) == 2 * 72
    assert lines[0] == f"set_queue_depth 1067 {chip.ports()[0]}"  # 20000 cells * 80 B / 1500 B
    # 50 Gb/s * 0.01 = 500 Mb/s of 1500 B packets = 41667 packets/s
    assert lines[1] == f"set_queue_rate 41667 {chip.ports()[0]}"


# --- The forwarding table's SRAM on a Tofino 1 (controlplane.tofino_sram) -------------


def test_the_forwarding_table_fits_two_of_twelve_stages_by_hand() -> None:
    """(9 + 48) key bits - 10 ghost + 4 version + 1 action bit + 9-bit port = 61 bits,
    two a 128-bit word, 2,048 a block: 262,144 entries take 128 blocks, 80 + 48."""
    from controlplane.p4info import load_p4info
    from controlplane.tofino_sram import SRAM_BLOCKS_PER_STAGE, STAGES, sram_budget

    p4 = load_p4info()
    budget = sram_budget(p4, "logical_forward")
    assert (budget.entries, budget.entry_bits, budget.entries_per_word) == (262_144, 61, 2)
    assert (budget.blocks, budget.stages) == (128, 2) and budget.fits
    assert not budget.action_data_in_ram  # the port rides in the match word
    assert (STAGES, SRAM_BLOCKS_PER_STAGE) == (12, 80)
    # Pessimistic: the 9-bit port as two whole bytes makes 68 bits, one a word.
    bytes_ = sram_budget(p4, "logical_forward", byte_keys=True)
    assert (bytes_.entry_bits, bytes_.entries_per_word, bytes_.blocks, bytes_.stages) == (
        68,
        1,
        256,
        4,
    )
    assert bytes_.fits
    # The testbed's 1,656 entries and leaf-spine:8:4:16's 23,936: 1 and 12 blocks.
    assert sram_budget(p4, "logical_forward", 1_656).blocks == 1
    assert sram_budget(p4, "logical_forward", 23_936).blocks == 12
    # A table of 13 stages' worth would not fit a pipe.
    assert not sram_budget(p4, "logical_forward", 12 * 80 * 2_048 + 1).fits
    wred = sram_budget(p4, "wred_profile")  # its thresholds need action RAM
    assert wred.action_data_in_ram and wred.blocks == 1
    with pytest.raises(ValueError, match="not an exact-match"):
        from controlplane.p4info import index_p4info

        message = type(p4.p4info)()
        message.CopyFrom(p4.p4info)
        message.tables[0].match_fields[0].match_type = 3  # TERNARY
        sram_budget(index_p4info(message), "logical_forward")
