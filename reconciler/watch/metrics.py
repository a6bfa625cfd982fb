"""Prometheus metrics of `ray-vast watch`, in the text exposition format.

Cluster $/h, instances by phase, detections by net, vast requests by endpoint and outcome, the
last tick's duration, the alerts waiting for a person by cluster and class, and the rent-loop
breakers by node type: enough to alert on a bill that grows, a net that fires too often, an alert
nobody read, or a node type that stopped launching.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reconciler.model.records import Records


@dataclass
class Gauges:
    """What one scrape shows; the controller refreshes it after each tick."""

    records: Records = field(default_factory=Records)
    detections_by_net: Mapping[str, int] = field(default_factory=dict)
    requests: Mapping[tuple[str, str], int] = field(default_factory=dict)
    tick_seconds: float = 0.0
    ticks: int = 0
    # When the records were read: a breaker is paused while its `paused_until` is after this.
    now: float = 0.0
    # Alerts the head did not add again (the same one within a minute), by (cluster, class).
    alert_repeats: Mapping[tuple[str, str], int] = field(default_factory=dict)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(g: Gauges) -> str:
    out: list[str] = []

    def metric(
        name: str, kind: str, text: str, samples: list[tuple[dict[str, str], float]]
    ) -> None:
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            out.append(f"{name}{{{inner}}} {value}" if inner else f"{name} {value}")

    live = g.records.live_instances()
    dph: dict[str, float] = {}
    phases: dict[tuple[str, str], int] = {}
    for r in live:
        dph[r.cluster] = dph.get(r.cluster, 0.0) + r.billing_dph
        phases[(r.cluster, r.phase.value)] = phases.get((r.cluster, r.phase.value), 0) + 1
    metric(
        "ray_vast_cluster_dollars_per_hour",
        "gauge",
        "What the cluster's instances cost per hour.",
        [({"cluster": c}, round(v, 6)) for c, v in sorted(dph.items())],
    )
    metric(
        "ray_vast_instances",
        "gauge",
        "Instances we answer for, by phase.",
        [({"cluster": c, "phase": p}, n) for (c, p), n in sorted(phases.items())],
    )
    metric(
        "ray_vast_detections_total",
        "counter",
        "Detections by net since start.",
        [({"net": n}, v) for n, v in sorted(g.detections_by_net.items())],
    )
    metric(
        "ray_vast_vast_requests_total",
        "counter",
        "Requests to vast by endpoint and outcome.",
        [({"endpoint": e, "outcome": o}, v) for (e, o), v in sorted(g.requests.items())],
    )
    metric(
        "ray_vast_tick_seconds",
        "gauge",
        "Duration of the last tick.",
        [({}, round(g.tick_seconds, 6))],
    )
    metric("ray_vast_ticks_total", "counter", "Ticks since start.", [({}, g.ticks)])
    metric(
        "ray_vast_alerts", "gauge", "Alerts waiting for a person.", [({}, len(g.records.alerts))]
    )
    alerts: dict[tuple[str, str], int] = {}
    for a in g.records.alerts:
        alerts[(a.cluster, a.cls)] = alerts.get((a.cluster, a.cls), 0) + 1
    metric(
        "ray_vast_alerts_total",
        "counter",
        "Alerts raised (kept in the state for `ray-vast status`), by cluster and class.",
        [({"cluster": c, "class": k}, n) for (c, k), n in sorted(alerts.items())],
    )
    metric(
        "ray_vast_alerts_repeated_total",
        "counter",
        "Alerts not kept again because the same one was raised within a minute, since start.",
        [({"cluster": c, "class": k}, n) for (c, k), n in sorted(g.alert_repeats.items())],
    )
    paused: list[tuple[dict[str, str], float]] = []
    empty: list[tuple[dict[str, str], float]] = []
    for key, state in sorted(g.records.breakers.items()):
        cluster, _, node_type = key.partition("/")
        labels = {"cluster": cluster, "node_type": node_type}
        on = state.paused_until is not None and state.paused_until > g.now
        paused.append((labels, 1 if on else 0))
        empty.append((labels, state.consecutive_empty))
    metric(
        "ray_vast_breaker_paused",
        "gauge",
        "1 while the rent-loop breaker pauses launches of the node type.",
        paused,
    )
    metric(
        "ray_vast_breaker_consecutive_empty",
        "gauge",
        "Slots in a row of the node type that ended with no worker (the breaker's count).",
        empty,
    )
    return "\n".join(out) + "\n"


class MetricsServer:
    """`GET /metrics` on a port, in a background thread."""

    def __init__(self, host: str, port: int, source: Callable[[], Gauges]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = render(outer.source()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.source = source
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
