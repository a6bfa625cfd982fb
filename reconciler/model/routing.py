"""The ledger's routing table: every detection class goes to a fixed set of outcomes.

Detections do not each carry their own destroy logic (DESIGN.md rule 8). A net names a class; this
table says what follows from it. A class the table does not know routes to "alert a human", never
to a retry: retrying an unclassified permanent failure spends real money to reach the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    NOTHING = "do-nothing"
    RETRY = "retry-same-machine"
    FAIL_JOB = "fail-the-job"
    REPLACE = "replace-the-machine"
    BLOCKLIST = "stop-using-that-hardware"
    HALT = "halt-provisioning"
    ALERT = "alert-a-human"


@dataclass(frozen=True)
class Route:
    """What a class leads to: outcomes, whether the machine is ended (or only stopped), and the
    blocklist reason."""

    outcomes: tuple[Outcome, ...]
    ends_machine: bool = True
    blocklist: str | None = None
    stops_machine: bool = False

    @property
    def alerts(self) -> bool:
        return Outcome.ALERT in self.outcomes


_REPLACE = (Outcome.REPLACE,)
_REPLACE_BLOCK = (Outcome.REPLACE, Outcome.BLOCKLIST)

ROUTES: dict[str, Route] = {
    # first seed: time limits for a candidate, and the endings seen by the provider
    "pull_timeout": Route(_REPLACE_BLOCK, blocklist="timeout"),
    "enrollment_timeout": Route(_REPLACE_BLOCK, blocklist="timeout"),
    "missing_from_listing": Route(_REPLACE),
    "exited": Route(_REPLACE_BLOCK, blocklist="network"),
    "create_failed": Route(_REPLACE_BLOCK, blocklist="network"),
    "public_ip_changed": Route(_REPLACE_BLOCK, blocklist="network"),
    "token_check_failed": Route((Outcome.REPLACE, Outcome.ALERT)),
    "extra_candidate": Route((Outcome.NOTHING,)),
    "late_candidate": Route((Outcome.NOTHING,)),
    "second_enrollment": Route(_REPLACE),
    # a deliberate stop (DESIGN.md 10): the worker keeps its disk and the instance stops; its
    # resume when the head starts it again; a resume the head did not ask for is a restart
    "deliberate_stop": Route((Outcome.NOTHING,), ends_machine=False),
    "resumed": Route((Outcome.NOTHING,), ends_machine=False),
    "resume_refused": Route(_REPLACE),
    # a start vast cannot carry out (its GPU was taken meanwhile: `scheduling`): a new rental
    "start_stuck": Route(_REPLACE),
    # second seed: the five nets
    # a request's slots still empty at its deadline: its candidates' hosts stalled it
    "provision_deadline": Route(_REPLACE_BLOCK, blocklist="timeout"),
    "never_reported": Route(_REPLACE_BLOCK, blocklist="boot"),
    "went_silent": Route(_REPLACE),
    "lost": Route((Outcome.NOTHING,), ends_machine=False),
    "orphan": Route((Outcome.NOTHING,)),
    # the money chain and scaling
    "idle_stop": Route((Outcome.NOTHING,), ends_machine=False, stops_machine=True),
    "idle_destroy": Route((Outcome.NOTHING,)),
    "scale_down": Route((Outcome.NOTHING,)),
    "scale_up": Route((Outcome.NOTHING,), ends_machine=False),
    "restart": Route((Outcome.RETRY,), ends_machine=False),
    "finish_destroy": Route((Outcome.NOTHING,)),
    "finish_stop": Route((Outcome.NOTHING,), ends_machine=False, stops_machine=True),
    # the money chain's stop as a handshake with the agent (DESIGN.md 11, `model.stopping`):
    # asked, acknowledged, called off before vast's stop, or stopped without the drain when the
    # agent never acknowledged (the disk-safe way)
    "stop_pending": Route((Outcome.NOTHING,), ends_machine=False),
    "stop_acknowledged": Route((Outcome.NOTHING,), ends_machine=False),
    "stop_cancelled": Route((Outcome.NOTHING,), ends_machine=False),
    "stop_unacknowledged": Route((Outcome.NOTHING,), ends_machine=False, stops_machine=True),
    "down": Route((Outcome.NOTHING,)),
    "removed_from_spec": Route((Outcome.NOTHING,)),
    # a removed cluster's machine that Ray work or a person's pin holds: kept, pruned later
    "prune_held": Route((Outcome.ALERT,), ends_machine=False),
    "breaker_open": Route((Outcome.HALT,), ends_machine=False),
    # the breaker opened again with no serving worker since the last time: a person looks
    "breaker_repeated": Route((Outcome.HALT, Outcome.ALERT), ends_machine=False),
    # the node type's configuration changed: the breaker starts afresh
    "breaker_reset": Route((Outcome.NOTHING,), ends_machine=False),
    # a worker that ended early (its slot counts toward the breaker); its end was its own
    "short_life": Route((Outcome.NOTHING,), ends_machine=False),
    # the cluster's Ray head cannot be read: nothing is rented (workers could not join)
    "ray_unreadable": Route((Outcome.HALT, Outcome.ALERT), ends_machine=False),
    # A permanent failure of the node type, not of a host: its image runs another Ray or Python
    # than the head's, which Ray refuses. The candidate is refused at enrollment (it reports and
    # destroys itself), the node type's other candidates are destroyed, the node type is halted
    # until its image or env changes (no retry on another host), a person is alerted.
    "ray_version_mismatch": Route((Outcome.HALT, Outcome.ALERT)),
    "halt_lifted": Route((Outcome.NOTHING,), ends_machine=False),
    # slots that ended with no worker (they count toward the breaker)
    "slots_no_worker": Route((Outcome.NOTHING,), ends_machine=False),
    "queue_wait_timeout": Route((Outcome.FAIL_JOB, Outcome.ALERT), ends_machine=False),
    "no_consumer": Route((Outcome.FAIL_JOB,), ends_machine=False),
    "stuck_dispatch": Route((Outcome.RETRY,), ends_machine=False),
    "pool_idle_release": Route((Outcome.NOTHING,), ends_machine=False),
    # the controller's own refusals: a person decides
    "mass_destroy_refused": Route((Outcome.ALERT,), ends_machine=False),
    "specs_invalid": Route((Outcome.ALERT,), ends_machine=False),
    # Ray asks for a shape no node type of the cluster can hold: nothing is rented for it
    "infeasible_demand": Route((Outcome.ALERT,), ends_machine=False),
    # a worker's own report before it destroys itself (agent side endings)
    "worker_report": Route(_REPLACE),
    # the head's own notes: enrollments, and messages it refused (the refusal is the action)
    "enrolled": Route((Outcome.NOTHING,), ends_machine=False),
    "serving": Route((Outcome.NOTHING,), ends_machine=False),
    "token_expired": Route((Outcome.NOTHING,), ends_machine=False),
    "token_reused": Route((Outcome.NOTHING,), ends_machine=False),
    "heartbeat_refused": Route((Outcome.NOTHING,), ends_machine=False),
    "tls_refused": Route((Outcome.NOTHING,), ends_machine=False),
    "bad_agent_message": Route((Outcome.ALERT,), ends_machine=False),
    "rate_limited": Route((Outcome.NOTHING,), ends_machine=False),
}

UNKNOWN = Route((Outcome.ALERT,), ends_machine=False)


def route(detection_class: str) -> Route:
    """The route of a class; an unknown class alerts a human and ends nothing."""
    return ROUTES.get(detection_class, UNKNOWN)
