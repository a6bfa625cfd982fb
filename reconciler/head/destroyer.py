"""The head's own destroys: extra candidates the moment a request fills, and instances that failed
their token check.

The decision that asks for a destroy has already saved the record as `destroying` with intent
`destroyed` (intent before the call). This thread makes the call through the `Provider` (the vast
client: the account key never leaves the head), ledgers the call and its outcome, and marks the
record destroyed once vast confirms. A call that fails leaves the record `destroying`, which the
planner's finishing destroy completes on a later tick, exactly as for the executor's own destroys.
It runs in its own thread so an enrollment is answered without waiting on vast.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import replace

from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head.decisions import Destroy, put
from reconciler.head.shared import LedgerSink, RecordsHost
from reconciler.model.records import Phase, Records
from reconciler.state.ledger import LedgerKind

log = logging.getLogger("reconciler.head")


class Destroyer:
    def __init__(
        self,
        *,
        cluster: str,
        provider: Provider,
        host: RecordsHost,
        ledger: LedgerSink,
        clock: Clock,
    ) -> None:
        self.cluster = cluster
        self.provider = provider
        self.host = host
        self.ledger = ledger
        self.clock = clock
        self._queue: queue.Queue[Destroy | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rv-head-destroyer", daemon=True)
            self._thread.start()

    def submit(self, destroy: Destroy) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(destroy)
        self.start()

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted destroy has been tried; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what was asked (a destroy asked for must still be made), then end the thread."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self.carry_out(item)
            except Exception:  # a destroyer that dies would leave every later destroy undone
                log.exception("cluster %s: destroy of %s failed", self.cluster, item.record_id)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def carry_out(self, destroy: Destroy) -> None:
        """One destroy: the call, then the record marked destroyed, each step in the ledger."""
        if destroy.vast_id is None:
            self._log(LedgerKind.OUTCOME, destroy, "no vast id yet: left for the planner")
            return
        self._log(LedgerKind.CALL, destroy, f"destroy instance {destroy.vast_id}")
        try:
            gone_now = self.provider.destroy_instance(destroy.vast_id)
        except Exception as exc:
            self._log(LedgerKind.OUTCOME, destroy, f"failed: {exc}", outcome="error")
            return
        now = self.clock.now()

        def ended(records: Records, _now: float) -> Records:
            record = records.instances.get(destroy.record_id)
            if record is None or record.phase is Phase.DESTROYED:
                return records
            return put(records, replace(record, phase=Phase.DESTROYED, ended_at=now))

        with self.host.lock:
            self.host.mutate(ended)
            what = "destroyed" if gone_now else "was already gone"
            self._log(LedgerKind.OUTCOME, destroy, f"instance {destroy.vast_id} {what}", "ok")

    def _log(
        self, kind: LedgerKind, destroy: Destroy, message: str, outcome: str | None = None
    ) -> None:
        data = {"action": "destroy"} | ({"outcome": outcome} if outcome else {})
        with self.host.lock:
            self.ledger.log(
                self.cluster,
                kind,
                destroy.cls,
                message,
                record=destroy.record_id,
                instance=destroy.vast_id,
                data=data,
            )
