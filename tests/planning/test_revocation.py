"""Only ended records' certificates are revoked (issue 13; issue 21 point 5: never a lost one's)."""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Intent, Phase, Role
from reconciler.planning.revocation import revoke_ended
from tests.planning.builders import record, records


def test_ended_and_ending_workers_certificates_are_revoked_and_nothing_else() -> None:
    serving = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, cert_serial=11)
    ending = replace(
        serving, id="w2", cert_serial=12, intent=Intent.DESTROYED, phase=Phase.DESTROYING
    )
    ended = replace(
        serving, id="w3", cert_serial=13, intent=Intent.DESTROYED, phase=Phase.DESTROYED
    )
    lost = replace(serving, id="w4", cert_serial=14, lost=True)
    stopped = replace(
        serving, id="w5", cert_serial=15, intent=Intent.STOPPED, phase=Phase.STOPPED
    )  # a deliberate stop keeps its identity for the resume (DESIGN.md 10)
    once = revoke_ended(records(serving, ending, ended, lost, stopped))
    assert sorted(once.revoked_certs) == [12, 13]
    assert revoke_ended(once) is once  # nothing more to do: nothing saved


def test_a_lost_worker_keeps_its_certificate_until_its_record_ends() -> None:
    """Lost may be the path, not the machine: a worker refused when its path heals destroys
    itself. Its certificate goes when its record ends (went-silent, scale-down, down)."""
    lost = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, cert_serial=21)
    lost = replace(lost, lost=True)
    kept = revoke_ended(records(lost))
    assert kept.revoked_certs == ()
    ended = replace(lost, intent=Intent.DESTROYED, phase=Phase.DESTROYING)  # went silent
    assert revoke_ended(records(ended)).revoked_certs == (21,)
