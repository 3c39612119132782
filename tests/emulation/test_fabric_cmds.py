"""`cassini fabric up`'s flags: a P4Runtime port of its own by default."""

from __future__ import annotations

from emulation.cli import build_parser


def test_fabric_up_binds_any_free_p4runtime_port_unless_given_one() -> None:
    # Two users' fabrics on one machine collided on a fixed 9559.
    parser = build_parser()
    assert parser.parse_args(["fabric", "up"]).grpc_server_addr == "127.0.0.1:0"
    given = parser.parse_args(["fabric", "up", "--grpc-server-addr", "127.0.0.1:9559"])
    assert given.grpc_server_addr == "127.0.0.1:9559"
