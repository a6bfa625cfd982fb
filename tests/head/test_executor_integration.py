"""The executor renting with the head's launcher: the join token's hash is saved before the create
call, the token itself travels only in the container's environment, and the candidate enrolls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from reconciler.applying.executor import Executor
from reconciler.applying.journal import Journal
from reconciler.clock import SystemClock
from reconciler.head import tokens
from reconciler.model.changes import Changes
from reconciler.model.codec import decode, encode
from reconciler.model.labels import label_for
from reconciler.model.observed import CreateRequest, OfferSearch
from reconciler.model.plan import Action, ActionKind, OfferChoice, Plan
from reconciler.model.records import Records, Role
from reconciler.model.requestrecord import Request, Slot
from reconciler.state.ledger import LedgerWriter
from reconciler.state.memory import MemoryStore

from .harness import Rented, enroll_body, head_world


class WatchedStore(MemoryStore):
    """A memory store that notes, for each write, how many instances vast had at that moment."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.instances: Any = lambda: {}
        self.writes: list[tuple[Records, int]] = []

    def write(self, records: Any, *, based_on: Any) -> Any:
        self.writes.append((decode(Records, dict(records)), len(self.instances())))
        return super().write(records, based_on=based_on)


def rent_plan(journal: Journal, offer: Any, now: float) -> Plan:
    choice = OfferChoice(offer.id, offer.machine_id, offer.host_id, offer.dph_total, 0.0,
                         None, None, None, None)  # fmt: skip
    rent = Action(
        ActionKind.RENT,
        "hc",
        "scale_up",
        node_type="cpu",
        record="i1",
        request="q1",
        label=label_for("hc", journal.lineage, "i1"),
        offer=choice,
    )
    request = Request("q1", "hc", "cpu", journal.lineage, now, now + 600, (Slot("q1s1"),))
    return Plan(
        created_at=now,
        lineage=journal.lineage,
        serial=journal.serial,
        listing_fingerprint="",
        actions=(rent,),
        costs=(),
        changes=Changes(requests={"q1": request}),
    )


def test_the_executor_saves_the_token_hash_before_it_calls_vast(tmp_path: Path):
    store = WatchedStore(clock=SystemClock())
    store.lock("apply")
    ledger = LedgerWriter.open(tmp_path / "executor" / "ledger.jsonl", clock=SystemClock())
    journal = Journal(store=store, ledger=ledger, snapshot=store.write({}, based_on=None))
    with head_world(tmp_path, lineage=journal.lineage) as world:
        store.instances = lambda: world.sim.instances
        offer = world.client.search_offers(OfferSearch())[0]
        executor = Executor(
            provider=world.client,
            journal=journal,
            launcher=world.launcher,
            specs={"hc": world.spec},
            now=time.time,
        )
        result = executor.apply(rent_plan(journal, offer, time.time()))
        assert result.ok, result.failed

        [vast_id] = list(world.sim.instances)
        env = world.sim.instance(vast_id).user_env
        token = env["RV_JOIN_TOKEN"]
        digest = tokens.digest(token)
        first = next(i for i, (records, _) in enumerate(store.writes) if digest in records.tokens)
        assert store.writes[first][1] == 0  # saved while vast had no instance yet
        assert all(token not in str(encode(records)) for records, _ in store.writes)

        # the head decides on the records the executor saved: the candidate enrolls
        saved = journal.records()
        assert saved.instances["i1"].vast_id == vast_id
        world.change(lambda r: saved)
        ports = CreateRequest("img", 1, "label", ports=world.launcher.ports.container_ports)
        reply = world.call("POST", "/enroll", enroll_body(Rented("i1", vast_id, token, ports)))
        assert reply.status == 200, reply.doc
        assert world.record("i1").role is Role.WORKER
    ledger.close()
