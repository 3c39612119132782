"""Both P4 programs and the P4Info name the same objects with the same widths.

p4c is not installable here, so this reads the P4 sources with a light
tokenizer: @name/@id annotations on tables, actions and counters, table keys
(field, width, match kind, key name), action lists and default actions,
action parameters with their bit widths, counter sizes and types. Every object
of either program must be in the P4Info, and every P4Info object in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from controlplane.p4info import ID_PREFIXES, P4_DIR, P4InfoIndex

P4SRC = P4_DIR  # the P4 sources shipped with the package, next to their P4Info
PROGRAMS = ("cassini.p4", "cassini_tna.p4")
# P4Runtime id prefixes (P4Runtime spec 6.3): id = prefix << 24 | @id, from the
# module that checks them (one source of truth; this once said 0x10 for registers).
ID_PREFIX = {kind: ID_PREFIXES[kind + "s"] for kind in ("table", "action", "counter", "register")}

# Intrinsic metadata widths from the architectures' includes (v1model.p4, tna.p4).
ARCH_FIELD_WIDTHS = {
    "standard_metadata.ingress_port": 9,
    "standard_metadata.egress_port": 9,
    "ig_intr_md.ingress_port": 9,
    "eg_intr_md.egress_port": 9,
}
COUNTER_UNITS = {
    "CounterType.packets": "PACKETS",
    "CounterType.bytes": "BYTES",
    "CounterType.packets_and_bytes": "BOTH",
    "CounterType_t.PACKETS": "PACKETS",
    "CounterType_t.BYTES": "BYTES",
    "CounterType_t.PACKETS_AND_BYTES": "BOTH",
}


@dataclass
class P4Objects:
    """What one program declares, by P4Info name."""

    tables: dict[str, dict] = field(default_factory=dict)
    actions: dict[str, dict] = field(default_factory=dict)
    counters: dict[str, dict] = field(default_factory=dict)
    registers: dict[str, dict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _block(text: str, start: int) -> str:
    """The text between the brace at or after `start` and its matching brace."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    raise ValueError("unbalanced braces")


def header_field_widths(text: str) -> dict[str, int]:
    """'hdr.ethernet.dst_addr' -> 48, from the header and headers_t declarations."""
    typedefs = {m[1]: int(m[0]) for m in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}
    headers: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"header\s+(\w+)\s*\{", text):
        fields: dict[str, int] = {}
        for ftype, fname in re.findall(r"(bit<\d+>|\w+)\s+(\w+)\s*;", _block(text, m.start())):
            width = re.fullmatch(r"bit<(\d+)>", ftype)
            fields[fname] = int(width[1]) if width else typedefs[ftype]
        headers[m[1]] = fields
    widths: dict[str, int] = {}
    m = re.search(r"struct\s+headers_t\s*\{", text)
    assert m, "struct headers_t not found"
    for htype, member in re.findall(r"(\w+)\s+(\w+)\s*;", _block(text, m.start())):
        for fname, width in headers[htype].items():
            widths[f"hdr.{member}.{fname}"] = width
    return widths


