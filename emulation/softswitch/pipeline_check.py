"""Can this target realize a pushed P4Info, and is it the Cassini pipeline?

`check_pipeline` indexes a P4Info for SetForwardingPipelineConfig, refusing
object kinds the software target has no implementation for and, given the
reference P4Info, any difference from the Cassini program (by name: ids may
differ).
"""

from __future__ import annotations

from typing import Any

from controlplane.p4info import P4InfoIndex, index_p4info
from controlplane.proto.p4.config.v1 import p4info_pb2
from emulation.softswitch.errors import invalid, known_object
from emulation.softswitch.state import counter_cells
from topologies.errors import did_you_mean

# Object kinds of a P4Info this target has no implementation for.
_UNSUPPORTED_KINDS = (
    "action_profiles",
    "direct_counters",
    "meters",
    "direct_meters",
    "value_sets",
    "digests",
    "externs",
)


def check_pipeline(p4info: Any, reference: P4InfoIndex | None) -> P4InfoIndex:
    """Index a pushed P4Info, refusing what this target cannot realize.

    With a reference (the Cassini P4Info), the pushed P4Info must declare the
    same tables, actions and counters by name, with the same match fields,
    parameters and widths; ids may differ (entries are translated by name).
    Without one, any P4Info made only of tables, actions and counters is
    accepted and its entries are stored but only Cassini-named tables reach
    the packet path.
    """
    for kind in _UNSUPPORTED_KINDS:
        objects = getattr(p4info, kind)
        if len(objects):
            names = ", ".join(o.preamble.name for o in objects)
            raise invalid(
                f"P4Info has {kind} ({names}), which this software target does not support"
            )
    # Registers: with the reference, exactly the Cassini pipeline's (max_qdepth, which the
    # traffic manager's own figure realizes); without one, any (unchecked, like tables).
    registers = sorted(r.preamble.name for r in p4info.registers)
    expected = (
        registers
        if reference is None
        else sorted(r.preamble.name for r in reference.p4info.registers)
    )
    if registers != expected:
        names = ", ".join(name for name in registers if name not in expected) or "none"
        raise invalid(
            f"P4Info has registers {names}; this software target realizes only the Cassini "
            f"pipeline's ({', '.join(expected) or 'none'})"
        )
    if reference is not None and len(p4info.controller_packet_metadata):
        names = ", ".join(o.preamble.name for o in p4info.controller_packet_metadata)
        raise invalid(
            f"P4Info has controller_packet_metadata ({names}): the Cassini pipeline has no CPU port"
        )
    _check_unique_ids(p4info)
    index = index_p4info(p4info)
    for table in index.tables:
        for action_id in table.action_ids:
            known_object(index.action_by_id, action_id, f"table {table.name} refers to action id")
        if table.const_default_action_id not in (0, *table.action_ids):
            raise invalid(
                f"table {table.name}: const default action id {table.const_default_action_id} "
                "is not one of its actions"
            )
    for counter in index.counters:
        if counter.size > counter_cells(counter.name):
            raise invalid(
                f"counter {counter.name} has {counter.size} cells; "
                f"this target has {counter_cells(counter.name)}"
            )
    for raw_table in p4info.tables:
        name = raw_table.preamble.name
        if raw_table.implementation_id:
            raise invalid(
                f"table {name} uses an action profile, which this target does not support"
            )
        if len(raw_table.direct_resource_ids):
            raise invalid(f"table {name} has direct resources, which this target does not support")
        if raw_table.idle_timeout_behavior != p4info_pb2.Table.NO_TIMEOUT:
            raise invalid(
                f"table {name} asks for idle timeouts, which this target does not support"
            )
        if raw_table.is_const_table:
            raise invalid(f"table {name} is a const table, which this target does not support")
    if reference is not None:
        _check_same_program(index, reference)
    return index


def _check_unique_ids(p4info: Any) -> None:
    seen: dict[int, str] = {}
    for kind in ("tables", "actions", "counters"):
        for obj in getattr(p4info, kind):
            object_id = obj.preamble.id
            if object_id == 0:
                raise invalid(f"{kind[:-1]} {obj.preamble.name} has id 0 (reserved)")
            if object_id in seen:
                raise invalid(
                    f"id {object_id} is used by both {seen[object_id]} and {obj.preamble.name}"
                )
            seen[object_id] = obj.preamble.name


def _check_same_program(pushed: P4InfoIndex, reference: P4InfoIndex) -> None:
    """Refuse a P4Info that is not the Cassini pipeline, naming the first difference."""
    for kind in ("table", "action", "counter"):
        ours = {o.name: o for o in getattr(reference, kind + "s")}
        theirs = {o.name: o for o in getattr(pushed, kind + "s")}
        for name in theirs:
            if name not in ours:
                hint = did_you_mean(name, list(ours), f"{kind} in the Cassini pipeline")
                raise invalid(f"unsupported {kind} {name!r} in P4Info: {hint}")
        for name in ours:
            if name not in theirs:
                raise invalid(f"P4Info lacks {kind} {name} of the Cassini pipeline")
    for table in pushed.tables:
        ref = reference.table(table.name)
        ref_fields = {m.name: (m.bitwidth, m.match_type) for m in ref.match_fields}
        got_fields = {m.name: (m.bitwidth, m.match_type) for m in table.match_fields}
        if got_fields != ref_fields:
            raise invalid(
                f"table {table.name}: match fields {_describe(got_fields)} differ from the "
                f"Cassini pipeline's {_describe(ref_fields)}"
            )
        ref_actions = {reference.action_by_id(a).name for a in ref.action_ids}
        got_actions = {pushed.action_by_id(a).name for a in table.action_ids}
        if got_actions != ref_actions:
            raise invalid(
                f"table {table.name}: actions {sorted(got_actions)} differ from the Cassini "
                f"pipeline's {sorted(ref_actions)}"
            )
        ref_default = _action_name(reference, ref.const_default_action_id)
        got_default = _action_name(pushed, table.const_default_action_id)
        if got_default != ref_default:
            raise invalid(
                f"table {table.name}: const default action {got_default or 'none'} differs from "
                f"the Cassini pipeline's {ref_default or 'none'}"
            )
    for action in pushed.actions:
        ref_action = reference.action(action.name)
        ref_params = {p.name: p.bitwidth for p in ref_action.params}
        got_params = {p.name: p.bitwidth for p in action.params}
        if got_params != ref_params:
            raise invalid(
                f"action {action.name}: parameters {_describe(got_params)} differ from the "
                f"Cassini pipeline's {_describe(ref_params)}"
            )


def _action_name(index: P4InfoIndex, action_id: int) -> str:
    return index.action_by_id(action_id).name if action_id else ""


def _describe(fields: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(fields.items())) + "}"
