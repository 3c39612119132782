"""The cluster as data: model, generators, files, validation, routing, chip mapping.

Entry points: `library.load_topology(spec)`, `routing.Router(topo)`,
`chip_mapping.map_to_chip(topo)`, `chip_mapping.forwarding_entries(...)` and
`summary.describe_topology(topo)` (what `cassini topo show` prints).
"""
