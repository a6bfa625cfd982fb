"""All of the head's TLS configuration, in one place.

- the enrollment port: server authentication only (a candidate has nothing to prove but its join
  token, which travels inside); the agent pins the cluster CA it was given;
- the heartbeat port ("port B"): mutual TLS, `CERT_REQUIRED`, trusting only the cluster CA, so a
  peer without a worker certificate of this cluster never gets to send a byte of HTTP;
- client contexts, for anything on the head side that talks to those ports (tests, probes); the
  agent builds its own with the standard library from the PEMs it is given.

Both server contexts come from one factory (`_server_context`): TLS 1.2 is the floor, no
compression (CRIME), no renegotiation (a peer cannot make the head redo the expensive half of a
handshake on one connection), no session tickets (every answer closes its connection and the agent
never resumes a session, so a ticket is work for nothing). Python's defaults choose the ciphers.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from reconciler.head.pki import ClusterPki, Issued

# What every server context turns off, on top of Python's defaults.
SERVER_OPTIONS = ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_TICKET


def enrollment_server_context(pki: ClusterPki) -> ssl.SSLContext:
    """Enrollment, reports and the agent download: the head proves who it is; the peer need not."""
    return _server_context(pki, client_ca=None)


def heartbeat_server_context(pki: ClusterPki) -> ssl.SSLContext:
    """Heartbeats: both sides prove who they are; only the cluster CA's certificates get in."""
    return _server_context(pki, client_ca=pki.ca_pem)


def _server_context(pki: ClusterPki, *, client_ca: str | None) -> ssl.SSLContext:
    """The one server context: the head's certificate, TLS 1.2 or later, `SERVER_OPTIONS`, no
    tickets; with `client_ca`, a client certificate signed by it is required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= SERVER_OPTIONS
    context.num_tickets = 0  # TLS 1.3 tickets (OP_NO_TICKET covers TLS 1.2)
    context.load_cert_chain(pki.server_cert_path, pki.server_key_path)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca)
    return context


def client_context(ca_pem: str, *, client: Issued | None = None) -> ssl.SSLContext:
    """A client that trusts only `ca_pem` (and checks the head's name), optionally presenting a
    client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=ca_pem)
    if client is not None:
        with _private_files(client) as (cert_path, key_path):
            context.load_cert_chain(cert_path, key_path)
    return context


@contextlib.contextmanager
def _private_files(pair: Issued) -> Iterator[tuple[Path, Path]]:
    """`load_cert_chain` reads files only: write the pair 0600 in a private directory, briefly."""
    with tempfile.TemporaryDirectory(prefix="rv-tls-") as directory:
        paths = (Path(directory) / "cert.pem", Path(directory) / "key.pem")
        for path, data in zip(paths, (pair.cert_pem, pair.key_pem), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        yield paths
