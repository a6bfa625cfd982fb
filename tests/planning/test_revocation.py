"""Certificates of ended, ending and lost workers are revoked (issue 13)."""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Intent, Phase, Role
from reconciler.planning.revocation import revoke_ended
from tests.planning.builders import record, records


def test_ended_ending_and_lost_workers_certificates_are_revoked() -> None:
    serving = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, cert_serial=11)
    ending = replace(
        serving, id="w2", cert_serial=12, intent=Intent.DESTROYED, phase=Phase.DESTROYING
    )
    ended = replace(
        serving, id="w3", cert_serial=13, intent=Intent.DESTROYED, phase=Phase.DESTROYED
    )
    lost = replace(serving, id="w4", cert_serial=14, lost=True)
    once = revoke_ended(records(serving, ending, ended, lost))
    assert sorted(once.revoked_certs) == [12, 13, 14]  # the serving worker keeps its own
    assert revoke_ended(once) is once  # nothing more to do: nothing saved
