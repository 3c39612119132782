"""Which certificates does a gRPC endpoint of the project present, and which does it trust?

`TlsSettings` is the client's side (the CA it verifies the switch against,
and for mutual TLS its own certificate and key); `ServerTlsSettings` is the
switch's (its certificate and key, and the CA its clients' certificates must
chain to when it asks for them). Both hold the PEM bytes, read once with
`from_files`, so a missing or unreadable file is one clear error before any
connection is tried, and both build the `grpc` credentials the channel or
the server port needs.

    >>> TlsSettings.from_files(ca_cert="missing-ca.pem")   # doctest: +SKIP
    UserInputError: cannot read CA certificate missing-ca.pem: No such file or directory
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from topologies.errors import UserInputError

PEM_MARKER = b"-----BEGIN "


def read_pem(path: str, what: str) -> bytes:
    """The bytes of a PEM file; a missing, unreadable or non-PEM file is one error naming it."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise UserInputError(f"cannot read {what} {path}: {err.strerror or err}") from None
    if PEM_MARKER not in data:
        raise UserInputError(f"{what} {path} is not a PEM file (no '-----BEGIN' line)")
    return data


def _read_optional(path: str | None, what: str) -> bytes | None:
    return None if path is None else read_pem(path, what)


def check_key_pair(cert: bytes, key: bytes, cert_name: str, key_name: str) -> None:
    """Refuse a key that is not the certificate's, or PEM that does not parse, naming both.

    gRPC finds out only when the port is added, and then reports a failure to bind.
    """
    try:
        leaf = x509.load_pem_x509_certificates(cert)[0]
    except ValueError as err:
        raise UserInputError(f"{cert_name} holds no readable certificate: {err}") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as err:
        raise UserInputError(
            f"{key_name} holds no readable unencrypted private key: {err}"
        ) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(*spki) != private.public_key().public_bytes(*spki):
        raise UserInputError(f"{key_name} is not the private key of {cert_name}")


@dataclass(frozen=True)
class TlsSettings:
    """A client's TLS: whom it trusts and, for mutual TLS, what it presents.

    ca_cert None trusts gRPC's default roots (as p4runtime-shell does);
    cert and key come together or not at all. server_name_override checks
    the server's certificate against that name instead of the address's
    host (a certificate made for a DNS name, reached by its IP).
    """

    ca_cert: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name_override: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise UserInputError(
                "a client certificate needs its private key and a key needs its certificate "
                "(give both for mutual TLS, or neither)"
            )

    @classmethod
    def from_files(
        cls,
        ca_cert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        server_name_override: str | None = None,
    ) -> TlsSettings:
        """Read the PEM files (paths may be None); errors name the file that failed."""
        settings = cls(
            _read_optional(ca_cert, "CA certificate"),
            _read_optional(cert, "client certificate"),
            _read_optional(key, "client private key"),
            server_name_override,
        )
        if settings.cert is not None and settings.key is not None:
            check_key_pair(
                settings.cert, settings.key, f"client certificate {cert}", f"client key {key}"
            )
        return settings

    @property
    def mutual(self) -> bool:
        """Whether the client presents a certificate of its own."""
        return self.cert is not None

    def credentials(self) -> grpc.ChannelCredentials:
        """The credentials of a secure channel to the server."""
        return grpc.ssl_channel_credentials(self.ca_cert, self.key, self.cert)

    def channel_options(self) -> tuple[tuple[str, str], ...]:
        """Channel options TLS adds (the name the server's certificate is checked against)."""
        if self.server_name_override is None:
            return ()
        return (("grpc.ssl_target_name_override", self.server_name_override),)


@dataclass(frozen=True)
class ServerTlsSettings:
    """A server's TLS: its certificate chain and key, and whom it asks for a certificate.

    require_client_auth (mutual TLS) refuses every client whose certificate
    does not chain to client_ca; without it no client certificate is asked
    for, and client_ca is unused (as in bmv2).
    """

    cert: bytes
    key: bytes
    client_ca: bytes | None = None
    require_client_auth: bool = False

    def __post_init__(self) -> None:
        if self.require_client_auth and self.client_ca is None:
            raise UserInputError(
                "client authentication needs the CA that signs the clients' certificates"
            )

    @classmethod
    def from_files(
        cls,
        cert: str,
        key: str,
        client_ca: str | None = None,
        require_client_auth: bool = False,
    ) -> ServerTlsSettings:
        """Read the PEM files; errors name the file that failed."""
        settings = cls(
            read_pem(cert, "server certificate"),
            read_pem(key, "server private key"),
            _read_optional(client_ca, "client CA certificate"),
            require_client_auth,
        )
        check_key_pair(
            settings.cert, settings.key, f"server certificate {cert}", f"server key {key}"
        )
        return settings

    def credentials(self) -> grpc.ServerCredentials:
        """The credentials of the server's secure port."""
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.require_client_auth,
        )