def parse_program(text: str, field_widths: dict[str, int]) -> P4Objects:
    """Tables, actions and counters of one program, named by their @name annotations."""
    text = strip_comments(text)
    objs = P4Objects()
    annotated = r'@name\("\.?([\w.]+)"\)\s*(?:@id\((\d+)\)\s*)?'

    # Actions: @name(...) @id(...) action local(params) {
    local_action: dict[str, str] = {"NoAction": "NoAction"}
    for m in re.finditer(annotated + r"action\s+(\w+)\s*\(([^)]*)\)", text):
        name, pid, local, params_text = m[1], m[2], m[3], m[4]
        params = []
        for p in filter(None, (s.strip() for s in params_text.split(","))):
            pm = re.fullmatch(r"(?:in\s+)?bit<(\d+)>\s+(\w+)", p)
            if not pm:
                objs.problems.append(f"action {name}: parameter '{p}' has no bit<W> type")
                continue
            params.append((pm[2], int(pm[1])))
        objs.actions[name] = {"id": pid and int(pid), "params": params}
        local_action[local] = name
    n_actions = len(re.findall(r"\baction\s+\w+\s*\(", text))
    if n_actions != len(objs.actions):
        objs.problems.append(f"{n_actions - len(objs.actions)} action(s) without @name")

    # Counters: @name(...) @id(...) counter(SIZE, TYPE) local;  /  Counter<..>(SIZE, TYPE) local;
    for m in re.finditer(
        annotated
        + r"(?:counter|Counter<(?:[^<>]|<[^<>]*>)*>)\s*\(\s*(\d+)\s*,\s*([\w.]+)\s*\)\s*(\w+)\s*;",
        text,
    ):
        objs.counters[m[1]] = {
            "id": m[2] and int(m[2]),
            "size": int(m[3]),
            "unit": COUNTER_UNITS[m[4]],
        }
    n_counters = len(re.findall(r"\b(?:counter|Counter<[^;]*?>)\s*\(", text))
    if n_counters != len(objs.counters):
        objs.problems.append(f"{n_counters - len(objs.counters)} counter(s) without @name")

    # Registers: register<bit<W>>(SIZE) local;  /  Register<bit<W>, bit<I>>(SIZE[, INIT]) local;
    for m in re.finditer(
        annotated
        + r"(?:register<bit<(\d+)>>|Register<bit<(\d+)>\s*,\s*bit<\d+>>)"
        + r"\s*\(\s*(\d+)\s*(?:,\s*\w+\s*)?\)\s*(\w+)\s*;",
        text,
    ):
        objs.registers[m[1]] = {
            "id": m[2] and int(m[2]),
            "bitwidth": int(m[3] or m[4]),
            "size": int(m[5]),
        }
    n_registers = len(re.findall(r"\b(?:register|Register)<[^;]*?>\s*\(", text))
    if n_registers != len(objs.registers):
        objs.problems.append(f"{n_registers - len(objs.registers)} register(s) without @name")

    # Tables.
    for m in re.finditer(annotated + r"table\s+(\w+)\s*\{", text):
        name, tid = m[1], m[2]
        body = _block(text, m.start())
        key_block = re.search(r"key\s*=\s*\{([^}]*)\}", body)
        keys = []
        for expr, kind, key_name in re.findall(
            r"([\w.]+)\s*:\s*(\w+)\s*@name\(\"(\w+)\"\)\s*;", key_block[1] if key_block else ""
        ):
            if expr not in field_widths:
                objs.problems.append(f"table {name}: unknown key field {expr}")
                continue
            keys.append((key_name, field_widths[expr], kind.upper()))
        n_keys = len(re.findall(r":\s*\w+[^;]*;", key_block[1] if key_block else ""))
        if n_keys != len(keys):
            objs.problems.append(f"table {name}: {n_keys - len(keys)} key(s) without @name")
        actions_block = re.search(r"actions\s*=\s*\{([^}]*)\}", body)
        refs = []
        for item in filter(None, (s.strip() for s in actions_block[1].split(";"))):
            default_only = item.startswith("@defaultonly")
            local = item.replace("@defaultonly", "").strip()
            refs.append((local_action.get(local, f"<unknown action {local}>"), default_only))
        default = re.search(r"const\s+default_action\s*=\s*(\w+)\s*\(", body)
        size = re.search(r"size\s*=\s*(\d+)\s*;", body)
        objs.tables[name] = {
            "id": tid and int(tid),
            "keys": keys,
            "actions": sorted(refs),
            "const_default": local_action.get(default[1]) if default else None,
            "size": int(size[1]) if size else None,
        }
    n_tables = len(re.findall(r"\btable\s+\w+\s*\{", text))
    if n_tables != len(objs.tables):
        objs.problems.append(f"{n_tables - len(objs.tables)} table(s) without @name")
    return objs


def compare(objs: P4Objects, index: P4InfoIndex, program: str) -> list[str]:
    """Every difference between a program's objects and the P4Info, as readable lines."""
    out = [f"{program}: {p}" for p in objs.problems]
    action_names = {a.name for a in index.actions}
    p4info_tables = {t.name: t for t in index.tables}
    p4info_counters = {c.name: c for c in index.counters}

    for name in sorted(set(objs.tables) ^ set(p4info_tables)):
        where = "program only" if name in objs.tables else "P4Info only"
        out.append(f"{program}: table {name}: {where}")
    for name, t in objs.tables.items():
        info = p4info_tables.get(name)
        if info is None:
            continue
        mine = t["keys"]
        theirs = [(m.name, m.bitwidth, m.match_type) for m in info.match_fields]
        if mine != theirs:
            out.append(f"{program}: table {name}: keys {mine} != P4Info {theirs}")
        ref_names = sorted(
            (index.action_by_id(a).name, a in info.default_only_action_ids) for a in info.action_ids
        )
        if t["actions"] != ref_names:
            out.append(f"{program}: table {name}: actions {t['actions']} != P4Info {ref_names}")
        default = (
            index.action_by_id(info.const_default_action_id).name
            if info.const_default_action_id
            else None
        )
        if t["const_default"] != default:
            out.append(
                f"{program}: table {name}: const default {t['const_default']} != P4Info {default}"
            )
        if t["size"] != info.size:
            out.append(f"{program}: table {name}: size {t['size']} != P4Info {info.size}")
        if t["id"] is not None and (ID_PREFIX["table"] << 24 | t["id"]) != info.id:
            out.append(f"{program}: table {name}: @id {t['id']} does not give P4Info id {info.id}")

    declared_actions = set(objs.actions) | {"NoAction"}
    for name in sorted(declared_actions ^ action_names):
        where = "program only" if name in declared_actions else "P4Info only"
        out.append(f"{program}: action {name}: {where}")
    for name, a in objs.actions.items():
        if name not in action_names:
            continue
        info = index.action(name)
        theirs = [(p.name, p.bitwidth) for p in info.params]
        if a["params"] != theirs:
            out.append(f"{program}: action {name}: params {a['params']} != P4Info {theirs}")
        if a["id"] is not None and (ID_PREFIX["action"] << 24 | a["id"]) != info.id:
            out.append(f"{program}: action {name}: @id {a['id']} does not give P4Info id {info.id}")

    for name in sorted(set(objs.counters) ^ set(p4info_counters)):
        where = "program only" if name in objs.counters else "P4Info only"
        out.append(f"{program}: counter {name}: {where}")
    for name, c in objs.counters.items():
        info = p4info_counters.get(name)
        if info is None:
            continue
        if (c["size"], c["unit"]) != (info.size, info.unit):
            out.append(
                f"{program}: counter {name}: {c['size']} {c['unit']} != P4Info {info.size} {info.unit}"
            )
        if c["id"] is not None and (ID_PREFIX["counter"] << 24 | c["id"]) != info.id:
            out.append(
                f"{program}: counter {name}: @id {c['id']} does not give P4Info id {info.id}"
            )
    p4info_registers = {r.preamble.name: r for r in index.p4info.registers}
    for name in sorted(set(objs.registers) ^ set(p4info_registers)):
        where = "program only" if name in objs.registers else "P4Info only"
        out.append(f"{program}: register {name}: {where}")
    for name, r in objs.registers.items():
        raw = p4info_registers.get(name)
        if raw is None:
            continue
        theirs = (raw.type_spec.bitstring.bit.bitwidth, raw.size)
        if (r["bitwidth"], r["size"]) != theirs:
            out.append(
                f"{program}: register {name}: bit<{r['bitwidth']}> x {r['size']} != P4Info {theirs}"
            )
        if r["id"] is not None and (ID_PREFIX["register"] << 24 | r["id"]) != raw.preamble.id:
            out.append(
                f"{program}: register {name}: @id {r['id']} does not give P4Info id {raw.preamble.id}"
            )
    return out


