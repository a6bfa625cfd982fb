"""The bootloader: the container's PID 1 until the agent takes over. Standard library only.

The launcher puts this file's source on the container's command line (`python3 -I -S -c <it>`,
vast's runtype `args`), so it is all there is in the container at first. It:

1. downloads the agent (`GET /agent` on the head's enrollment port) over TLS pinned to the
   cluster CA from `RV_CA_PEM`, retrying until it has it;
2. checks the download's sha256 against `RV_AGENT_SHA256`;
3. runs the agent in this process (`agent.main.run`), so the agent stays PID 1.

It never exits: on vast a PID 1 that exits is restarted and keeps billing. After a hash mismatch,
after `RV_BOOTLOADER_GIVE_UP_SECONDS` of failed downloads, on TERM, INT or HUP, or on any error
before the agent runs, it reports the reason to the head (waiting up to `RV_REPORT_WAIT_SECONDS`)
and destroys its own instance with `CONTAINER_API_KEY`, retrying every
`RV_SELF_DESTROY_RETRY_SECONDS` until vast confirms; and after that it still waits.

Every connection leaves from `VASTSIM_SOURCE_IP` when the container is told one (the simulator's
per-instance loopback address; on vast the host's NAT picks the address, and it is not set).
"""

from __future__ import annotations

import hashlib
import http.client
import importlib
import json
import os
import secrets
import signal
import ssl
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from typing import Any, NoReturn


class _Ending(BaseException):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    sys.stdout.write(f"[rv-bootloader {stamp}] {message}\n")
    sys.stdout.flush()


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def _head() -> str:
    host = os.environ.get("RV_HEAD_ADDRESS", "")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"https://{host}:{os.environ.get('RV_ENROLL_PORT', '')}"


