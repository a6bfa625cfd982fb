"""When the controller lists next: the earliest deadline a record holds (issue 12, finding 5:
the enrollment limit fired at 120 s and missing-from-listing 120 s after the last sighting,
because both were looked at only on the 60-s reconcile)."""

from __future__ import annotations

from reconciler.model.records import Intent, Phase
from reconciler.model.requestrecord import RequestStatus
from reconciler.nets import candidate_limits
from reconciler.planning.deadlines import next_listing
from tests.planning.builders import NOW, record, request, spec

SPEC = spec()
W = SPEC.watchdogs


def test_a_candidate_seen_running_is_listed_again_at_its_enrollment_limit() -> None:
    running = record("i1", vast_id=1, phase=Phase.RUNNING, first_running_at=NOW)
    at = next_listing([running], [], SPEC, after=NOW)
    assert at == NOW + W.enrollment_limit_seconds
    # at that listing the limit fires (>=, not >)
    seen = candidate_limits._candidate_limits(running, SPEC, at)
    assert seen is not None and seen[0] == "enrollment_timeout"
    assert candidate_limits._candidate_limits(running, SPEC, at - 1) is None


def test_a_missing_instance_is_listed_again_sixty_seconds_after_its_last_sighting() -> None:
    gone = record("i1", vast_id=1, provider_seen_at=NOW - 10, missing_since=NOW)
    assert next_listing([gone], [], SPEC, after=NOW) == NOW - 10 + W.missing_from_listing_seconds
    # seen long ago (a storm in between): a second listing a few seconds later confirms it
    stale = record("i1", vast_id=1, provider_seen_at=NOW - 600, missing_since=NOW)
    assert next_listing([stale], [], SPEC, after=NOW) == NOW + candidate_limits.CONFIRM_SECONDS


def test_retries_provision_deadlines_and_head_endings_ask_for_a_listing() -> None:
    retry = record(
        "i1", vast_id=1, intent=Intent.DESTROYED, phase=Phase.DESTROYING, retry_at=NOW + 7
    )
    assert next_listing([retry], [], SPEC, after=NOW) == NOW + 7
    reported = record(
        "i2", vast_id=2, intent=Intent.DESTROYED, phase=Phase.DESTROYING, ended_at=NOW + 1
    )
    assert next_listing([reported], [], SPEC, after=NOW) == NOW + 1
    due = request(provision_deadline=NOW + 30)
    assert next_listing([], [due], SPEC, after=NOW) == NOW + 30
    closed = request(provision_deadline=NOW + 30, status=RequestStatus.FILLED)
    assert next_listing([], [closed], SPEC, after=NOW) is None


def test_a_deadline_already_looked_at_is_not_asked_for_again() -> None:
    """A limit a gate refused (a pinned candidate) must not make the controller list in a loop."""
    running = record("i1", vast_id=1, phase=Phase.RUNNING, first_running_at=NOW - 600)
    assert next_listing([running], [], SPEC, after=NOW) is None
    other = spec(name="c2")
    assert (
        next_listing(
            [record("i3", vast_id=3, phase=Phase.RUNNING, first_running_at=NOW)],
            [],
            other,
            after=NOW - 1,
        )
        is None
    )
