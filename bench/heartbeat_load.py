"""Heartbeats offered at a fixed rate from a process of their own (bench/heartbeat_scale.py).

Standard library only, run as a script: the parameters come as JSON on stdin (port, the CA and
the worker's certificate and key as PEM, a heartbeat body, the rate per second and the seconds),
and the figures go to stdout as JSON. The load is open: each heartbeat is sent at its time on
the schedule (`start + i / rate`) by a pool of threads, whatever the ones before it are doing,
and its latency counts from that time (a closed loop waits for the answers, and so never shows
the queue a slow head builds).
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import ssl
import sys
import tempfile
import time
from typing import Any


def context(params: dict[str, Any]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=params["ca_pem"])
    with tempfile.TemporaryDirectory(prefix="rv-load-") as directory:
        cert, key = os.path.join(directory, "c.pem"), os.path.join(directory, "k.pem")
        for path, text in ((cert, params["cert_pem"]), (key, params["key_pem"])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
        ctx.load_cert_chain(cert, key)
    return ctx


def send(ctx: ssl.SSLContext, params: dict[str, Any], seq: int, due: float) -> list[float]:
    """One heartbeat, sent at `due` (perf_counter): [due, latency from due, status]."""
    body = dict(params["body"], seq=seq, sent_at=time.time())
    conn = http.client.HTTPSConnection("127.0.0.1", params["port"], context=ctx, timeout=120)
    try:
        conn.request(
            "POST", "/heartbeat", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        answer = conn.getresponse()
        answer.read()
        status = answer.status
    except OSError:
        status = 0
    finally:
        conn.close()
    return [due, time.perf_counter() - due, float(status)]


def main() -> None:
    params = json.load(sys.stdin)
    ctx = context(params)
    rate, seconds = float(params["rate"]), float(params["seconds"])
    count = max(1, round(rate * seconds))
    start = time.perf_counter() + 0.2
    futures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        for i in range(count):
            due = start + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            futures.append(pool.submit(send, ctx, params, i + 1, due))
        done = [f.result() for f in futures]
    json.dump({"sent": count, "beats": done, "seconds": time.perf_counter() - start}, sys.stdout)


if __name__ == "__main__":
    main()
