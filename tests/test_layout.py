"""The project's shape: the fixed top level, the P4 sources where users look for
them, and a build script that writes only under build/."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import networkx as nx

from controlplane.p4info import DEFAULT_P4INFO, P4_DIR, load_p4info

ROOT = Path(__file__).resolve().parents[1]


def test_p4_sources_and_p4info_live_in_p4src_at_the_top() -> None:
    p4src = ROOT / "p4src"
    for name in ("cassini.p4", "cassini_tna.p4", "cassini.p4info.txtpb", "include/headers.p4"):
        assert (p4src / name).is_file(), name
    # The control plane loads the P4Info from there (a source checkout here;
    # tests/emulation/test_wheel.py checks the installed wheel).
    assert Path(str(P4_DIR)).resolve() == p4src.resolve()
    assert Path(str(DEFAULT_P4INFO)).resolve() == (p4src / "cassini.p4info.txtpb").resolve()
    assert load_p4info().tables
    assert not (ROOT / "controlplane" / "p4").exists()


def test_no_folder_is_named_like_build_output() -> None:
    # `target/` is build output to Rust, Maven and GitHub's Python .gitignore.
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [f for f in tracked if "/target/" in f or f.startswith("target/")]


def test_build_script_without_a_compiler_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "p4c-out"
    # A PATH with bash's own folder only: no p4c, p4c-bm2-ss or bf-p4c on it.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "dirname"):
        (bare / tool).symlink_to(_which(tool))
    result = subprocess.run(
        [str(bare / "bash"), str(ROOT / "scripts" / "build_p4.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(bare), "P4_OUT": str(out), "HOME": os.environ.get("HOME", "/")},
    )
    assert result.returncode == 1
    assert "no P4 compiler found" in result.stderr
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))


def _which(tool: str) -> str:
    for folder in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/bin"]:
        candidate = Path(folder) / tool
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise AssertionError(f"{tool} not found")


PACKAGES = ("topologies", "scheduler", "controlplane", "emulation", "p4src")
MAX_MODULE_LINES = 600
GENERATED = ROOT / "controlplane" / "proto"  # scripts/gen_protos.py writes it at build time


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(GENERATED):
                continue  # protoc's output, not a room of the house
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _import_graph() -> nx.DiGraph:
    """Module -> module it imports (anywhere in it, lazy imports included)."""
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                prefix = ".".join(base + ([node.module] if node.module else []))
                targets = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # A module's own package (its __init__) is not an import of a sibling.
                if target and target != name and not name.startswith(target + "."):
                    graph.add_edge(name, target)
    return graph


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_import_circle_between_modules() -> None:
    circles = [cycle for cycle in nx.simple_cycles(_import_graph()) if len(cycle) > 1]
    assert circles == []


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    # The checker itself: a relative import inside a function is an edge.
    graph = _import_graph()
    assert graph.has_edge("emulation.cli", "emulation.cli.common")
    assert graph.has_edge("emulation.cli.emulate_cmds", "emulation.emulate.runner")
    # Layers point one way: nothing below emulation imports it.
    upward = [
        (a, b)
        for a, b in graph.edges
        if b.startswith("emulation") and a.split(".")[0] in ("topologies", "scheduler", "controlplane")
    ]
    assert upward == []


# The rooms of each layer, lowest first: a room imports only rooms of its own level or
# below. scheduler: the job model, Cassini's method, the schedulers and the network
# policies, the fluid simulator that runs them, the sweeps over it. emulation: its
# housekeeping, the switch, the fabric, the transport, the replicas, the runner with
# its capacity model (each reads the other), profiling, the reproduction, the command.
ROOMS = {
    "scheduler": [
        ["workloads"], ["cassini"], ["baselines", "policies"], ["simulator"], ["sweep"],
    ],
    "emulation": [
        ["housekeeping"], ["softswitch"], ["fabric"], ["roce"], ["jobs"],
        ["emulate", "capacity"], ["profile"], ["reproduce"], ["cli"],
    ],
}  # fmt: skip


def _room(module: str) -> tuple[str, int] | None:
    """(room, level) of a module inside a layer's rooms, None for the layer's own files."""
    parts = module.split(".")
    for level, rooms in enumerate(ROOMS.get(parts[0], [])):
        if len(parts) > 1 and parts[1] in rooms:
            return f"{parts[0]}.{parts[1]}", level
    return None


def test_rooms_import_only_rooms_below_them() -> None:
    upward = []
    for a, b in _import_graph().edges:
        ra, rb = _room(a), _room(b)
        if ra and rb and a.split(".")[0] == b.split(".")[0] and rb[1] > ra[1]:
            upward.append(f"{a} -> {b}")
    assert upward == []


def test_each_layer_is_its_rooms_and_a_few_shared_modules() -> None:
    """`emulation/` and `scheduler/` show packages; a loose module is a room's job."""
    for layer, rooms in ROOMS.items():
        packages = {p.name for p in (ROOT / layer).iterdir() if (p / "__init__.py").is_file()}
        assert packages == {room for level in rooms for room in level}, layer
        loose = {p.name for p in (ROOT / layer).glob("*.py")} - {"__init__.py", "__main__.py"}
        assert loose == set(), layer


# A command module parses, calls the library and prints: past this, it computes.
MAX_COMMAND_LINES = 250


def test_command_modules_only_parse_call_and_print() -> None:
    long = {
        path.name: n
        for path in (ROOT / "emulation" / "cli").glob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_COMMAND_LINES
    }
    assert long == {}