def _exchange(
    url: str,
    method: str,
    body: Any,
    *,
    context: ssl.SSLContext | None,
    timeout: float,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """(status, body) of one request; raises OSError when nothing answered."""
    if not url.startswith(("https://", "http://")):
        raise OSError(f"not an http(s) URL: {url}")
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", "User-Agent": "ray-vast-bootloader"}
    sent.update(headers or {})
    request = urllib.request.Request(url, data=data, method=method, headers=sent)  # noqa: S310
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), _Bound(), _BoundTLS(context=context)
    )
    try:
        with opener.open(request, timeout=max(0.1, timeout)) as answer:
            return int(answer.status), bytes(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            text = bytes(exc.read())
        except OSError:
            text = b""
        return int(exc.code), text
    except (urllib.error.URLError, ValueError) as exc:
        raise OSError(str(getattr(exc, "reason", exc))) from exc


def _source() -> tuple[str, int] | None:
    address = os.environ.get("VASTSIM_SOURCE_IP", "").strip()
    return (address, 0) if address else None


class _Bound(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(http.client.HTTPConnection, req, source_address=_source())


class _BoundTLS(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        conn = http.client.HTTPSConnection
        return self.do_open(conn, req, context=self._tls, source_address=_source())


def _pinned() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=os.environ.get("RV_CA_PEM", ""))
    return context


def _download(started: float) -> bytes:
    give_up = _seconds("RV_BOOTLOADER_GIVE_UP_SECONDS", 600.0)
    pause = min(5.0, max(0.2, give_up / 20))
    last = "no attempt yet"
    while True:
        left = started + give_up - time.monotonic()
        if left <= 0:
            raise _Ending("agent_download_failed", f"no agent after {give_up:g}s (last: {last})")
        try:
            status, data = _exchange(
                f"{_head()}/agent", "GET", None, context=_pinned(), timeout=min(30.0, left)
            )
        except (OSError, ssl.SSLError) as exc:
            last = str(exc)
        else:
            if status == 200:
                return data
            last = f"HTTP {status}"
        _log(f"agent download failed: {last}")
        time.sleep(min(pause, max(0.0, started + give_up - time.monotonic())))


def _report(boot_id: str, reason: str, detail: str) -> None:
    wait = _seconds("RV_REPORT_WAIT_SECONDS", 10.0)
    deadline = time.monotonic() + wait
    report = {
        "protocol": 1,
        "token": os.environ.get("RV_JOIN_TOKEN", "") or "-",
        "instance_id": int(os.environ.get("CONTAINER_ID", "0") or 0),
        "boot_id": boot_id,
        "record_id": os.environ.get("RV_RECORD_ID") or None,
        "phase": "bootloader",
        "reason": reason,
        "detail": detail[:4000],
        "at": time.time(),
    }
    while True:
        left = deadline - time.monotonic()
        try:
            status, _ = _exchange(
                f"{_head()}/report", "POST", report, context=_pinned(), timeout=min(5.0, left)
            )
        except (OSError, ssl.SSLError) as exc:
            _log(f"report not delivered: {exc}")
        else:
            if status < 500:
                _log(f"report delivered ({status})")
                return
        if time.monotonic() + 0.2 >= deadline:
            _log("no answer to the report in time; destroying anyway")
            return
        time.sleep(0.2)


def _destroy_forever() -> NoReturn:
    retry = _seconds("RV_SELF_DESTROY_RETRY_SECONDS", 5.0)
    base = (os.environ.get("RV_VAST_URL") or os.environ.get("VAST_URL") or "").rstrip("/")
    base = base or "https://console.vast.ai"
    url = f"{base}/api/v0/instances/{os.environ.get('CONTAINER_ID', '')}/"
    key = os.environ.get("CONTAINER_API_KEY", "")
    while True:
        confirmed = False
        try:
            timeout = max(1.0, min(retry * 2, 10.0))
            auth = {"Authorization": f"Bearer {key}"}
            status, body = _exchange(url, "DELETE", {}, context=None, timeout=timeout, headers=auth)
        except OSError as exc:
            _log(f"self-destroy: no answer: {exc}")
        else:
            confirmed = status in (200, 404) or b"no_such_instance" in body
            _log(f"self-destroy: HTTP {status}")
        time.sleep(retry * 12 if confirmed else retry)


def _disarm() -> None:
    def note(signum: int, frame: Any) -> None:
        _log(f"signal {signum} while ending: ignored")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)


def _end(boot_id: str, reason: str, detail: str) -> NoReturn:
    _disarm()
    _log(f"ending: {reason}: {detail}")
    try:
        _report(boot_id, reason, detail)
    except Exception as exc:  # the destroy must happen whatever the report did
        _log(f"report failed: {exc!r}")
    _destroy_forever()


def _arm() -> None:
    def on_signal(signum: int, frame: Any) -> None:
        _disarm()
        raise _Ending("signal", f"{signal.Signals(signum).name} to PID 1 (bootloader)")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


def _install(data: bytes) -> str:
    """The agent zip in a private directory, first on the import path."""
    directory = tempfile.mkdtemp(prefix="rv-agent-")
    path = os.path.join(directory, "agent.zip")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    sys.path.insert(0, path)
    for name in [m for m in sys.modules if m == "agent" or m.startswith("agent.")]:
        del sys.modules[name]
    return path


def main() -> NoReturn:
    started = time.monotonic()
    boot_id = secrets.token_hex(8)
    try:
        _arm()
        _log(f"boot {boot_id}: fetching the agent from {_head()}")
        data = _download(started)
        digest = hashlib.sha256(data).hexdigest()
        wanted = os.environ.get("RV_AGENT_SHA256", "")
        if digest != wanted:
            raise _Ending("agent_hash_mismatch", f"the agent's sha256 is {digest}, not {wanted}")
        _install(data)
        agent_main = importlib.import_module("agent.main")
        agent_main.run({"started": started, "boot_id": boot_id})
        raise _Ending("bootstrap_error", "the agent returned")
    except _Ending as why:
        _end(boot_id, why.reason, why.detail)
    except BaseException as exc:
        _end(boot_id, "bootstrap_error", "".join(traceback.format_exception_only(type(exc), exc)))


if __name__ == "__main__":
    main()
