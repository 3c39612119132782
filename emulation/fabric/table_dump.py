"""What entries does the chip hold, one line each, as Mininet's `dpctl dump-flows` shows flows?

`describe_entry` is the one wording of a table entry (`cassini program`
prints its plan with it); `dump_flows` reads a running switch's tables over
P4Runtime without arbitration (any client may Read), so it never competes
with the controller that programmed the switch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controlplane.entries import TableEntry
    from controlplane.p4info import P4InfoIndex


def describe_entry(entry: TableEntry, index: P4InfoIndex) -> str:
    """'logical_forward ingress_port=1 dst_mac=02:00:00:00:00:02 -> set_egress_port(port=25)';
    a match field the entry leaves out (a ternary don't-care) shows as '*'."""
    from controlplane.p4info import bytes_to_mac, encode_value

    table = index.table(entry.table)
    keys = []
    for field in table.match_fields:
        value = entry.match.get(field.name)
        if value is None:
            shown = "*"
        elif field.bitwidth == 48:
            shown = bytes_to_mac(encode_value(value, 48))
        else:
            shown = str(value)
        keys.append(f"{field.name}={shown}")
    action = index.action(entry.action)
    params = ", ".join(f"{p.name}={entry.params[p.name]}" for p in action.params)
    return f"{table.alias} {' '.join(keys)} -> {action.alias}({params})"


def dump_flows(
    address: str, device_id: int, table: str | None = None, timeout: float = 10.0
) -> list[str]:
    """Every entry of every table (or of `table`) on the switch at `address`, one line
    each, in table then match-field order, closed by a count line."""
    from controlplane.session import P4RuntimeSession

    with P4RuntimeSession.connect(address, device_id, election_id=None, timeout=timeout) as session:
        index = session.p4info
        entries = session.read_table(table)

    def order(entry: TableEntry) -> tuple[str, list[int]]:
        fields = index.table(entry.table).match_fields
        return index.table(entry.table).alias, [entry.match.get(f.name, -1) for f in fields]

    lines = [describe_entry(e, index) for e in sorted(entries, key=order)]
    where = f"table {table}" if table else "all tables"
    return [*lines, f"{len(entries)} entries ({where}, device {device_id})"]
