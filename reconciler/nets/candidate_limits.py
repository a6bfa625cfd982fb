"""The first seed's limits on a candidate (and the listing checks that end any machine).

Checked on every listing: the pull limit, the enrollment limit (from when we first saw it
running), missing from vast's list for 60 s after the last list that showed it (one list without it
is not enough), vast status exited or a failed container create, and a public IP that changed after
enrollment. The clocks are ours (`first_observed_at`, `first_running_at`, `provider_seen_at`),
never vast's `start_date`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.model.observed import Instance
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal

# Docker writes "Error response from daemon: ..." (a bad image tag, a manifest unknown): matched
# whatever the case, so a create that failed fails at once instead of waiting out the pull limit.
CREATE_FAILURE_MARKERS = ("OCI runtime create failed", "error response from daemon")

# What vast's listing proves of a machine: it runs nothing, so a pin (work Ray or a person holds
# on it) holds nothing there. The record is closed and its slot replaced; the destroy call that
# goes with it is harmless (the adversary's seed 13: a pinned worker vast had ended stayed live
# for half an hour, priced as running, while its demand went unserved).
PROVEN = frozenset({"missing_from_listing", "exited"})


def detect(
    records: Iterable[InstanceRecord],
    listing: Mapping[int, Instance],
    specs: Mapping[str, ClusterSpec],
    *,
    lineage: str,
    now: float,
) -> list[Detection]:
    found = []
    for record in records:
        spec = specs.get(record.cluster)
        if spec is None or record.intent is not Intent.RUNNING or record.vast_id is None:
            continue
        if refusal(record, lineage=lineage, now=now, gate=Gate(respects_pin=False)) is not None:
            continue
        seen = listing.get(record.vast_id)
        finding = (
            _missing(record, seen, spec, now) if seen is None else _seen(record, seen, spec, now)
        )
        if finding and (finding[0] in PROVEN or not record.held(now)):
            found.append(Detection(record.id, finding[0], finding[1], record.vast_id))
    return found


def _missing(
    record: InstanceRecord, seen: None, spec: ClusterSpec, now: float
) -> tuple[str, str] | None:
    """The seed: ended 60 s after the last list that showed it, and one list without it does not
    end it. So at least two complete listings without it (the first at `missing_since`, this
    one) and the window passed since the last one that showed it; failed listings in between say
    nothing either way, and never count as listings without it."""
    return missing_finding(record, spec.watchdogs.missing_from_listing_seconds, now)


def missing_finding(record: InstanceRecord, window: float, now: float) -> tuple[str, str] | None:
    since = record.missing_since
    last = _last_seen(record)
    if since is None or since >= now or now - last < window:
        return None
    return (
        "missing_from_listing",
        f"not in vast's list for {now - last:.0f}s since the last list that showed it "
        f"(limit {window:g}s; lists without it since {now - since:.0f}s ago)",
    )


def _last_seen(record: InstanceRecord) -> float:
    if record.provider_seen_at is not None:
        return record.provider_seen_at
    return record.first_observed_at if record.first_observed_at is not None else record.created_at


def deadline(record: InstanceRecord, spec: ClusterSpec) -> float | None:
    """The earliest time a listing could end this record by the limits above (None: no limit
    runs). The controller lists at that time, so a limit fires within seconds of its threshold
    and not at the next reconcile."""
    if record.intent is not Intent.RUNNING or record.vast_id is None:
        return None
    times: list[float] = []
    if record.missing_since is not None:
        window = spec.watchdogs.missing_from_listing_seconds
        times.append(max(_last_seen(record) + window, record.missing_since + CONFIRM_SECONDS))
    node_type = spec.node_types.get(record.node_type)
    if record.role is Role.CANDIDATE and node_type is not None:
        if record.phase in (Phase.RENTING, Phase.PULLING) and record.first_observed_at is not None:
            times.append(record.first_observed_at + node_type.pull_limit_seconds)
        if record.first_running_at is not None and record.enrolled_at is None and not record.exempt:
            times.append(record.first_running_at + spec.watchdogs.enrollment_limit_seconds)
    return min(times) if times else None


# A listing without an instance is confirmed by another this long after it at the earliest.
CONFIRM_SECONDS = 5.0


def _seen(
    record: InstanceRecord, seen: Instance, spec: ClusterSpec, now: float
) -> tuple[str, str] | None:
    status = seen.actual_status
    message = seen.status_msg or ""
    if status == "exited":
        return "exited", "vast status exited" + (f": {message}" if message else "")
    if any(marker.lower() in message.lower() for marker in CREATE_FAILURE_MARKERS):
        return "create_failed", f"container create failed: {message}"
    if record.public_ip and seen.public_ipaddr and seen.public_ipaddr != record.public_ip:
        return "public_ip_changed", f"public IP {record.public_ip} -> {seen.public_ipaddr}"
    if record.role is Role.CANDIDATE:
        return _candidate_limits(record, spec, now)
    return None


def _candidate_limits(
    record: InstanceRecord, spec: ClusterSpec, now: float
) -> tuple[str, str] | None:
    node_type = spec.node_types.get(record.node_type)
    if node_type is None:
        return None
    if record.phase in (Phase.RENTING, Phase.PULLING) and record.first_observed_at is not None:
        pulling = now - record.first_observed_at
        if pulling >= node_type.pull_limit_seconds:
            return (
                "pull_timeout",
                f"still pulling after {pulling:.0f}s (limit {node_type.pull_limit_seconds}s)",
            )
    if record.first_running_at is not None and record.enrolled_at is None and not record.exempt:
        waiting = now - record.first_running_at
        limit = spec.watchdogs.enrollment_limit_seconds
        if waiting >= limit:
            return (
                "enrollment_timeout",
                f"seen running {waiting:.0f}s ago without enrolling (limit {limit}s)",
            )
    return None
