"""What does an installed (or deleted) table entry do to the packet path?

The packet path implements the Cassini tables (`controlplane.p4names`);
an entry of any other table is stored but changes nothing there.
"""

from __future__ import annotations

from typing import Any

from controlplane.p4info import P4InfoIndex
from controlplane.p4names import (
    FORWARD_ACTION,
    FORWARD_TABLE,
    JOB_BY_DST_TABLE,
    JOB_BY_SRC_TABLE,
    JOB_CLASS_ACTION,
    QUEUE_CLASS_ACTION,
    QUEUE_CLASS_BY_FLOW_TABLE,
    QUEUE_CLASS_TABLE,
    WRED_ACTION,
    WRED_TABLE,
)
from emulation.softswitch.state import (
    ForwardChange,
    JobClassChange,
    QueueClassChange,
    WredChange,
    WredProfile,
    flow_key,
    socket_key,
)

DataplaneEffect = ForwardChange | WredChange | JobClassChange | QueueClassChange


def dataplane_effect(index: P4InfoIndex, entry: Any, *, deleted: bool) -> DataplaneEffect | None:
    """What an installed (or deleted) canonical entry means to the packet path; None if nothing."""
    table = index.table_by_id(entry.table_id)
    values = {table.match_field_by_id(m.field_id).name: m for m in entry.match}
    if table.name == FORWARD_TABLE:
        ingress = int.from_bytes(values["ingress_port"].exact.value, "big")
        mac = int.from_bytes(values["dst_mac"].exact.value, "big").to_bytes(6, "big")
        port = None if deleted else _param_value(index, entry, FORWARD_ACTION, "port")
        return ForwardChange(ingress, mac, port)
    if table.name == WRED_TABLE:
        egress = int.from_bytes(values["egress_port"].exact.value, "big")
        profile = None
        if not deleted and index.action_by_id(entry.action.action.action_id).name == WRED_ACTION:
            profile = WredProfile(
                min_cells=_param_value(index, entry, WRED_ACTION, "min_cells") or 0,
                max_cells=_param_value(index, entry, WRED_ACTION, "max_cells") or 0,
                max_prob_percent=_param_value(index, entry, WRED_ACTION, "max_prob") or 0,
            )
        return WredChange(egress, profile)
    if table.name in (JOB_BY_DST_TABLE, JOB_BY_SRC_TABLE):
        side = "src" if table.name == JOB_BY_SRC_TABLE else "dst"
        key = socket_key(
            int.from_bytes(values[f"{side}_addr"].exact.value, "big"),
            int.from_bytes(values[f"{side}_port"].exact.value, "big"),
        )
        job = None if deleted else _param_value(index, entry, JOB_CLASS_ACTION, "job_class")
        return JobClassChange(side == "src", key, job)
    if table.name in (QUEUE_CLASS_TABLE, QUEUE_CLASS_BY_FLOW_TABLE):
        queue_class = (
            None if deleted else _param_value(index, entry, QUEUE_CLASS_ACTION, "queue_class")
        )

        def value(name: str) -> int:
            return int.from_bytes(values[name].exact.value, "big")

        if table.name == QUEUE_CLASS_TABLE:
            return QueueClassChange(False, value("dscp"), queue_class)
        flow = flow_key(
            value("src_addr"),
            value("dst_addr"),
            value("protocol"),
            value("src_port"),
            value("dst_port"),
        )
        return QueueClassChange(True, flow, queue_class)
    return None


def _param_value(index: P4InfoIndex, entry: Any, action_name: str, param: str) -> int | None:
    """The value of `param` if the entry's action is `action_name`, else None (e.g. drop)."""
    action = index.action_by_id(entry.action.action.action_id)
    if action.name != action_name:
        return None
    param_id = action.param(param).id
    for p in entry.action.action.params:
        if p.param_id == param_id:
            return int.from_bytes(p.value, "big")
    return None
