"""The metrics of `ray-vast watch` show the alerts waiting for a person and the rent-loop breakers:
what an operator's own alerting rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.clock import FakeClock
from reconciler.model.records import Alert, BreakerState, Records
from reconciler.watch import runner
from reconciler.watch.metrics import Gauges, render

NOW = 1_800_000_000.0


def samples(text: str, name: str) -> dict[str, float]:
    """`{labels}` -> value for every sample of one metric."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line[len(name) :].rpartition(" ")
            out[labels] = float(value)
    return out


RECORDS = Records(
    alerts=(
        Alert(NOW - 300, "a", "token_check_failed", "instance 9: token check failed", None),
        Alert(NOW - 200, "a", "token_check_failed", "instance 8: token check failed", "i8"),
        Alert(NOW - 100, "a", "bad_agent_message", "enroll: malformed", None),
        Alert(NOW - 50, "b", "mystery", "a class nobody routed", "i3"),
    ),
    breakers={
        "a/gpu": BreakerState(consecutive_empty=0, paused_until=NOW + 600),
        "a/cpu": BreakerState(consecutive_empty=2, paused_until=None),
        "b/gpu": BreakerState(consecutive_empty=1, paused_until=NOW - 1),  # a pause that ended
    },
)


def test_alerts_are_counted_by_cluster_and_class() -> None:
    text = render(Gauges(records=RECORDS, now=NOW, alert_repeats={("a", "bad_agent_message"): 5}))
    assert "# TYPE ray_vast_alerts_total counter" in text
    assert samples(text, "ray_vast_alerts_total") == {
        '{class="bad_agent_message",cluster="a"}': 1,
        '{class="token_check_failed",cluster="a"}': 2,
        '{class="mystery",cluster="b"}': 1,
    }
    assert samples(text, "ray_vast_alerts_repeated_total") == {
        '{class="bad_agent_message",cluster="a"}': 5
    }
    assert samples(text, "ray_vast_alerts") == {"": 4}


def test_breakers_show_whether_a_node_type_is_paused_now_and_their_count() -> None:
    text = render(Gauges(records=RECORDS, now=NOW))
    assert samples(text, "ray_vast_breaker_paused") == {
        '{cluster="a",node_type="cpu"}': 0,
        '{cluster="a",node_type="gpu"}': 1,
        '{cluster="b",node_type="gpu"}': 0,
    }
    assert samples(text, "ray_vast_breaker_consecutive_empty") == {
        '{cluster="a",node_type="cpu"}': 2,
        '{cluster="a",node_type="gpu"}': 0,
        '{cluster="b",node_type="gpu"}': 1,
    }
    # the same records ten minutes later: the pause has ended
    later = render(Gauges(records=RECORDS, now=NOW + 600))
    assert samples(later, "ray_vast_breaker_paused")['{cluster="a",node_type="gpu"}'] == 0


@dataclass
class Head:
    repeats: dict[tuple[str, str], int]

    def stop(self) -> None:
        return None

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        return self.repeats


@dataclass
class Controller:
    clock: FakeClock
    records_now: Records
    detections_by_net: dict[str, int] = field(default_factory=dict)
    provider: Any = None

    def records(self) -> Records:
        return self.records_now


def test_each_tick_refreshes_the_time_and_the_heads_repeat_counts() -> None:
    gauges = Gauges()
    controller = Controller(FakeClock(NOW), RECORDS)
    heads = [Head({("a", "bad_agent_message"): 2}), Head({("a", "bad_agent_message"): 1})]
    runner._refresh(gauges, controller, 0.5, 3, heads)  # type: ignore[arg-type]
    assert gauges.now == NOW and gauges.records is RECORDS
    assert gauges.alert_repeats == {("a", "bad_agent_message"): 3}
    text = render(gauges)
    assert samples(text, "ray_vast_breaker_paused")['{cluster="a",node_type="gpu"}'] == 1
