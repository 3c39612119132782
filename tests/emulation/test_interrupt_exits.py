"""Ctrl-C at any moment after `fabric X up` ends `cassini fabric run`: exit 130, one line.

A SIGINT about 0.2 s after the up line landed while the main thread closed a
P4Runtime session's gRPC channel (the run's telemetry setup): the exception
left from inside gRPC's close and left the channel half closed. The command
printed its line, and then the interpreter's last garbage collection closed
that channel again and waited for ever for the first close to finish; a
second signal was needed. The moments below cover the setup of the run's
pollers (the first second after the up line) and the run itself.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import CASSINI
from tests.helpers.leftovers import cleanup_all, leftovers

TOPOLOGY = "leaf-spine:2:1:2"
SCHEDULE = {"placement": {"vgg19-0": ["s01", "s02"], "resnet50-0": ["s03", "s04"]}}
# Generous: the exit itself takes a few seconds (replicas stopped, fabric torn down);
# only a hang, which lasts until a second signal, comes near it.
EXIT_WITHIN_S = 60.0
UP_WITHIN_S = 180.0


@pytest.mark.root
@pytest.mark.parametrize("after_s", [0.1, 0.2, 0.5, 1.0])
def test_ctrl_c_after_the_fabric_is_up_exits_130_and_leaves_nothing(
    after_s: float, tmp_path: Path
) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    out = tmp_path / "run"
    argv = [CASSINI, "fabric", "run", "--schedule", str(schedule), "-t", TOPOLOGY,
            "--iterations", "500", "--scale", "0.001", "--out", str(out)]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stderr is not None
    prefix = None
    err = ""
    never_up = threading.Timer(UP_WITHIN_S, process.kill)  # ours, by its pid
    never_up.start()
    try:
        for line in process.stderr:
            err += line
            found = re.match(r"fabric (cas\w+) up: 2 jobs", line)
            if found:
                prefix = found.group(1)
                break
        never_up.cancel()
        assert prefix is not None, err
        time.sleep(after_s)
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            _, rest = process.communicate(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGINT {after_s} s after the up line: no exit within {EXIT_WITHIN_S} s")
        took = time.monotonic() - sent
        err += rest
    finally:
        if process.poll() is None:
            process.kill()  # ours, by its pid
            process.wait()
        left = leftovers(prefix) if prefix else []
        if prefix:
            cleanup_all(prefix)
    assert process.returncode == 130, err
    assert took < EXIT_WITHIN_S
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    during = re.fullmatch(
        rf"cassini: interrupted: SIGINT during the run: replicas stopped, fabric down, "
        rf"{re.escape(str(out))} written with the \d+ iterations recorded so far",
        last,
    )
    before = last == f"cassini: interrupted: SIGINT: {out} not written"
    assert during or before, err
    assert (out / "summary.json").exists() == bool(during)
    assert left == []
