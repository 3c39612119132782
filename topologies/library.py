"""Which topology does a name on the command line mean?

A built-in name, a generator spec, or a file path:

- ``cassini-testbed``, ``cassini-testbed-2gpu``
- ``leaf-spine:LEAVES:SPINES:SERVERS_PER_LEAF`` (e.g. ``leaf-spine:16:8:16``)
- ``fat-tree:K`` (K even)
- ``path/to/topo.json`` or ``.yaml``/``.yml``
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .datafile import DATA_SUFFIXES
from .errors import UserInputError, did_you_mean
from .generators import cassini_testbed, cassini_testbed_2gpu, fat_tree, leaf_spine
from .io import load_topology_file
from .model import Topology

DEFAULT_TOPOLOGY = "cassini-testbed"

_BUILTINS: dict[str, Callable[[], Topology]] = {
    "cassini-testbed": cassini_testbed,
    "cassini-testbed-2gpu": cassini_testbed_2gpu,
}
_GENERATORS = {
    "leaf-spine": ("LEAVES", "SPINES", "SERVERS_PER_LEAF"),
    "fat-tree": ("K",),
}
# (our choice) A generated topology of at most this many links: a fat-tree:64
# (65,536 servers, 196,608 links) fits; leaf-spine:99999:99999:99999 (ten
# billion links) is refused at once instead of building for ever.
MAX_GENERATED_LINKS = 200_000


def builtin_names() -> list[str]:
    """Names `load_topology` accepts without a file or numbers."""
    return list(_BUILTINS)


def load_topology(spec: str) -> Topology:
    """The topology a user means by `spec`.

    >>> load_topology("fat-tree:4").name
    'fat-tree-4'
    """
    spec = spec.strip()
    if spec in _BUILTINS:
        return _BUILTINS[spec]()
    kind, sep, rest = spec.partition(":")
    if sep and kind in _GENERATORS:
        return _generate(spec, kind, rest.split(":"))
    path = Path(spec)
    if path.suffix.lower() in DATA_SUFFIXES or path.exists() or "/" in spec:
        return load_topology_file(spec)
    known = [*_BUILTINS, *(f"{k}:{':'.join(a)}" for k, a in _GENERATORS.items())]
    if sep:
        raise UserInputError(did_you_mean(kind, _GENERATORS, "topology generator"))
    raise UserInputError(did_you_mean(spec, known, "topology") + " or give a .json/.yaml file")


def _generate(spec: str, kind: str, fields: list[str]) -> Topology:
    names = _GENERATORS[kind]
    if len(fields) != len(names):
        raise UserInputError(
            f"'{spec}': {kind} takes {len(names)} number(s): {kind}:{':'.join(names)}"
        )
    values: list[int] = []
    for name, text in zip(names, fields, strict=True):
        try:
            value = int(text)
        except ValueError:
            raise UserInputError(f"'{spec}': {name} must be an integer, got '{text}'") from None
        if value < 1:
            raise UserInputError(f"'{spec}': {name} must be >= 1, got {value}")
        values.append(value)
    links = 3 * values[0] ** 3 // 4 if kind == "fat-tree" else values[0] * (values[1] + values[2])
    if links > MAX_GENERATED_LINKS:
        raise UserInputError(
            f"'{spec}': {links:,} links, more than a generated topology may have "
            f"({MAX_GENERATED_LINKS:,}); write a topology file for a larger one"
        )
    if kind == "fat-tree":
        return fat_tree(values[0])
    return leaf_spine(values[0], values[1], values[2])
