"""Addresses: HOST:PORT, checked once for every flag that takes one."""

from __future__ import annotations

import argparse
import ipaddress
import re

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
