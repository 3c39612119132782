"""`cassini program`, `cassini ecn watch`, `cassini tofino artifacts`, `cassini bmv2 queues`."""

from __future__ import annotations

import csv
import json
import threading
import time

import pytest

from emulation.cli import main
from topologies.chip_mapping import forwarding_entries, map_to_chip
from topologies.library import load_topology


@pytest.fixture
def device_id() -> int:
    return 3  # not the CLI's default, so the tests see --device-id reach the device


def test_program_pushes_then_reconciles_idempotently(device, capsys):
    topo = load_topology("cassini-testbed")
    n_fwd = len(forwarding_entries(topo, map_to_chip(topo)))
    argv = [
        "program",
        "--topology",
        "cassini-testbed",
        "--grpc",
        device.address,
        "--device-id",
        "3",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pushed the Cassini pipeline" in out
    assert f"CassiniIngress.logical_forward: changed +{n_fwd} inserted" in out
    assert "CassiniEgress.wred_profile: changed +72 inserted" in out
    assert (
        "+ logical_forward ingress_port=1 dst_mac=02:00:00:00:00:02 -> set_egress_port(port=" in out
    )
    assert len(device.state.forward) == n_fwd and len(device.state.wred) == 72

    assert main(argv) == 0
    assert "nothing to change" in capsys.readouterr().out

    new_thresholds = ["--wred-min", "300", "--wred-max", "600", "--wred-prob", "10", "--json"]
    assert main([*argv, *new_thresholds]) == 1  # installed thresholds change only when asked
    capsys.readouterr()
    assert main([*argv, *new_thresholds, "--force-thresholds"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changes"] == {
        "CassiniEgress.wred_profile": {"insert": 0, "modify": 72, "delete": 0}
    }
    assert report["pipeline_pushed"] is False and report["installed_before"] == n_fwd + 72
    assert {(w.min_cells, w.max_cells, w.max_prob_percent) for w in device.state.wred.values()} == {
        (300, 600, 10)
    }


def test_program_dry_run_writes_nothing(device, capsys):
    argv = ["program", "--grpc", device.address, "--device-id", "3", "--dry-run", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"]["reached"] is True and report["dry_run"] is True
    assert report["changes"]["CassiniEgress.wred_profile"]["insert"] == 72
    assert device.state.forward == {} and device.state.wred == {}


def test_program_refuses_to_overwrite_installed_thresholds_unasked(device, capsys):
    argv = ["program", "--grpc", device.address, "--device-id", "3"]
    assert main([*argv, "--wred-min", "152", "--wred-max", "304"]) == 0  # a fabric's, scaled
    capsys.readouterr()
    change = "72 ports: min 152 / max 304 cells, 100 % -> min 1000 / max 2000 cells, 100 %"
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"cassini: error: device at {device.address} holds other WRED thresholds, left "
        f"unchanged: {change}; pass --force-thresholds to change them"
    ]
    assert {(w.min_cells, w.max_cells) for w in device.state.wred.values()} == {(152, 304)}
    assert main([*argv, "--dry-run"]) == 0
    assert f"installed WRED thresholds would change (needs --force-thresholds): {change}" in (
        capsys.readouterr().out
    )
    assert main([*argv, "--force-thresholds"]) == 0
    assert f"installed WRED thresholds changed: {change}" in capsys.readouterr().out
    assert {(w.min_cells, w.max_cells) for w in device.state.wred.values()} == {(1000, 2000)}


def test_program_dry_run_reads_without_taking_primary(device, capsys):
    from controlplane.session import P4RuntimeSession

    argv = ["program", "--grpc", device.address, "--device-id", "3"]
    assert main(argv) == 0
    capsys.readouterr()
    # The live controller holds election id 1, the dry run's default: arbitrating would
    # collide with it (and a higher id would take primary from it).
    with P4RuntimeSession.connect(device.address, 3, (0, 1)) as controller:
        assert controller.is_primary
        assert main([*argv, "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "not reachable" not in out and "nothing to change" in out
        assert main([*argv, "--dry-run", "--election-id", "9"]) == 0
        capsys.readouterr()
        assert controller.is_primary


def test_program_dry_run_reports_a_failure_after_connecting(device, capsys, monkeypatch):
    from controlplane.session import ConnectionFailed, P4RuntimeSession

    def failing_read(self, table=None):
        raise ConnectionFailed(
            f"P4Runtime server at {self.address}: Read failed: RESOURCE_EXHAUSTED"
        )

    argv = ["program", "--grpc", device.address, "--device-id", "3"]
    assert main(argv) == 0
    capsys.readouterr()
    monkeypatch.setattr(P4RuntimeSession, "read_table", failing_read)
    assert main([*argv, "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert "not reachable" not in captured.out
    assert captured.err.strip().splitlines() == [
        f"cassini: error: P4Runtime server at {device.address}: Read failed: RESOURCE_EXHAUSTED"
    ]


def test_program_bmv2_thresholds_in_packets(device, capsys, tmp_path):
    # --bmv2 pushes a compiled JSON; the software target takes any device config.
    config = tmp_path / "cassini.json"
    config.write_text('{"program": "cassini.p4"}')
    argv = ["program", "--grpc", device.address, "--device-id", "3", "--bmv2"]
    assert main([*argv, "--device-config", str(config)]) == 0
    assert "WRED min=54 max=107 packets" in capsys.readouterr().out
    assert {w.min_cells for w in device.state.wred.values()} == {54}


def test_unreachable_device_is_one_line(capsys):
    code = main(["program", "--grpc", "127.0.0.1:1", "--device-id", "1", "--timeout", "0.3"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().count("\n") == 0 and "127.0.0.1:1" in err and "Traceback" not in err
    # A dry run needs no device.
    assert main(["program", "--grpc", "127.0.0.1:1", "--dry-run", "--timeout", "0.3"]) == 0
    assert "not reachable; plan against an empty device" in capsys.readouterr().out


def test_bad_input_is_named(capsys):
    assert main(["program", "--topology", "cassini-testbd", "--dry-run"]) == 2
    assert "Did you mean 'cassini-testbed'" in capsys.readouterr().err
    assert main(["program", "--dry-run", "--wred-min", "3000", "--wred-max", "2000"]) == 2
    assert "wred.max_cells: 2000 must be between min_cells (3000)" in capsys.readouterr().err
    assert main(["ecn", "watch", "--interval", "fast"]) == 2
    assert "--interval: 'fast' is not a duration" in capsys.readouterr().err


def test_ecn_watch_records_marks_per_port_and_link(device, tmp_path, capsys):
    topo = load_topology("cassini-testbed")
    chip = map_to_chip(topo)
    port = chip.link_ports[("tor2", "agg1")]
    assert main(["program", "--grpc", device.address, "--device-id", "3"]) == 0
    capsys.readouterr()

    def traffic():
        # Start once the watch holds the device (its first snapshot follows at once).
        deadline = time.monotonic() + 10
        while device.device.primary_election_id() != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        for _ in range(6):
            time.sleep(0.1)
            device.state.counter("CassiniEgress.ecn_marked")[port] += (5, 7500)
            device.state.counter("CassiniEgress.port_tx")[port] += (50, 75000)

    feeder = threading.Thread(target=traffic)
    feeder.start()
    out_file = tmp_path / "ecn.csv"
    code = main(
        [
            "ecn",
            "watch",
            "--grpc",
            device.address,
            "--device-id",
            "3",
            "--election-id",
            "2",
            "--interval",
            "200ms",
            "--duration",
            "1.6s",
            "--topology",
            "cassini-testbed",
            "--no-gnmi",  # a bare P4Runtime service: no gNMI beside it
            "--out",
            str(out_file),
        ]
    )
    feeder.join()
    assert code == 0
    printed = capsys.readouterr().out
    assert "tor2->agg1" in printed
    with out_file.open() as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["ecn_marked_packets"]) for r in rows if r["port"] == str(port)) == 30
    with (tmp_path / "ecn-links.csv").open() as fh:
        links = list(csv.DictReader(fh))
    # Every link has a row in every interval (idle ones with zeros); only tor2->agg1 moved.
    assert {r["link"] for r in links if int(r["tx_packets"])} == {"tor2->agg1"}
    assert len({r["link"] for r in links}) == 72  # one direction per chip port


def test_tofino_artifacts_and_bmv2_queue_commands(tmp_path, capsys):
    assert main(["tofino", "artifacts", "--out", str(tmp_path), "--wred-max", "2500"]) == 0
    assert "bfshell -b cassini_tm.py" in capsys.readouterr().out
    assert (tmp_path / "chassis_config.pb.txt").read_text().count("singleton_ports {") == 72
    assert "WRED_MAX_CELLS = 2500" in (tmp_path / "cassini_tm.py").read_text()
    assert main(["bmv2", "queues", "--print", "--scale", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 144 and lines[0].startswith("set_queue_depth 1067 ")


@pytest.mark.parametrize("command", [["bmv2", "queues", "--print"], ["fabric", "up"], ["emulate", "--out", "x"]])
def test_every_scaling_command_takes_one_scale_flag_with_one_default_and_range(command, capsys):
    from emulation.cli import build_parser
    from emulation.fabric.scaling import DEFAULT_SCALE

    assert build_parser().parse_args(command).scale == DEFAULT_SCALE
    for bad in ("0", "2", "nan", "-1"):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--scale", bad])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "--scale" in err and "Traceback" not in err


def test_output_piped_into_a_closed_reader_ends_quietly():
    # `cassini ... | head` must not print a traceback when the reader leaves
    # early. The reading end is closed before the child has started, so its
    # first write is certain to hit a broken pipe.
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "emulation", "topo", "show", "--links"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141
    assert "Traceback" not in err and "BrokenPipe" not in err
