"""Arguments several subcommands share, defined once so their help cannot drift."""

from __future__ import annotations

import argparse
import ipaddress
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from topologies.errors import UserInputError
from topologies.library import builtin_names

if TYPE_CHECKING:
    from controlplane.tls import ServerTlsSettings, TlsSettings

DEFAULT_TOPOLOGY = "cassini-testbed"


def topology_help() -> str:
    return (
        f"built-in name ({', '.join(builtin_names())}), generator "
        "(leaf-spine:LEAVES:SPINES:SERVERS_PER_LEAF, fat-tree:K) or a .json/.yaml file"
    )


def add_topology_argument(
    parser: argparse.ArgumentParser, default: str | None = DEFAULT_TOPOLOGY, purpose: str = ""
) -> None:
    """`--topology/-t`, as every command that reads a cluster takes it."""
    text = topology_help() if not purpose else f"{purpose}: {topology_help()}"
    if default is not None:
        text += f" (default {default})"
    parser.add_argument("--topology", "-t", default=default, help=text)


# ---------------------------------------------------------------- numeric flags
# argparse `type=` helpers: a bad value is one line naming the flag
# ("argument --processes: must be >= 1, got 0") and exit 2.


def _number(text: str, cast: type[int] | type[float]) -> float:
    try:
        value = cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise argparse.ArgumentTypeError(f"must be {kind}, got '{text}'") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got '{text}'")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts of processes, candidates, jobs, workers)."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (seeds)."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """A number > 0 (rates, capacities, loads, precisions)."""
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    """A number >= 0 (jitter sigmas)."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


# ---------------------------------------------------------------- output and interruption


def add_force_argument(parser: argparse.ArgumentParser) -> None:
    """`--force`, as every command that writes files takes it (see `topologies.outputs`)."""
    parser.add_argument(
        "--force", action="store_true", help="replace an existing output (refused otherwise)"
    )


class Interrupted(Exception):
    """A run stopped by SIGINT or SIGTERM; `main` prints it and exits 128 + the signal."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum


class _Terminate(BaseException):
    """SIGTERM as an exception, so `finally` blocks clean up as for Ctrl-C."""


@contextmanager
def interruptible(message: str) -> Iterator[None]:
    """Turn Ctrl-C and SIGTERM inside the block into `Interrupted(message)`.

    SIGTERM's default kills the process without running cleanup, so inside
    the block it raises instead; the old handler comes back afterwards.
    """

    def on_term(signum: int, frame: object) -> None:
        raise _Terminate

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT, message) from None
    except _Terminate:
        raise Interrupted(signal.SIGTERM, message) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- TLS: simple_switch_grpc's flags on the switch, p4runtime-shell's on the clients ---------


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


# --- addresses: HOST:PORT, checked once for every flag that takes one ----------------------

_HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z"
)
MAX_PORT = 65535


def parse_address(text: str, listening: bool) -> str:
    """A gRPC address 'HOST:PORT' in canonical form; one-line error otherwise.

    HOST is a name, an IPv4 address or an IPv6 address in brackets; PORT is
    0-65535, 0 ("any free port") only for an address to listen on. Without
    this check gRPC takes '127.0.0.1' as port 443 and 99999 as 34463.

    >>> parse_address("localhost:9559", listening=False), parse_address("[::1]:0", listening=True)
    ('localhost:9559', '[::1]:0')
    """
    example = "e.g. 127.0.0.1:9559 or [::1]:9559"
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise argparse.ArgumentTypeError(f"'{text}': no ']' after the IPv6 address ({example})")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"'{text}': '{inside}' is not an IPv6 address ({example})"
            ) from None
        if not rest.startswith(":"):
            raise argparse.ArgumentTypeError(f"'{text}': no port after ']' ({example})")
        host, port_text = f"[{inside}]", rest[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            raise argparse.ArgumentTypeError(f"'{text}': no port; expected HOST:PORT ({example})")
        if ":" in host:
            raise argparse.ArgumentTypeError(
                f"'{text}': an IPv6 address goes in brackets ({example})"
            )
        if not host:
            raise argparse.ArgumentTypeError(f"'{text}': no host before ':' ({example})")
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"'{text}': '{host}' is not an IPv4 address ({example})"
                ) from None
        elif not _HOSTNAME.match(host):
            raise argparse.ArgumentTypeError(f"'{text}': '{host}' is not a host name ({example})")
    if not port_text.isdigit() or not port_text.isascii():
        raise argparse.ArgumentTypeError(f"'{text}': port '{port_text}' is not a number 0-65535")
    port = int(port_text)
    lowest = 0 if listening else 1
    if not lowest <= port <= MAX_PORT:
        what = "0 (any free port) to" if listening else "1 to"
        raise argparse.ArgumentTypeError(f"'{text}': port {port} is outside {what} {MAX_PORT}")
    return f"{host}:{port}"


def listen_address(text: str) -> str:
    """argparse `type=` of an address to listen on (port 0: any free port)."""
    return parse_address(text, listening=True)


def connect_address(text: str) -> str:
    """argparse `type=` of an address to connect to (port 1-65535)."""
    return parse_address(text, listening=False)
