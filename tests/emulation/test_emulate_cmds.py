"""`cassini emulate` and `cassini fabric run` flags: the poll interval, the schedulers'
help, and the progress lines printed without a terminal. No fabric is built."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from controlplane.counter_watch import DEFAULT_POLL_INTERVAL_S
from emulation.cli import build_parser, main
from emulation.cli.emulate_cmds import settings_from
from emulation.emulate.progress import PROGRESS_EVERY_S, ProgressLines
from emulation.emulate.runner import EmulateSettings, Live
from emulation.jobs.run_result import Progress
from scheduler.baselines import SCHEDULER_NAMES

EMULATE = ["emulate", "--out", "unused"]
FABRIC_RUN = ["fabric", "run", "--schedule", "unused.json", "--out", "unused"]


@pytest.mark.parametrize("command", [EMULATE, FABRIC_RUN], ids=["emulate", "fabric-run"])
@pytest.mark.parametrize(
    ("text", "seconds"), [("0.25", 0.25), ("2", 2.0), ("500ms", 0.5), ("1s", 1.0), ("60", 60.0)]
)
def test_poll_interval_is_read_in_seconds(command: list[str], text: str, seconds: float) -> None:
    args = build_parser().parse_args([*command, "--poll-interval", text])
    assert args.poll_interval == seconds


@pytest.mark.parametrize("command", [EMULATE, FABRIC_RUN], ids=["emulate", "fabric-run"])
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0", "must be > 0, got '0'"),
        ("-1", "'-1' is not a duration (e.g. 1s, 500ms, 2m)"),
        ("abc", "'abc' is not a duration (e.g. 1s, 500ms, 2m)"),
        ("0.05", "must be between 0.1 and 60 seconds, got '0.05'"),
        ("61", "must be between 0.1 and 60 seconds, got '61'"),
        ("nan", "'nan' is not a duration (e.g. 1s, 500ms, 2m)"),
    ],
)
def test_a_bad_poll_interval_is_one_line_naming_the_flag(
    command: list[str], text: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--poll-interval", text])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    prog = "cassini fabric run" if command[0] == "fabric" else "cassini emulate"
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [f"{prog}: error: argument --poll-interval: {says}"], err
    assert "Traceback" not in err


def test_emulate_polls_gnmi_at_the_pollers_default_unless_told() -> None:
    parser = build_parser()
    default = settings_from(parser.parse_args(EMULATE))
    assert default.poll_interval_s == DEFAULT_POLL_INTERVAL_S == EmulateSettings().poll_interval_s
    assert default.gnmi_polls is True
    given = settings_from(parser.parse_args([*EMULATE, "--poll-interval", "2s"]))
    assert given.poll_interval_s == 2.0 and given.gnmi_polls is True


def test_emulate_help_lists_every_scheduler_of_the_registry_and_given() -> None:
    # A fresh process: the help looks the registry up only when shown.
    out = subprocess.run(
        [sys.executable, "-m", "emulation", "emulate", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    text = " ".join(out.split())  # as one line, however argparse wrapped it
    listed = re.search(r"--schedulers SCHEDULERS comma-separated: (.*?) \(default", text)
    assert listed, out
    names = [n.strip().split(" ")[0] for n in listed[1].replace(", or ", ", ").split(",")]
    assert names == [*SCHEDULER_NAMES, "given"]
    assert f"(e.g. 0.5, 500ms; default {DEFAULT_POLL_INTERVAL_S:g})" in text


def _live(scheduler: str, elapsed: float, index: int = 0) -> Live:
    return Live(scheduler, index, 2, Progress(elapsed, int(elapsed), 100, 0))


def test_without_a_terminal_a_progress_line_comes_every_few_seconds() -> None:
    lines: list[str] = []
    show = ProgressLines(write=lines.append)
    # callbacks about once a second, never on a whole 10 s (the old rule printed only at 0)
    elapsed = [round(0.1 + 1.1 * k, 1) for k in range(28)]  # 0.1 .. 29.8 s
    for t in elapsed:
        show(_live("themis", t))
    printed = [float(line.rsplit(", ", 1)[1].removesuffix(" s")) for line in lines]
    # by hand: 0.1, then the first callback at least 5 s after the last line: 5.6, 11.1, ...
    assert PROGRESS_EVERY_S == 5.0
    assert printed == [0, 6, 11, 17, 22, 28], lines
    assert lines[0] == "[1/2] themis: 0/100 iterations, 0 ECN marks/s, 0 s"
    # the next scheduler starts its own lines at once; a new segment (time from 0) too
    show(_live("th+cassini", 0.2, index=1))
    assert lines[-1].startswith("[2/2] th+cassini: 0/100")
    show(_live("th+cassini", 3.0, index=1))
    show(_live("th+cassini", 0.1, index=1))
    assert len(lines) == 8 and lines[-1].endswith(" 0 s")  # 6 + 2: not at 3.0 s
