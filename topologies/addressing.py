"""Which MAC and IP address a server gets when its topology does not say.

Derived from the server's position (1-based) so the same topology always
yields the same addresses: the chip's forwarding entries match destination
MACs, and the emulation assigns the IPs to host interfaces.
"""

from __future__ import annotations

import ipaddress
import re

# (our choice) One flat subnet: 10.0.0.0/8 holds 16M hosts, so thousands of
# servers never run out, and every server is one L2 hop from the ToR's view.
SERVER_SUBNET = ipaddress.IPv4Network("10.0.0.0/8")
SERVER_PREFIX_LEN = SERVER_SUBNET.prefixlen
MAX_SERVERS = SERVER_SUBNET.num_addresses - 2

_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def server_mac(index: int) -> str:
    """Locally administered unicast MAC for server number `index` (1-based).

    >>> server_mac(1), server_mac(300)
    ('02:00:00:00:00:01', '02:00:00:00:01:2c')
    """
    _check_index(index)
    raw = (0x02 << 40) | index
    octets = raw.to_bytes(6, "big")
    return ":".join(f"{b:02x}" for b in octets)


def server_ip(index: int) -> str:
    """Host address for server number `index` (1-based) in SERVER_SUBNET.

    >>> server_ip(1), server_ip(300)
    ('10.0.0.1', '10.0.1.44')
    """
    _check_index(index)
    return str(SERVER_SUBNET.network_address + index)


def is_valid_mac(mac: str) -> bool:
    """True for a unicast MAC written as six lowercase or uppercase hex pairs.

    The whole string must match: a trailing newline would reach `ip -batch`.

    >>> is_valid_mac("02:00:00:00:00:01"), is_valid_mac("02:00:00:00:00:01\\n")
    (True, False)
    """
    if not _MAC_RE.fullmatch(mac.lower()):
        return False
    return int(mac[:2], 16) & 0x01 == 0


def normalize_mac(mac: str) -> str:
    """Lowercase form, the one the forwarding entries and the walk compare."""
    return mac.lower()


def is_valid_ip(ip: str) -> bool:
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        return False
    return True


def _check_index(index: int) -> None:
    if not 1 <= index <= MAX_SERVERS:
        raise ValueError(f"server index must be in 1..{MAX_SERVERS}, got {index}")
