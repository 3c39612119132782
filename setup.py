"""The one build step pyproject.toml cannot declare: the P4Runtime stubs.

`controlplane/proto/` is generated, never committed (scripts/gen_protos.py
says from what). Building the Python modules (`build_py`, which a wheel, an
sdist's wheel and an editable install all run) generates it first and adds its
packages, which did not exist when setuptools collected the packages; so `pip
install .` or `pip wheel .` from a clean checkout ships the stubs. Everything
else about the package is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _gen_protos() -> ModuleType:
    """scripts/gen_protos.py, loaded from this tree (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("gen_protos", HERE / "scripts" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithProtos(build_py):
    """setuptools' build_py, after generating the stubs into the source tree."""

    def run(self) -> None:
        gen = _gen_protos()
        origin = gen.generate()
        self.announce(f"generated {gen.OUT.relative_to(HERE)} from {origin}", level=2)
        for package in gen.packages():
            if package not in self.packages:
                self.packages.append(package)
            self.package_data.setdefault(package, []).append("*.pyi")  # their message types
        self.__dict__.pop("data_files", None)  # computed again, with the new packages
        super().run()


setup(cmdclass={"build_py": BuildPyWithProtos})
