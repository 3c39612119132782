"""`cassini bmv2 queues --tm-config`: per-class queue depths for bmv2's priority queues,
as recorded simple_switch_CLI lines (no bmv2 here), and bmv2's --priority-queues flag."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import controlplane.bmv2
from emulation.cli import main
from emulation.fabric.bmv2_switch import BMV2_PRIORITY_QUEUES, Bmv2Switch

TM = """
classes:
  7: {queue_cells: 800}
  5: {queue_cells: 2000, pfc: {enabled: false}}
  1: {wred: {min_cells: 10, max_cells: 20, max_prob_percent: 5}}
"""


def test_class_depths_follow_the_port_lines_and_are_sent_as_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tm = tmp_path / "tm.yaml"
    tm.write_text(TM)
    assert main(["bmv2", "queues", "--print", "--scale", "0.01"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(["bmv2", "queues", "--print", "--scale", "0.01", "--tm-config", str(tm)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[: len(plain)] == plain  # the ports' own lines unchanged, first
    extra = lines[len(plain) :]
    ports = sorted({int(line.split()[2]) for line in plain})
    assert len(ports) == 72
    # 800 cells x 80 B / 1500 B = 42.7 -> 43 packets; 2000 cells -> 106.7 -> 107.
    # Class 1 sets no depth of its own: no line.
    expected = [f"set_queue_depth {d} {p} {c}" for p in ports for c, d in ((5, 107), (7, 43))]
    assert extra == expected
    sent: list[tuple[list[str], int]] = []
    monkeypatch.setattr(controlplane.bmv2, "run_cli", lambda c, port: sent.append((list(c), port)))
    args = ["bmv2", "queues", "--scale", "0.01", "--tm-config", str(tm), "--thrift-port", "9191"]
    assert main(args) == 0
    assert sent == [(lines, 9191)]
    assert "and 144 class queue depths" in capsys.readouterr().out


def test_a_bad_class_in_the_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tm = tmp_path / "tm.yaml"
    tm.write_text("classes:\n  9: {queue_cells: 10}\n")
    code = main(["bmv2", "queues", "--print", "--tm-config", str(tm)])
    err = capsys.readouterr().err
    assert code != 0 and "class 9 must be 0..7" in err and "Traceback" not in err


@pytest.mark.parametrize("queues", [0, BMV2_PRIORITY_QUEUES])
def test_bmv2_gets_priority_queues_only_when_asked(queues: int) -> None:
    switch = Bmv2Switch.__new__(Bmv2Switch)  # no Mininet node: only what command() reads
    switch.device_id, switch.grpc_address, switch.log_file = 1, "127.0.0.1:9559", None
    switch.thrift_port, switch.cable_interfaces, switch.ports = 9090, {}, {}
    switch.log_level, switch.queue_commands = "info", ()
    if queues:
        switch.priority_queues = queues
    target = switch.command()[switch.command().index("--") + 1 :]
    expected = ["--grpc-server-addr", "127.0.0.1:9559", "--cpu-port", "255"]
    assert target == expected + (["--priority-queues", "8"] if queues else [])
    assert switch.output_streams()["stderr"] == subprocess.STDOUT
