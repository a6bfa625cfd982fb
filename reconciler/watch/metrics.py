"""Prometheus metrics of `ray-vast watch`, in the text exposition format.

Cluster $/h, instances by phase, detections by net, vast requests by endpoint and outcome, the
last tick's duration, the alerts waiting for a person by cluster and class, and the rent-loop
breakers by node type: enough to alert on a bill that grows, a net that fires too often, an alert
nobody read, or a node type that stopped launching. And the dollars billed since the watch
started, by cluster and cause, as `ray-vast cost` counts them (`DollarCounter`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reconciler.model import cost
from reconciler.model.records import Records
from reconciler.state.tails import LedgerTail


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
    # Dollars billed since the watch started, by (cluster, cause) (`DollarCounter`).
    dollars: Mapping[tuple[str, str], float] = field(default_factory=dict)


class DollarCounter:
    """The dollars billed since `since`, by (cluster, cause): `ray-vast cost`'s accounting of the
    records, and of the orphans the ledger's new lines end, each tick. A counter never goes down:
    each instance keeps the most it was priced at, and a record that retention drops keeps its
    last dollars."""

    def __init__(self, since: float, tail: LedgerTail | None = None) -> None:
        self.since = since
        self.tail = tail
        self._live: dict[str, dict[tuple[str, str], float]] = {}  # by instance
        self._final: dict[tuple[str, str], float] = {}

    def update(self, records: Records, now: float) -> dict[tuple[str, str], float]:
        seen: dict[str, dict[tuple[str, str], float]] = {}
        lives = [life for r in records.instances.values() if (life := cost.life_of(r))]
        for charge in cost.charges(lives, since=self.since, until=now):
            key = (charge.cluster, charge.cause.value)
            mine = seen.setdefault(charge.instance, {})
            mine[key] = mine.get(key, 0.0) + charge.dollars
        for instance, amounts in seen.items():
            before = self._live.get(instance, {})
            self._live[instance] = {
                k: max(v, before.get(k, 0.0)) for k, v in {**before, **amounts}.items()
            }
        for instance in set(self._live) - set(seen):  # gone from the state: final
            self._add(self._live.pop(instance))
        orphans = [life for life in self._new_bills() if life.fate is cost.Cause.ORPHAN]
        for charge in cost.charges(orphans, since=self.since, until=now):
            self._add({(charge.cluster, charge.cause.value): charge.dollars})
        total = dict(self._final)
        for amounts in self._live.values():
            for key, dollars in amounts.items():
                total[key] = total.get(key, 0.0) + dollars
        return total

    def _add(self, amounts: Mapping[tuple[str, str], float]) -> None:
        for key, dollars in amounts.items():
            self._final[key] = self._final.get(key, 0.0) + dollars

    def _new_bills(self) -> list[cost.Life]:
        """The bills in the ledger's entries written since the last look."""
        if self.tail is None:
            return []
        return list(cost.lives_from_ledger(self.tail.new()).values())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


Samples = list[tuple[dict[str, str], float]]


class _Exposition:
    """The text of one scrape, written one metric at a time (its HELP and TYPE lines first)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, text: str, samples: Samples) -> None:
        self.lines.append(f"# HELP {name} {text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            self.lines.append(f"{name}{{{inner}}} {value}" if inner else f"{name} {value}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(g: Gauges) -> str:
    out = _Exposition()
    _instances(out, g.records)
    _loop(out, g)
    _alerts(out, g)
    out.metric(
        "ray_vast_dollars_total",
        "counter",
        "Dollars billed since this watch started, by cluster and cause (as `ray-vast cost` "
        "counts them: serving, idle, booting, failed, extra_candidate, orphan, stopped).",
        [({"cluster": c, "cause": k}, round(v, 6)) for (c, k), v in sorted(g.dollars.items())],
    )
    _breakers(out, g)
    return out.text()


def _instances(out: _Exposition, records: Records) -> None:
    """What the live instances cost per hour, and how many are in each phase."""
    dph: dict[str, float] = {}
    phases: dict[tuple[str, str], int] = {}
    for r in records.live_instances():
        dph[r.cluster] = dph.get(r.cluster, 0.0) + r.billing_dph
        phases[(r.cluster, r.phase.value)] = phases.get((r.cluster, r.phase.value), 0) + 1
    out.metric(
        "ray_vast_cluster_dollars_per_hour",
        "gauge",
        "What the cluster's instances cost per hour.",
        [({"cluster": c}, round(v, 6)) for c, v in sorted(dph.items())],
    )
    out.metric(
        "ray_vast_instances",
        "gauge",
        "Instances we answer for, by phase.",
        [({"cluster": c, "phase": p}, n) for (c, p), n in sorted(phases.items())],
    )


def _loop(out: _Exposition, g: Gauges) -> None:
    """The watch loop itself: what its nets detected, its requests to vast, its ticks."""
    out.metric(
        "ray_vast_detections_total",
        "counter",
        "Detections by net since start.",
        [({"net": n}, v) for n, v in sorted(g.detections_by_net.items())],
    )
    out.metric(
        "ray_vast_vast_requests_total",
        "counter",
        "Requests to vast by endpoint and outcome.",
        [({"endpoint": e, "outcome": o}, v) for (e, o), v in sorted(g.requests.items())],
    )
    out.metric(
        "ray_vast_tick_seconds",
        "gauge",
        "Duration of the last tick.",
        [({}, round(g.tick_seconds, 6))],
    )
    out.metric("ray_vast_ticks_total", "counter", "Ticks since start.", [({}, g.ticks)])


def _alerts(out: _Exposition, g: Gauges) -> None:
    """The alerts waiting for a person, by cluster and class, and those not kept again."""
    out.metric(
        "ray_vast_alerts", "gauge", "Alerts waiting for a person.", [({}, len(g.records.alerts))]
    )
    alerts: dict[tuple[str, str], int] = {}
    for a in g.records.alerts:
        alerts[(a.cluster, a.cls)] = alerts.get((a.cluster, a.cls), 0) + 1
    out.metric(
        "ray_vast_alerts_total",
        "counter",
        "Alerts raised (kept in the state for `ray-vast status`), by cluster and class.",
        [({"cluster": c, "class": k}, n) for (c, k), n in sorted(alerts.items())],
    )
    out.metric(
        "ray_vast_alerts_repeated_total",
        "counter",
        "Alerts not kept again because the same one was raised within a minute, since start.",
        [({"cluster": c, "class": k}, n) for (c, k), n in sorted(g.alert_repeats.items())],
    )


def _breakers(out: _Exposition, g: Gauges) -> None:
    """The rent-loop breaker of each node type: whether it pauses launches, and its count."""
    paused: Samples = []
    empty: Samples = []
    for key, state in sorted(g.records.breakers.items()):
        cluster, _, node_type = key.partition("/")
        labels = {"cluster": cluster, "node_type": node_type}
        on = state.paused_until is not None and state.paused_until > g.now
        paused.append((labels, 1 if on else 0))
        empty.append((labels, state.consecutive_empty))
    out.metric(
        "ray_vast_breaker_paused",
        "gauge",
        "1 while the rent-loop breaker pauses launches of the node type.",
        paused,
    )
    out.metric(
        "ray_vast_breaker_consecutive_empty",
        "gauge",
        "Slots in a row of the node type that ended with no worker (the breaker's count).",
        empty,
    )


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
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

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
