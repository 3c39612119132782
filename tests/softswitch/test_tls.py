"""TLS on both sides: the switch's P4Runtime and gNMI port, the session, the reader and the CLI.

A CA, a server certificate (127.0.0.1 and localhost) and client
certificates are made here with `cryptography`; a second CA stands for
someone the switch does not trust.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pygnmi.client import gNMIclient

from controlplane.entries import TableEntry, Update, UpdateType
from controlplane.gnmi import GnmiError, GnmiReader
from controlplane.p4info import load_p4info
from controlplane.proto.p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from controlplane.session import ConnectionFailed, P4RuntimeSession
from controlplane.tls import ServerTlsSettings, TlsSettings
from emulation.cli import main
from emulation.fabric.netns import NetnsLab
from emulation.softswitch.p4runtime_service import RunningServer, is_loopback_address, serve
from emulation.softswitch.port_stats import PortCounters, port_counters
from emulation.softswitch.switch import READY_PATTERN
from tests.helpers import CASSINI
from tests.helpers.waiting import WAIT_S
from topologies.errors import UserInputError

TIMEOUT = 2.0


# --- certificates made in the test -----------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_ca: Path  # a CA nobody here trusts
    stranger_cert: Path  # a client certificate it signed
    stranger_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _make_leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common_name: str,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = _make_ca("cassini test CA")
    server = _make_leaf(
        ca,
        "switch",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client = _make_leaf(ca, "controller", ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _make_ca("someone else's CA")
    stranger_client = _make_leaf(stranger, "intruder", ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(
        ca=_write_cert(d / "ca.pem", ca[0]),
        server_cert=_write_cert(d / "server.pem", server[0]),
        server_key=_write_key(d / "server.key", server[1]),
        client_cert=_write_cert(d / "client.pem", client[0]),
        client_key=_write_key(d / "client.key", client[1]),
        stranger_ca=_write_cert(d / "stranger-ca.pem", stranger[0]),
        stranger_cert=_write_cert(d / "stranger.pem", stranger_client[0]),
        stranger_key=_write_key(d / "stranger.key", stranger_client[1]),
    )


def server_tls(pki: Pki, client_auth: bool = False) -> ServerTlsSettings:
    return ServerTlsSettings.from_files(
        str(pki.server_cert),
        str(pki.server_key),
        str(pki.ca) if client_auth else None,
        require_client_auth=client_auth,
    )


def client_tls(pki: Pki, with_cert: bool = False, ca: Path | None = None) -> TlsSettings:
    return TlsSettings.from_files(
        str(ca or pki.ca),
        str(pki.client_cert) if with_cert else None,
        str(pki.client_key) if with_cert else None,
    )


def fake_ports() -> list[PortCounters]:
    # Built from statistics, as the switch builds them: new counters need no edit here.
    stats = {"rx_packets": {1: 25}, "rx_bytes": {1: 5000}}
    return port_counters(stats, {1: "veth1", 2: "veth2"}, [1, 2])


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[RunningServer]:
    with serve(1, tls=server_tls(pki), port_counters=fake_ports) as running:
        yield running


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[RunningServer]:
    with serve(1, tls=server_tls(pki, client_auth=True), port_counters=fake_ports) as running:
        yield running


def entry(port: int) -> TableEntry:
    return TableEntry(
        "logical_forward",
        {"ingress_port": port, "dst_mac": "02:00:00:00:00:02"},
        "set_egress_port",
        {"port": 2},
    )


def program_and_read(session: P4RuntimeSession) -> list[TableEntry]:
    session.set_pipeline(load_p4info())
    session.write([Update(UpdateType.INSERT, entry(1))])
    return session.read_table("logical_forward")


# --- P4Runtime over TLS -----------------------------------------------------------------


def test_session_writes_and_reads_over_tls(pki: Pki, tls_server: RunningServer) -> None:
    with P4RuntimeSession.connect(tls_server.address, 1, tls=client_tls(pki)) as session:
        assert session.is_primary
        (read,) = program_and_read(session)
    assert read.match["ingress_port"] == 1


def test_localhost_name_matches_the_certificate(pki: Pki, tls_server: RunningServer) -> None:
    port = tls_server.address.rsplit(":", 1)[1]
    with P4RuntimeSession.connect(f"localhost:{port}", 1, tls=client_tls(pki)) as session:
        assert session.is_primary


def test_an_insecure_client_is_refused(tls_server: RunningServer) -> None:
    with pytest.raises(ConnectionFailed, match="cannot reach"):
        P4RuntimeSession.connect(tls_server.address, 1, timeout=TIMEOUT)
    with grpc.insecure_channel(tls_server.address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=TIMEOUT)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_server_signed_by_another_ca_is_refused(pki: Pki, tls_server: RunningServer) -> None:
    untrusting = client_tls(pki, ca=pki.stranger_ca)
    with pytest.raises(ConnectionFailed, match="over TLS") as raised:
        P4RuntimeSession.connect(tls_server.address, 1, timeout=TIMEOUT, tls=untrusting)
    assert len(str(raised.value).splitlines()) == 1


def test_a_tls_client_of_a_plaintext_server_is_told_tls_failed(pki: Pki) -> None:
    with serve(1) as plain, pytest.raises(ConnectionFailed, match="over TLS"):
        P4RuntimeSession.connect(plain.address, 1, timeout=TIMEOUT, tls=client_tls(pki))


def test_client_auth_refuses_clients_without_a_trusted_certificate(
    pki: Pki, mtls_server: RunningServer
) -> None:
    with pytest.raises(ConnectionFailed, match="requires client certificates"):
        P4RuntimeSession.connect(mtls_server.address, 1, timeout=TIMEOUT, tls=client_tls(pki))
    stranger = TlsSettings.from_files(str(pki.ca), str(pki.stranger_cert), str(pki.stranger_key))
    with pytest.raises(ConnectionFailed):
        P4RuntimeSession.connect(mtls_server.address, 1, timeout=TIMEOUT, tls=stranger)
    with P4RuntimeSession.connect(
        mtls_server.address, 1, tls=client_tls(pki, with_cert=True)
    ) as session:
        (read,) = program_and_read(session)
    assert read.action.endswith("set_egress_port")


# --- gNMI on the same port ---------------------------------------------------------------


def test_gnmi_reader_over_tls(pki: Pki, mtls_server: RunningServer) -> None:
    with GnmiReader(mtls_server.address, TIMEOUT, client_tls(pki, with_cert=True)) as reader:
        interfaces = {i.name: i for i in reader.read()}
    assert interfaces["veth1"].counters["in-unicast-pkts"] == 25
    assert interfaces["veth1"].port == 1
    with (
        GnmiReader(mtls_server.address, 0.5, client_tls(pki)) as reader,
        pytest.raises(GnmiError, match="over TLS"),
    ):
        reader.read()


def test_pygnmi_client_over_tls(
    pki: Pki, tls_server: RunningServer, mtls_server: RunningServer
) -> None:
    leaf = "/interfaces/interface[name=veth1]/state/counters/in-unicast-pkts"
    for running, mutual in ((tls_server, False), (mtls_server, True)):
        host, port = running.address.rsplit(":", 1)
        # pygnmi: path_cert alone is the CA to trust; with path_root and path_key it is mutual TLS.
        files = (
            {
                "path_root": str(pki.ca),
                "path_cert": str(pki.client_cert),
                "path_key": str(pki.client_key),
            }
            if mutual
            else {"path_cert": str(pki.ca)}
        )
        with gNMIclient(target=(host, int(port)), gnmi_timeout=5, **files) as client:
            got = client.get(path=[leaf])
        assert got["notification"][0]["update"][0]["val"] == 25


# --- settings and their errors ------------------------------------------------------------


def test_missing_or_wrong_pem_files_are_one_line(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(UserInputError, match=f"cannot read CA certificate {missing}: No such file"):
        TlsSettings.from_files(ca_cert=str(missing))
    not_pem = tmp_path / "ca.der"
    not_pem.write_bytes(b"\x30\x82")
    with pytest.raises(UserInputError, match="is not a PEM file"):
        TlsSettings.from_files(ca_cert=str(not_pem))
    with pytest.raises(UserInputError, match="cannot read server private key"):
        ServerTlsSettings.from_files(str(pki.server_cert), str(missing))
    with pytest.raises(UserInputError, match="needs its private key"):
        TlsSettings.from_files(str(pki.ca), cert=str(pki.client_cert))
    with pytest.raises(UserInputError, match="client authentication needs the CA"):
        ServerTlsSettings.from_files(str(pki.server_cert), str(pki.server_key), None, True)
    with pytest.raises(UserInputError, match=f"server key {pki.client_key} is not the private key"):
        ServerTlsSettings.from_files(str(pki.server_cert), str(pki.client_key))
    with pytest.raises(UserInputError, match="holds no readable certificate"):
        ServerTlsSettings.from_files(str(pki.server_key), str(pki.server_key))


def test_cli_tls_flag_errors_name_the_flag(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.pem")
    cases = [
        (["program", "--cacert", str(pki.ca)], "--cacert without --ssl"),
        (["program", "--ssl", "--cacert", missing], f"cannot read --cacert {missing}"),
        (["program", "--ssl", "--cert", str(pki.client_cert)], "--cert needs --private-key"),
        (["ecn", "watch", "--ssl", "--private-key", missing], "--private-key needs --cert"),
        (
            [
                "program",
                "--ssl",
                "--cert",
                str(pki.client_cert),
                "--private-key",
                str(pki.server_key),
            ],
            f"--private-key {pki.server_key} is not the private key of --cert {pki.client_cert}",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_cli_server_tls_flag_errors_name_the_flag(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.pem")
    base = ["switch", "serve", "-i", "1@lo", "--grpc-server-addr", "127.0.0.1:0"]
    cases = [
        (["--grpc-server-cert", str(pki.server_cert)], "--grpc-server-cert without --grpc-server-ssl"),
        (["--grpc-server-ssl", "--grpc-server-cert", str(pki.server_cert)], "needs --grpc-server-key"),
        (
            ["--grpc-server-ssl", "--grpc-server-cert", missing, "--grpc-server-key", missing],
            f"cannot read --grpc-server-cert {missing}",
        ),
        (
            ["--grpc-server-ssl", "--grpc-server-cert", str(pki.server_cert),
             "--grpc-server-key", str(pki.server_key), "--grpc-server-with-client-auth"],
            "--grpc-server-with-client-auth needs --grpc-server-cacert",
        ),
        (
            ["--grpc-server-ssl", "--grpc-server-cert", str(pki.server_cert),
             "--grpc-server-key", str(pki.client_key)],
            f"--grpc-server-key {pki.client_key} is not the private key of --grpc-server-cert",
        ),
    ]  # fmt: skip
    for extra, message in cases:
        result = subprocess.run(
            [CASSINI, *base, *extra], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines


# --- the warning for a plaintext port beyond loopback --------------------------------------


def test_plaintext_beyond_loopback_is_warned_once(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.INFO, logger="emulation.softswitch.p4runtime_service"):
        with serve(1, "0.0.0.0:0"):
            pass
        (warning,) = warnings()
        assert "no TLS" in warning and "0.0.0.0:" in warning
        caplog.clear()
        with serve(1, "0.0.0.0:0", tls=server_tls(pki)), serve(2, "127.0.0.1:0"):
            pass
        assert warnings() == []


def test_loopback_addresses() -> None:
    assert all(
        map(is_loopback_address, ["127.0.0.1:9559", "127.1.2.3:1", "[::1]:0", "localhost:1"])
    )
    assert not any(map(is_loopback_address, ["0.0.0.0:9559", "[::]:1", ":9559", "10.0.0.1:1"]))


# --- cassini switch serve --grpc-server-ssl with real interfaces, cassini program --ssl ----


@pytest.mark.root
def test_cli_serve_with_tls_and_program_with_ssl(
    pki: Pki, lab: NetnsLab, capsys: pytest.CaptureFixture[str]
) -> None:
    veths = []
    for i in (1, 2):
        ns = lab.namespace(f"h{i}")
        veths.append(lab.veth(f"h{i}", f"s{i}", ns_a=ns)[1])
    process = lab.popen(
        None,
        [
            CASSINI, "switch", "serve", "--device-id", "4",
            "-i", f"1@{veths[0]}", "-i", f"2@{veths[1]}",
            "--grpc-server-addr", "127.0.0.1:0",
            "--grpc-server-ssl",
            "--grpc-server-cert", str(pki.server_cert),
            "--grpc-server-key", str(pki.server_key),
            "--grpc-server-cacert", str(pki.ca),
            "--grpc-server-with-client-auth",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stderr is not None
    log_lines: list[str] = []
    address = None
    while address is None:
        line = process.stderr.readline()
        if not line:
            break
        log_lines.append(line)
        match = READY_PATTERN.search(line)
        address = match.group(1) if match else None
    try:
        assert address, "".join(log_lines)
        assert any("TLS, client certificates required" in line for line in log_lines)
        base = ["program", "--grpc", address, "--device-id", "4", "--timeout", str(TIMEOUT)]
        assert main(base) == 1  # plaintext: refused
        assert f"cannot reach a P4Runtime server at {address}" in capsys.readouterr().err
        assert main([*base, "--ssl", "--cacert", str(pki.ca)]) == 1  # no client certificate
        assert "over TLS" in capsys.readouterr().err
        tls = ["--ssl", "--cacert", str(pki.ca), "--cert", str(pki.client_cert)]
        assert main([*base, *tls, "--private-key", str(pki.client_key)]) == 0
        out = capsys.readouterr().out
        assert "pushed the Cassini pipeline" in out
        with P4RuntimeSession.connect(
            address, 4, None, tls=client_tls(pki, with_cert=True)
        ) as reader:
            assert len(reader.read_table("logical_forward")) > 0
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
    rest = process.stderr.read()
    assert "Traceback" not in rest
