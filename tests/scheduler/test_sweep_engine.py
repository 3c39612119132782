"""The sweep engine's Dask cluster: only its owner gets in; addresses and dashboards in one line."""

from __future__ import annotations

import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Any

import pytest

from emulation.cli import main as cli_main
from scheduler.sweep.engine import DaskEngine, plain_address_warning, scheduler_address
from topologies.errors import UserInputError


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[1].rpartition(":")
    return host.strip("[]"), int(port)


def _handshake_without_a_certificate(address: str) -> str:
    """TLS to `address` as a client that skips checking the server and shows no certificate
    (what another local user can do): the server's answer."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection(_host_port(address), timeout=5) as raw,
            ctx.wrap_socket(raw) as conn,
        ):
            conn.sendall(b"\0" * 16)
            return f"answered {conn.recv(16)!r}"
    except (ssl.SSLError, OSError) as err:
        return f"refused: {err}"


async def _intrude(address: str) -> list[str]:
    """Open a Dask comm to `address` as another local user could (no credentials, someone
    else's, or plain TCP) and ask for its identity: how each attempt ended."""
    from distributed.comm import connect
    from distributed.security import Security

    ends = []
    attempts = [(address, {}), (address, Security.temporary().get_connection_args("client")),
                (address.replace("tls://", "tcp://"), {})]  # fmt: skip
    for target, args in attempts:
        try:
            comm = await connect(target, timeout=5, **args)
            await comm.write({"op": "identity"})
            ends.append(f"answered {await comm.read()}")
            await comm.close()
        except Exception as err:  # Dask's own errors: TypeError, CommClosedError, OSError
            ends.append(f"refused ({type(err).__name__})")
    return ends


@pytest.mark.timeout(180)
def test_the_local_cluster_runs_the_owners_cells_and_nobody_elses_code() -> None:
    import asyncio

    from distributed import Client

    with DaskEngine(workers=1, dashboard_address=None) as engine:
        scheduler = engine.cluster.scheduler_address
        assert scheduler.startswith("tls://127.0.0.1:")
        assert sorted(r for _, r, _ in engine.run(abs, [-1, -2])) == [1, 2]  # its own client
        # the reported attack: Client('tcp://127.0.0.1:PORT').run(os.getuid) gave (0, 0)
        with pytest.raises(OSError):
            Client(scheduler.replace("tls://", "tcp://"), timeout="5s").run(os.getuid)
        info = engine.client.scheduler_info(n_workers=-1)["workers"]
        addresses = [scheduler, *info, *(w["nanny"] for w in info.values())]
        assert len(addresses) == 3 and all(a.startswith("tls://127.0.0.1:") for a in addresses)
        for address in addresses:
            ends = asyncio.run(_intrude(address))
            assert all(e.startswith("refused") for e in ends), (address, ends)
            answer = _handshake_without_a_certificate(address)
            assert answer.startswith("refused"), answer  # no certificate, no answer
        scratch = Path(engine.scratch or "")
        info_s = os.lstat(scratch)
        assert stat.S_ISDIR(info_s.st_mode) and info_s.st_uid == os.geteuid()
        assert stat.S_IMODE(info_s.st_mode) == 0o700
        assert sorted(r for _, r, _ in engine.run(abs, [-3])) == [3]  # still works
    assert not scratch.exists()


def _tls_files(folder: Path) -> dict[str, str]:
    """A CA, certificate and key in owner-only files, as a user would set up a remote cluster."""
    from distributed.security import Security

    made = Security.temporary()
    paths = {}
    for name, text in (("ca", made.tls_ca_file), ("cert", made.tls_client_cert),
                       ("key", made.tls_client_key)):  # fmt: skip
        path = folder / f"{name}.pem"
        path.write_text(text)
        path.chmod(0o600)
        paths[name] = str(path)
    return paths


@pytest.mark.timeout(180)
def test_a_tls_address_uses_daskss_tls_configuration(tmp_path: Path) -> None:
    import dask
    from distributed import LocalCluster
    from distributed.security import Security

    files = _tls_files(tmp_path)
    security = Security(tls_ca_file=files["ca"], tls_scheduler_cert=files["cert"],
                        tls_scheduler_key=files["key"], tls_worker_cert=files["cert"],
                        tls_worker_key=files["key"], tls_client_cert=files["cert"],
                        tls_client_key=files["key"], require_encryption=True)  # fmt: skip
    cluster = LocalCluster(n_workers=1, processes=False, threads_per_worker=1, protocol="tls://",
                           security=security, host="127.0.0.1", dashboard_address=None)  # fmt: skip
    try:
        address = cluster.scheduler_address
        with pytest.raises(UserInputError, match=r"no TLS settings .*distributed.comm.tls.ca-file"):
            DaskEngine(address=address)
        config = {"distributed.comm.tls.ca-file": files["ca"],
                  "distributed.comm.tls.client.cert": files["cert"],
                  "distributed.comm.tls.client.key": files["key"]}  # fmt: skip
        with dask.config.set(config), DaskEngine(address=address) as engine:
            assert sorted(r for _, r, _ in engine.run(abs, [-4, -5])) == [4, 5]
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10.0.0.5:8786", "tcp://10.0.0.5:8786"),
        ("tls://head-node.lab:8786", "tls://head-node.lab:8786"),
        ("tls://[::1]:8786", "tls://[::1]:8786"),
    ],
)
def test_scheduler_addresses_are_read_with_dasks_default_protocol(
    text: str, canonical: str
) -> None:
    assert scheduler_address(text) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("junk", "no port after the host"),
        ("", "'' is not a host name"),
        ("foo://127.0.0.1:1", "unknown protocol 'foo://'; use tls:// or tcp://"),
        ("::::", "':::' is not a host name or address"),
        ("tls://127.0.0.1:99999", "port 99999 is outside 1 to 65535"),
        ("tls://[fe80::zz]:1", "'[fe80::zz]' is not a host name or address"),
        ("tcp://999.1.1.1:1", "'999.1.1.1' is not a host name"),
    ],
)
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_a_bad_address_is_one_line(
    command: str, text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "s.yaml"
    config.write_text("seeds: 1\n")
    argv = {
        "sweep": ["sweep", "-c", str(config), "-o", str(tmp_path / "o"), "--address", text],
        "reproduce": [
            "reproduce",
            "two-vgg19",
            "-o",
            str(tmp_path / "o"),
            "--address",
            text,
            "--columns",
            "simulator",
        ],  # fmt: skip
    }[command]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--address" in err and message in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["nonsense", "127.0.0.1:99999", ":8787"])
def test_a_bad_dashboard_is_refused_before_anything_runs(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "s.yaml"
    config.write_text("seeds: 1\n")
    with pytest.raises(SystemExit) as stop:
        cli_main(["sweep", "-c", str(config), "-o", str(tmp_path / "o"), "--dashboard", text])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"--dashboard: '{text}'" in err.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists()


def test_root_is_warned_about_a_scheduler_without_tls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert plain_address_warning("tls://10.0.0.5:8786", 0) is None
    assert plain_address_warning("tcp://10.0.0.5:8786", 1000) is None
    warning = plain_address_warning("10.0.0.5:8786", 0)
    assert warning is not None and "not TLS" in warning and "\n" not in warning
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    seen: list[Any] = []

    def no_engine(*args: Any, **kwargs: Any) -> Any:
        seen.append(args)
        raise UserInputError("stop here")

    monkeypatch.setattr("scheduler.sweep.make_engine", no_engine)
    config = tmp_path / "s.yaml"
    config.write_text("seeds: 1\n")
    argv = ["sweep", "-c", str(config), "-o", str(tmp_path / "o"), "--address", "tcp://h:8786"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("warning: --address tcp://h:8786 is not TLS") and len(err) == 2
    assert seen and seen[0][1] == "tcp://h:8786"
