"""TLS flags: simple_switch_grpc's on the switch, p4runtime-shell's on its clients."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from topologies.errors import UserInputError

if TYPE_CHECKING:
    from controlplane.tls import ServerTlsSettings, TlsSettings


def add_tls_server_arguments(parser: argparse.ArgumentParser) -> None:
    """TLS flags of a P4Runtime server, named as simple_switch_grpc names them."""
    group = parser.add_argument_group("TLS (flags of simple_switch_grpc)")
    group.add_argument(
        "--grpc-server-ssl",
        action="store_true",
        help="serve P4Runtime and gNMI over TLS only (needs --grpc-server-cert and -key)",
    )
    group.add_argument("--grpc-server-cert", metavar="PEM", help="server certificate (chain)")
    group.add_argument("--grpc-server-key", metavar="PEM", help="server private key")
    group.add_argument(
        "--grpc-server-cacert",
        metavar="PEM",
        help="CA certificate that clients' certificates must chain to",
    )
    group.add_argument(
        "--grpc-server-with-client-auth",
        action="store_true",
        help="mutual TLS: refuse clients without a certificate signed by --grpc-server-cacert",
    )


def server_tls_from_args(args: argparse.Namespace) -> ServerTlsSettings | None:
    """The server's TLS settings from add_tls_server_arguments' flags; None without --grpc-server-ssl.

    (our choice) Certificate flags without --grpc-server-ssl are refused;
    simple_switch_grpc warns and serves plaintext, which a user who gave a
    certificate did not ask for.
    """
    from controlplane.tls import ServerTlsSettings, check_key_pair, read_pem

    given = {
        "--grpc-server-cert": args.grpc_server_cert,
        "--grpc-server-key": args.grpc_server_key,
        "--grpc-server-cacert": args.grpc_server_cacert,
        "--grpc-server-with-client-auth": args.grpc_server_with_client_auth or None,
    }
    if not args.grpc_server_ssl:
        extra = [flag for flag, value in given.items() if value is not None]
        if extra:
            raise UserInputError(
                f"{', '.join(extra)} without --grpc-server-ssl: add --grpc-server-ssl to serve TLS"
            )
        return None
    missing = [f for f in ("--grpc-server-cert", "--grpc-server-key") if given[f] is None]
    if missing:
        raise UserInputError(f"--grpc-server-ssl needs {' and '.join(missing)}")
    if args.grpc_server_with_client_auth and args.grpc_server_cacert is None:
        raise UserInputError(
            "--grpc-server-with-client-auth needs --grpc-server-cacert "
            "(the CA that signs the clients' certificates)"
        )
    cert_name = f"--grpc-server-cert {args.grpc_server_cert}"
    key_name = f"--grpc-server-key {args.grpc_server_key}"
    cert = read_pem(args.grpc_server_cert, "--grpc-server-cert")
    key = read_pem(args.grpc_server_key, "--grpc-server-key")
    check_key_pair(cert, key, cert_name, key_name)
    client_ca = args.grpc_server_cacert
    return ServerTlsSettings(
        cert,
        key,
        read_pem(client_ca, "--grpc-server-cacert") if client_ca else None,
        args.grpc_server_with_client_auth,
    )


def add_tls_client_arguments(parser: argparse.ArgumentParser) -> None:
    """TLS flags of a client of the switch, named as p4runtime-shell names them."""
    group = parser.add_argument_group("TLS (flags of p4runtime-shell)")
    group.add_argument(
        "--ssl", action="store_true", help="connect over TLS (P4Runtime, and gNMI if used)"
    )
    group.add_argument("--cacert", metavar="PEM", help="CA certificate to verify the server against")
    group.add_argument("--cert", metavar="PEM", help="client certificate, for mutual TLS")
    group.add_argument("--private-key", metavar="PEM", help="client private key, for mutual TLS")


def client_tls_from_args(args: argparse.Namespace) -> TlsSettings | None:
    """The client's TLS settings from add_tls_client_arguments' flags; None without --ssl.

    Without --cacert the server is verified against gRPC's default roots,
    as p4runtime-shell does.
    """
    from controlplane.tls import TlsSettings, check_key_pair, read_pem

    given = {"--cacert": args.cacert, "--cert": args.cert, "--private-key": args.private_key}
    if not args.ssl:
        extra = [flag for flag, value in given.items() if value is not None]
        if extra:
            raise UserInputError(f"{', '.join(extra)} without --ssl: add --ssl to connect over TLS")
        return None
    if (args.cert is None) != (args.private_key is None):
        have, lack = ("--cert", "--private-key") if args.cert else ("--private-key", "--cert")
        raise UserInputError(f"{have} needs {lack} (mutual TLS takes both)")
    ca_cert, cert, key = (read_pem(path, flag) if path else None for flag, path in given.items())
    if cert is not None and key is not None:
        check_key_pair(cert, key, f"--cert {args.cert}", f"--private-key {args.private_key}")
    return TlsSettings(ca_cert, cert, key)
