"""HTTP for the agent, standard library only: JSON to the head over pinned TLS, and vast's API.

The head is trusted through the cluster CA it was given and nothing else (no system store), with
its name checked; the heartbeat port also gets the worker's client certificate. vast itself is
reached with the system's trust store. No proxy settings are picked up from the environment:
the container's traffic goes where the agent says.

`source`: the local address every connection is bound to (http.client's `source_address`), when
the container is told one (`VASTSIM_SOURCE_IP`, `Settings.source_ip`: on one machine the
simulator gives each instance its own loopback address, so the head sees who is calling); None
lets the kernel pick, as on vast, where the host's NAT gives the traffic its public address.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from agent.events import describe, error_code


class TransportError(OSError):
    """No answer at all: refused, timed out, TLS failed."""


@dataclass(frozen=True)
class Reply:
    status: int
    doc: Any

    def error(self) -> str:
        """The head's error code of a refusal (agent-error.v1.json), or ''."""
        return error_code(self.doc)

    def describe(self) -> str:
        return describe(self.status, self.doc)


def pinned_context(ca_pem: str, *, cert_pem: str = "", key_pem: str = "") -> ssl.SSLContext:
    """Trust only the cluster CA; present a client certificate when given one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=ca_pem)
    if cert_pem:
        directory = tempfile.mkdtemp(prefix="rv-agent-")
        try:
            cert_path = _private_file(directory, "cert.pem", cert_pem)
            key_path = _private_file(directory, "key.pem", key_pem)
            context.load_cert_chain(cert_path, key_path)
        finally:  # the key lives on in the context only
            shutil.rmtree(directory, ignore_errors=True)
    return context


def request(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    raw: bool = False,
    source: str | None = None,
) -> Reply:
    """One exchange; any HTTP status is a `Reply`, no answer at all is a `TransportError`.
    With `source`, the connection leaves from that local address (any port)."""
    if not url.startswith(("https://", "http://")):
        raise TransportError(f"{url}: only http and https are spoken here")
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", "User-Agent": "ray-vast-agent"}
    sent.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=sent)  # noqa: S310
    bind = None if not source else (source, 0)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _BoundHTTP(bind), _BoundHTTPS(context, bind)
    )
    try:
        with opener.open(req, timeout=max(0.1, timeout)) as answer:
            return Reply(answer.status, _decode(answer.read(), raw))
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read()
        except OSError:
            text = b""
        return Reply(exc.code, _decode(text, False))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransportError(f"{url}: {reason}") from exc


class _BoundHTTP(urllib.request.HTTPHandler):
    """Plain HTTP from a chosen local address (None: the kernel's choice)."""

    def __init__(self, source: tuple[str, int] | None) -> None:
        super().__init__()
        self._source = source

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(http.client.HTTPConnection, req, source_address=self._source)


class _BoundHTTPS(urllib.request.HTTPSHandler):
    """HTTPS with the given context (None: the system's trust store) from a chosen local
    address."""

    def __init__(self, context: ssl.SSLContext | None, source: tuple[str, int] | None) -> None:
        super().__init__(context=context)
        self._tls = context
        self._source = source

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(
            http.client.HTTPSConnection, req, context=self._tls, source_address=self._source
        )


def _decode(data: bytes, raw: bool) -> Any:
    if raw:
        return data
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def _private_file(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path