@pytest.fixture(scope="module")
def widths() -> dict[str, int]:
    return {
        **header_field_widths((P4SRC / "include" / "headers.p4").read_text()),
        **ARCH_FIELD_WIDTHS,
    }


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_matches_p4info(program, index, widths):
    objs = parse_program((P4SRC / program).read_text(), widths)
    # The tokenizer found what is there (guards against a parser that finds nothing).
    assert len(objs.tables) == 6 and len(objs.actions) == 5 and len(objs.counters) == 6
    assert len(objs.registers) == 1
    assert compare(objs, index, program) == []


def test_header_widths_come_from_the_shared_include(widths):
    assert widths["hdr.ethernet.dst_addr"] == 48
    assert widths["hdr.ipv4.ecn"] == 2 and widths["hdr.ipv4.dscp"] == 6


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('@name("dst_mac")', '@name("dst_addr")', "table CassiniIngress.logical_forward: keys"),
        ("bit<24> max_cells", "bit<16> max_cells", "action CassiniEgress.set_wred: params"),
        (
            '@name(".CassiniEgress.port_tx") @id(2)',
            '@name(".CassiniEgress.tx") @id(2)',
            "counter CassiniEgress.tx: program only",
        ),
        ("size = 262144;", "size = 1024;", "size 1024 != P4Info 262144"),
        (
            "const default_action = drop();",
            "const default_action = set_egress_port(1);",
            "const default",
        ),
        ("@defaultonly NoAction;", "NoAction;", "actions"),
        (
            '@name(".CassiniIngress.drop") @id(2)',
            '@name(".CassiniIngress.drop") @id(9)',
            "@id 9 does not give",
        ),
        (
            'exact @name("egress_port")',
            'ternary @name("egress_port")',
            "table CassiniEgress.wred_profile: keys",
        ),
        ("bit<4> job_class)", "bit<8> job_class)", "action CassiniEgress.set_job_class: params"),
        ("(8192,", "(4096,", "counter CassiniEgress.job_tx: 4096 BOTH != P4Info 8192 BOTH"),
        ("egister<bit<32>", "egister<bit<16>", "register CassiniEgress.max_qdepth: bit<16> x 512"),
        (
            '@name(".CassiniEgress.max_qdepth") @id(1)',
            '@name(".CassiniEgress.deepest") @id(1)',
            "register CassiniEgress.deepest: program only",
        ),
    ],
)
@pytest.mark.parametrize("program", PROGRAMS)
def test_a_renamed_or_resized_object_is_caught(program, old, new, expected, index, widths):
    text = (P4SRC / program).read_text()
    assert old in text, f"{program} no longer contains {old!r}: update this test"
    problems = compare(parse_program(text.replace(old, new), widths), index, program)
    assert any(expected in p for p in problems), problems


def test_a_table_without_name_is_caught(index, widths):
    text = (P4SRC / "cassini.p4").read_text()
    text = text.replace(
        "apply {\n        port_rx",
        "table extra { key = { hdr.ipv4.ecn : exact; } actions = { drop; } }\n    apply {\n        port_rx",
        1,
    )
    problems = compare(parse_program(text, widths), index, "cassini.p4")
    assert any("table(s) without @name" in p for p in problems), problems
