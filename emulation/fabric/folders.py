"""Where do a fabric's pcaps and switch log go while it comes up, and when do they appear?

`fabric up --log-dir D --pcap D` runs as root into folders a user names: a
link planted in D after the output check (`D/chip.log -> a root-owned
file`) was written through, the race won on the first try. So the fabric
never writes into D: each folder is a stage of its own (`new_stage`: made
by us, 0700), the switch log and the captures open their files there, and
once they have (bring-up done, or failed: the log says why) the stage is
published, renamed to D, replacing an old D with `--force`. The writers
keep their open files, so what they write after lands in D.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> folders = FabricFolders({root / "logs": "--log-dir"})
>>> stage = folders.open()[root / "logs"]
>>> _ = (stage / "chip.log").write_text("ready")
>>> folders.publish()
[]
>>> (root / "logs" / "chip.log").read_text()
'ready'
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from topologies.outputs import new_stage, publish


class FabricFolders:
    """The fabric's results folders {final path: its flag}, staged until `publish`."""

    def __init__(self, flags: Mapping[Path, str]) -> None:
        self.flags = dict(flags)
        self._stages: dict[Path, Path] = {}

    def open(self) -> dict[Path, Path]:
        """A stage per folder ({final: stage}); the flag's one line when one cannot be made."""
        for final, flag in self.flags.items():
            if final not in self._stages:
                self._stages[final] = new_stage(final, flag)
        return dict(self._stages)

    def stage_of(self, final: Path | None) -> Path | None:
        """Where `final`'s files are written until it is published."""
        return None if final is None else self._stages.get(final, final)

    def publish(self) -> list[str]:
        """Rename every stage to its folder (idempotent); one line per folder that could
        not be (its stage is removed), naming the flag and the cause."""
        problems = []
        for final, stage in list(self._stages.items()):
            del self._stages[final]
            try:
                publish(stage, final)
            except OSError as err:
                shutil.rmtree(stage, ignore_errors=True)
                problems.append(f"{self.flags[final]} {final}: not written ({err.strerror or err})")
        return problems
