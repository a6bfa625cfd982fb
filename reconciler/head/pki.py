"""The cluster's PKI: one CA, the head's server certificate, one client certificate per worker.

Why a private CA per cluster: the agent pins it (it arrives in the container's environment), so a
worker talks only to its own head even when the head's address is a bare IP, and the heartbeat port
admits only certificates this CA signed. A worker's certificate names who it is (cluster, instance
record, vast instance id, slot), so a heartbeat identifies its sender without any token; the
revocation set in the records (`Records.revoked_certs`, by serial) refuses a destroyed or refused
worker's certificate even though it still verifies.

Everything that makes a certificate is a function of `now` and a validity (no clock is read here);
`ClusterPki.load_or_create` is the one part that touches files: keys 0600 in a 0700 directory,
written atomically, so a head restarted from its state dir keeps its CA and every worker survives.
Keys are ECDSA P-256: fast to make (an enrollment signs one) and accepted by every TLS stack.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import exceptions, x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reconciler.state.files import ensure_private_dir, fsync_dir, write_temp

DAY = 86_400.0
CA_VALIDITY = 10 * 365 * DAY
SERVER_VALIDITY = 365 * DAY
WORKER_VALIDITY = 365 * DAY
# A server certificate this close to its end is made again when the head starts.
SERVER_RENEW_BEFORE = 30 * DAY
# Certificates start a little in the past: a worker's clock may run behind the head's.
BACKDATE = 300.0
URN = "urn:ray-vast:"
ORGANISATION = "ray-vast"
RAY_TOKEN_FILE = "ray-auth-token"  # noqa: S105 - a file name, not a secret


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, as PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def serial(self) -> int:
        return int(self.cert.serial_number)

    @property
    def not_after(self) -> float:
        return self.cert.not_valid_after_utc.timestamp()


@dataclass(frozen=True)
class WorkerIdentity:
    """Who a worker certificate says its holder is."""

    cluster: str
    record_id: str
    instance_id: int
    slot_id: str
    serial: int


def new_serial() -> int:
    """A random positive serial of at most 159 bits (RFC 5280 allows 20 octets)."""
    return secrets.randbits(159) | 1


def new_ca(cluster: str, *, now: float, validity: float = CA_VALIDITY) -> Issued:
    """A self-signed CA for one cluster; it signs only end-entity certificates (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(cluster, f"ray-vast {cluster} CA")
    builder = (
        _base(name, name, key.public_key(), now=now, validity=validity, serial=new_serial())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return Issued(_pem(builder.sign(key, hashes.SHA256())), _key_pem(key))


def issue_server(
    ca: Issued, cluster: str, address: str, *, now: float, validity: float = SERVER_VALIDITY
) -> Issued:
    """The head's certificate for the address workers reach it at (an IP SAN or a DNS SAN)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _signed_by(ca, _name(cluster, address), key, now=now, validity=validity)
        .add_extension(x509.SubjectAlternativeName([_san_for(address)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    return Issued(_pem(builder.sign(_ca_key(ca), hashes.SHA256())), _key_pem(key))


def issue_worker(
    ca: Issued,
    *,
    cluster: str,
    record_id: str,
    instance_id: int,
    slot_id: str,
    serial: int,
    now: float,
    validity: float = WORKER_VALIDITY,
) -> Issued:
    """A worker's client certificate; its identity is in URN SANs that `worker_identity` reads."""
    key = ec.generate_private_key(ec.SECP256R1())
    uris = [
        f"{URN}cluster:{cluster}",
        f"{URN}record:{record_id}",
        f"{URN}instance:{instance_id}",
        f"{URN}slot:{slot_id}",
    ]
    builder = (
        _signed_by(ca, _name(cluster, record_id), key, now=now, validity=validity, serial=serial)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    return Issued(_pem(builder.sign(_ca_key(ca), hashes.SHA256())), _key_pem(key))


@functools.lru_cache(maxsize=4096)
def worker_identity(cert_der: bytes) -> WorkerIdentity | None:
    """The identity a (TLS-verified) client certificate carries, or None if it names none.

    Kept per certificate (bounded; the answer is a pure function of the bytes): each worker
    shows the same certificate on every heartbeat, and parsing it was a sixth of the head's
    time per heartbeat."""
    try:
        cert = x509.load_der_x509_certificate(cert_der)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return None
    parts: dict[str, str] = {}
    for uri in sans.get_values_for_type(x509.UniformResourceIdentifier):
        if uri.startswith(URN):
            kind, _, value = uri[len(URN) :].partition(":")
            parts[kind] = value
    try:
        return WorkerIdentity(
            cluster=parts["cluster"],
            record_id=parts["record"],
            instance_id=int(parts["instance"]),
            slot_id=parts["slot"],
            serial=int(cert.serial_number),
        )
    except (KeyError, ValueError):
        return None


def server_matches(server: Issued, ca: Issued, address: str, *, now: float) -> bool:
    """Whether a stored server certificate still serves: signed by `ca`, for `address`, not
    about to end."""
    cert = server.cert
    if cert.issuer != ca.cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca.cert)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, exceptions.InvalidSignature):
        return False
    if _san_for(address) not in list(sans):
        return False
    return cert.not_valid_after_utc.timestamp() - now > SERVER_RENEW_BEFORE


# --- the files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterPki:
    """The PKI of one cluster as kept under `<state dir>/pki/<cluster>/`."""

    cluster: str
    directory: Path
    ca: Issued
    server: Issued
    ray_auth_token: str

    @property
    def ca_pem(self) -> str:
        return self.ca.cert_pem.decode()

    @property
    def ray_auth_token_path(self) -> Path:
        """The Ray head's token file (`RAY_AUTH_TOKEN_PATH` of the head's `ray start`): the token
        every worker is given at enrollment."""
        return self.directory / RAY_TOKEN_FILE

    @property
    def server_cert_path(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key_path(self) -> Path:
        return self.directory / "server.key"

    @classmethod
    def load_or_create(
        cls, directory: Path, cluster: str, address: str, *, now: float
    ) -> ClusterPki:
        """The cluster's CA, server certificate and Ray auth token; made the first time and
        kept. The server certificate is made again when the address changed or it nears its end.
        """
        ensure_private_dir(directory)
        ca = _read_pair(directory, "ca")
        if ca is None:
            ca = new_ca(cluster, now=now)
            _write_pair(directory, "ca", ca)
        server = _read_pair(directory, "server")
        if server is None or not server_matches(server, ca, address, now=now):
            server = issue_server(ca, cluster, address, now=now)
            _write_pair(directory, "server", server)
        token_path = directory / RAY_TOKEN_FILE
        if not token_path.exists():
            # Ray's own generator makes 32 random bytes as hex (ray get-auth-token --generate).
            _write_private(token_path, secrets.token_hex(32).encode())
        token = token_path.read_text().strip()
        return cls(cluster, directory, ca, server, token)


def pki_dir(state_dir: Path, cluster: str) -> Path:
    return state_dir / "pki" / cluster


def _read_pair(directory: Path, stem: str) -> Issued | None:
    cert, key = directory / f"{stem}.pem", directory / f"{stem}.key"
    if not (cert.exists() and key.exists()):
        return None
    return Issued(cert.read_bytes(), key.read_bytes())


def _write_pair(directory: Path, stem: str, pair: Issued) -> None:
    _write_private(directory / f"{stem}.key", pair.key_pem)
    _write_private(directory / f"{stem}.pem", pair.cert_pem)


def _write_private(path: Path, data: bytes) -> None:
    """0600, atomically: a crash leaves the old file or the new one."""
    temp = write_temp(path, data)
    os.replace(temp, path)
    fsync_dir(path.parent)


# --- building blocks -------------------------------------------------------------------------


def _name(cluster: str, common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANISATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, cluster),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
        ]
    )


def _base(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    *,
    now: float,
    validity: float,
    serial: int,
) -> x509.CertificateBuilder:
    start = datetime.datetime.fromtimestamp(now - BACKDATE, tz=datetime.UTC)
    end = datetime.datetime.fromtimestamp(now + validity, tz=datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(start)
        .not_valid_after(end)
    )


def _signed_by(
    ca: Issued,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    now: float,
    validity: float,
    serial: int | None = None,
) -> x509.CertificateBuilder:
    ca_cert = ca.cert
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        _base(
            subject,
            ca_cert.subject,
            key.public_key(),
            now=now,
            validity=validity,
            serial=serial if serial is not None else new_serial(),
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _san_for(address: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        return x509.DNSName(address)


def _ca_key(ca: Issued) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError("the cluster CA key is not an EC key")
    return key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
