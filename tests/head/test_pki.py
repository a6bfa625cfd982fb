"""The cluster PKI: files and modes, reloads, the server certificate's name, worker identities."""

from __future__ import annotations

import ipaddress
import os
import stat
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from reconciler.head import pki

NOW = time.time()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_start_makes_a_ca_a_server_certificate_and_a_ray_token_all_private(tmp_path):
    os.umask(0)
    try:
        directory = pki.pki_dir(tmp_path / "state", "c1")
        made = pki.ClusterPki.load_or_create(directory, "c1", "127.0.0.1", now=NOW)
    finally:
        os.umask(0o022)
    assert mode(directory) == 0o700
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["ca.key", "ca.pem", "ray-auth-token", "server.key", "server.pem"]
    for name in names:
        assert mode(directory / name) == 0o600, name
    assert len(made.ray_auth_token) == 64
    ca = made.ca.cert
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    sans = made.server.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    made.server.cert.verify_directly_issued_by(ca)


def test_a_restarted_head_keeps_its_ca_and_token(tmp_path):
    first = pki.ClusterPki.load_or_create(tmp_path, "c1", "127.0.0.1", now=NOW)
    again = pki.ClusterPki.load_or_create(tmp_path, "c1", "127.0.0.1", now=NOW + 60)
    assert again.ca == first.ca and again.server == first.server
    assert again.ray_auth_token == first.ray_auth_token


def test_a_new_address_or_an_ending_certificate_makes_a_new_server_certificate(tmp_path):
    first = pki.ClusterPki.load_or_create(tmp_path, "c1", "127.0.0.1", now=NOW)
    moved = pki.ClusterPki.load_or_create(tmp_path, "c1", "head.example.org", now=NOW)
    assert moved.ca == first.ca and moved.server != first.server
    sans = moved.server.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["head.example.org"]
    late = NOW + pki.SERVER_VALIDITY - pki.SERVER_RENEW_BEFORE + 1
    renewed = pki.ClusterPki.load_or_create(tmp_path, "c1", "head.example.org", now=late)
    assert renewed.server != moved.server and renewed.ca == first.ca


def test_a_worker_certificate_carries_its_identity():
    ca = pki.new_ca("c1", now=NOW)
    serial = pki.new_serial()
    issued = pki.issue_worker(
        ca, cluster="c1", record_id="i7", instance_id=2001, slot_id="q3s1", serial=serial, now=NOW
    )
    der = issued.cert.public_bytes(encoding=Encoding.DER)
    identity = pki.worker_identity(der)
    assert identity == pki.WorkerIdentity("c1", "i7", 2001, "q3s1", serial)
    assert issued.serial == serial
    issued.cert.verify_directly_issued_by(ca.cert)
    assert issued.not_after > NOW + 300 * pki.DAY
    # the server certificate names no worker
    server = pki.issue_server(ca, "c1", "10.0.0.1", now=NOW)
    server_der = server.cert.public_bytes(encoding=Encoding.DER)
    assert pki.worker_identity(server_der) is None
    assert pki.worker_identity(b"not a certificate") is None
