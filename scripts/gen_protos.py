"""Where do the project's P4Runtime stubs come from?

From the P4Runtime 1.5 `.proto` files the finsy wheel ships (a maintained
package; our choice over the `p4runtime` releases on PyPI, whose generated
code does not load on protobuf 4 or later), compiled here with grpcio-tools
into `controlplane/proto/` (git-ignored: generated at build time, never
committed). The build runs it (setup.py's build_py step, with grpcio-tools,
googleapis-common-protos and the pinned finsy among the build requirements), so
a wheel or an editable install from a clean checkout has the stubs;
scripts/setup.sh runs it again after installing the project.

Where the `.proto` files come from: the pinned finsy installed beside this
interpreter (a build requirement, so the build's own environment has it) or
else its wheel, downloaded once with pip into build/protos/.

What is generated: `p4/v1/p4runtime.proto`, `p4/v1/p4data.proto`,
`p4/config/v1/p4info.proto`, `p4/config/v1/p4types.proto`, imported as
`controlplane.proto.p4.v1.p4runtime_pb2` and so on.

What is not (our choice):
- `google/rpc/status.proto` and `code.proto`: googleapis-common-protos' stubs
  (`google.rpc.status_pb2`) are used, so one process registers one
  `google/rpc/status.proto` (finsy's copy differs and the two refuse to load
  together).
- gNMI: pygnmi's stubs (`pygnmi.spec.v080`) serve both the project and pygnmi's
  client, which the tests run in the same process; generating `gnmi.proto` again
  would define the `gnmi.*` messages twice.

Usage: python scripts/gen_protos.py [--finsy-wheel PATH]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "controlplane" / "proto"
CACHE = ROOT / "build" / "protos"
FINSY_VERSION = "0.30.0"  # pinned: the .proto files are part of the build (our choice)
FINSY = f"finsy=={FINSY_VERSION}"  # also in pyproject.toml's [build-system] requires
PROTOS = (
    "p4/v1/p4runtime.proto",
    "p4/v1/p4data.proto",
    "p4/config/v1/p4info.proto",
    "p4/config/v1/p4types.proto",
)
PACKAGE = "controlplane.proto"
# Generated code imports its siblings by their proto path (`from p4.v1 import ...`).
_SIBLING_IMPORT = re.compile(r"^(from|import) p4\.", re.MULTILINE)


def finsy_wheel() -> Path:
    """The finsy wheel, downloaded once into build/protos/ (no dependencies)."""
    found = sorted(CACHE.glob("finsy-*.whl"))
    if found:
        return found[-1]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", FINSY, "-d", str(CACHE)],
        check=True,
    )
    (wheel,) = CACHE.glob("finsy-*.whl")
    return wheel


def installed_finsy() -> Path | None:
    """finsy's proto folder, if the pinned finsy is installed (found, not imported)."""
    try:
        if importlib.metadata.version("finsy") != FINSY_VERSION:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec("finsy")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "proto"
    return folder if all((folder / name).is_file() for name in PROTOS) else None


def extract(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in PROTOS:
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(f"finsy/proto/{name}"))


def copy_protos(folder: Path, into: Path) -> None:
    for name in PROTOS:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((folder / name).read_bytes())


def packages(out: Path = OUT) -> list[str]:
    """The Python packages of the generated stubs (`controlplane.proto`, ...)."""
    return sorted(
        ".".join([*PACKAGE.split("."), *init.parent.relative_to(out).parts])
        for init in out.rglob("__init__.py")
    )


def include_dirs() -> list[str]:
    """grpcio-tools' well-known types and googleapis-common-protos' google/rpc protos."""
    import google.rpc
    import grpc_tools

    googleapis = Path(next(iter(google.rpc.__path__))).parent.parent
    assert (googleapis / "google" / "rpc" / "status.proto").is_file(), googleapis
    return [str(Path(grpc_tools.__file__).parent / "_proto"), str(googleapis)]


def generate(wheel: Path | None = None) -> str:
    """Generate the stubs into OUT from `wheel`, else the installed pinned finsy, else its
    wheel (downloaded); returns where the .proto files came from."""
    from grpc_tools import protoc

    installed = None if wheel is not None else installed_finsy()
    with tempfile.TemporaryDirectory() as tmp:
        sources, out = Path(tmp) / "src", Path(tmp) / "out"
        sources.mkdir()
        out.mkdir()
        if installed is not None:
            copy_protos(installed, sources)
            origin = f"finsy {FINSY_VERSION} (installed)"
        else:
            wheel = wheel or finsy_wheel()
            extract(wheel, sources)
            origin = wheel.name
        args = ["protoc", f"-I{sources}", *(f"-I{d}" for d in include_dirs())]
        args += [f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"]
        if protoc.main([*args, *PROTOS]) != 0:
            raise SystemExit("gen_protos: protoc failed")
        for path in out.rglob("*.py*"):
            path.write_text(_SIBLING_IMPORT.sub(rf"\1 {PACKAGE}.p4.", path.read_text()))
        for folder in [out, *(p for p in out.rglob("*") if p.is_dir())]:
            (folder / "__init__.py").touch()
        (out / "__init__.py").write_text(
            f'"""Generated by scripts/gen_protos.py from {origin}: do not edit."""\n'
        )
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(out, OUT)
    return origin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finsy-wheel", type=Path, help="use this wheel instead of downloading")
    args = parser.parse_args()
    origin = generate(args.finsy_wheel)
    print(f"gen_protos: {OUT.relative_to(ROOT)} generated from {origin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
