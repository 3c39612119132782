"""Which interface is each switch port attached to, and what do controllers call the ports?

`cassini switch serve` takes bmv2's `-i PORT@IFACE` flags; gNMI names the
ports after the topology cabled to the switch (`--topology`). Both are read
here, so they are tested without a command line.
"""

from __future__ import annotations

from topologies.errors import UserInputError

# bmv2's port numbers are 9 bits (egress_spec).
MAX_PORT = 511


def parse_interfaces(specs: list[str]) -> dict[int, str]:
    """{port: ifname} of `-i PORT@IFACE` flags; errors name the bad flag.

    >>> parse_interfaces(["1@veth1", "2@veth3"])
    {1: 'veth1', 2: 'veth3'}
    """
    ports: dict[int, str] = {}
    for spec in specs:
        port_text, sep, ifname = spec.partition("@")
        if not sep or not ifname:
            raise UserInputError(f"-i {spec}: expected PORT@IFACE, e.g. 1@veth1")
        try:
            port = int(port_text)
        except ValueError as err:
            raise UserInputError(f"-i {spec}: port '{port_text}' is not an integer") from err
        if not 0 <= port <= MAX_PORT:
            raise UserInputError(f"-i {spec}: port {port} must be 0..{MAX_PORT}")
        if port in ports:
            raise UserInputError(f"-i {spec}: port {port} is already attached to {ports[port]}")
        if ifname in ports.values():
            raise UserInputError(f"-i {spec}: interface {ifname} is attached twice")
        ports[port] = ifname
    return ports


def port_names_of(spec: str, ports: set[int]) -> dict[int, str]:
    """The ports' names for controllers from topology `spec`'s chip map; a port the map
    does not use is refused (the topology is not the one cabled here)."""
    from topologies.chip_mapping import map_to_chip
    from topologies.library import load_topology
    from topologies.port_names import interface_names

    names = interface_names(map_to_chip(load_topology(spec)))
    unused = sorted(ports - set(names))
    if unused:
        raise UserInputError(
            f"--topology {spec}: port {unused[0]} is not one of its chip map's "
            f"{len(names)} ports: is it the topology cabled to this switch?"
        )
    return names
