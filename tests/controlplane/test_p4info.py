"""The P4Info wrapper and the P4Runtime byte encoding."""

from __future__ import annotations

import pytest

from controlplane.p4info import (
    bytes_to_mac,
    decode_value,
    encode_value,
    load_p4info,
    mac_to_int,
)
from topologies.errors import UserInputError


def test_tables_actions_counters_by_name_alias_and_id(index):
    fwd = index.table("logical_forward")
    assert fwd is index.table("CassiniIngress.logical_forward")
    assert fwd.id == 33554433 and fwd.size == 262_144
    assert [(m.name, m.bitwidth, m.match_type) for m in fwd.match_fields] == [
        ("ingress_port", 9, "EXACT"),
        ("dst_mac", 48, "EXACT"),
    ]
    assert index.action_by_id(fwd.const_default_action_id).name == "CassiniIngress.drop"
    wred = index.table("wred_profile")
    assert index.table_by_id(wred.id) is wred
    noaction = index.action("NoAction")
    assert wred.default_only_action_ids == (noaction.id,)
    set_wred = index.action("CassiniEgress.set_wred")
    assert [(p.name, p.bitwidth) for p in set_wred.params] == [
        ("min_cells", 24),
        ("max_cells", 24),
        ("max_prob", 8),
    ]
    ecn = index.counter("ecn_marked")
    assert (ecn.name, ecn.unit, ecn.size) == ("CassiniEgress.ecn_marked", "BOTH", 512)
    assert index.counter_by_id(ecn.id) is ecn
    assert {c.name for c in index.counters} == {
        "CassiniIngress.port_rx",
        "CassiniEgress.port_tx",
        "CassiniEgress.ecn_marked",
        "CassiniEgress.wred_dropped",
        "CassiniEgress.job_tx",
        "CassiniEgress.job_ecn_marked",
    }
    job = index.table("job_by_dst")
    assert [(m.name, m.bitwidth) for m in job.match_fields] == [("dst_addr", 32), ("dst_port", 16)]
    assert [(p.name, p.bitwidth) for p in index.action("set_job_class").params] == [
        ("job_class", 4)
    ]
    assert index.counter("job_tx").size == 512 * 16


def test_unknown_names_suggest_the_closest(index):
    with pytest.raises(UserInputError) as err:
        index.table("logical_fwd")
    assert "no table named 'logical_fwd'. Did you mean 'CassiniIngress.logical_forward'?" in str(
        err.value
    )
    with pytest.raises(UserInputError, match="Did you mean 'CassiniEgress.set_wred'"):
        index.action("CassiniEgress.set_wrde")
    with pytest.raises(UserInputError, match="no counter named 'ecn'"):
        index.counter("ecn")
    with pytest.raises(UserInputError, match="no table with id 1"):
        index.table_by_id(1)
    # An action id is not a table id.
    with pytest.raises(UserInputError):
        index.table_by_id(index.action("drop").id)
    with pytest.raises(UserInputError, match="Did you mean 'dst_mac'"):
        index.table("logical_forward").match_field("dst_mc")


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(UserInputError, match="cannot read P4Info file .*missing.txtpb"):
        load_p4info(tmp_path / "missing.txtpb")
    bad = tmp_path / "bad.txtpb"
    bad.write_text("tables { preamble { id: nope } }")
    with pytest.raises(UserInputError, match="bad.txtpb: not a valid P4Info"):
        load_p4info(bad)


@pytest.mark.parametrize(
    ("value", "width", "expected"),
    [
        (0, 9, b"\x00"),
        (1, 9, b"\x01"),
        (255, 9, b"\xff"),
        (256, 9, b"\x01\x00"),
        (511, 9, b"\x01\xff"),
        (0x020000000001, 48, b"\x02\x00\x00\x00\x00\x01"),
        (1, 48, b"\x01"),
        (2000, 24, b"\x07\xd0"),
    ],
)
def test_encode_is_canonical_and_decodes_back(value, width, expected):
    assert encode_value(value, width) == expected
    assert decode_value(expected) == value


def test_encode_range_check_names_the_field():
    with pytest.raises(
        UserInputError, match=r"set_egress_port\(port\): 512 does not fit in bit<9>"
    ):
        encode_value(512, 9, "set_egress_port(port)")
    with pytest.raises(UserInputError, match="-1 does not fit"):
        encode_value(-1, 8)
    with pytest.raises(UserInputError, match="expected an integer"):
        encode_value("3", 8)  # type: ignore[arg-type]
    # Zero-padded input is accepted by decode (devices may send it).
    assert decode_value(b"\x00\x00\x05") == 5


def test_mac_helpers():
    assert mac_to_int("02:00:00:00:00:0A") == 0x02_00_00_00_00_0A
    assert bytes_to_mac(b"\x02\x00\x00\x00\x00\x0a") == "02:00:00:00:00:0a"
    assert bytes_to_mac(b"\x01") == "00:00:00:00:00:01"  # canonical (short) form
    for bad in ("02:00:00:00:00", "zz:00:00:00:00:00", "002:00:00:00:00:00"):
        with pytest.raises(UserInputError, match="not a MAC address"):
            mac_to_int(bad)


def test_p4_names_are_the_p4infos(index):
    """controlplane.p4names is the one place Python spells P4 objects; the P4Info agrees."""
    from controlplane import p4names

    p4names.check_p4_names(index)
    assert set(p4names.COUNTERS) == {c.name for c in index.counters}
    assert set(p4names.TABLES) == {t.name for t in index.tables}
    assert [r.preamble.name for r in index.p4info.registers] == [p4names.MAX_QDEPTH]


def test_p4_name_check_answers_a_rename(index):
    from controlplane import p4info, p4names

    raw = type(index.p4info)()
    raw.CopyFrom(index.p4info)
    for table in raw.tables:
        if table.preamble.name == p4names.FORWARD_TABLE:
            table.preamble.name, table.preamble.alias = "CassiniIngress.logical_fwd", "logical_fwd"
    with pytest.raises(UserInputError, match="Did you mean 'CassiniIngress.logical_fwd'"):
        p4names.check_p4_names(p4info.index_p4info(raw))


def test_every_committed_id_carries_its_kinds_prefix():
    """p4c gives a register 0x16...; the committed file once said 0x10... (not a register)."""
    from controlplane.p4info import id_prefix_errors

    index = load_p4info()
    assert id_prefix_errors(index.p4info) == []
    assert [r.preamble.id >> 24 for r in index.p4info.registers] == [0x16]


def test_a_p4info_file_with_a_misprefixed_id_is_refused_naming_it(tmp_path):
    from controlplane.p4info import DEFAULT_P4INFO

    text = DEFAULT_P4INFO.read_text().replace("id: 369098753", "id: 268435457")
    bad = tmp_path / "bad.p4info.txtpb"
    bad.write_text(text)
    with pytest.raises(UserInputError) as err:
        load_p4info(bad)
    assert "registers CassiniEgress.max_qdepth: id 0x10000001" in str(err.value)
    assert "REGISTER (0x16)" in str(err.value)
