"""The one applier: every change at vast, from whichever part decided it, through one executor.

The watch controller's ticks, a CLI command (`apply`, `down`) and the head's immediate destroys
(extra candidates, refused enrollments, proven token-check failures) all hand their decisions here
as plan actions. The decision and its intent are saved under the records lock by whoever decided;
the applier makes the calls without it. A tick or a command waits for its plan (`apply`); the head
submits and answers the agent at once (`submit`), and the applier's own thread makes the calls
right away, beside whatever the tick is doing. Both use one `InFlight`, so no machine gets two
calls at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.applying.books import Books
from reconciler.applying.executor import ApplyResult, Executor
from reconciler.applying.launch import ImageLauncher, Launcher
from reconciler.applying.provider import Provider
from reconciler.applying.steps import InFlight
from reconciler.model.plan import Action, Plan
from reconciler.model.spec import ClusterSpec

log = logging.getLogger("ray_vast.applier")


@dataclass
class Applier:
    provider: Provider
    books: Books
    now: Callable[[], float]
    specs: Callable[[], Mapping[str, ClusterSpec]] = lambda: {}
    # The launcher now (the head services give the controller theirs after it is built).
    launcher_of: Callable[[], Launcher] = ImageLauncher
    progress: Callable[[str], None] = lambda line: None
    stop_requested: Callable[[], bool] = lambda: False
    # Told of every result, whoever's plan it was (the controller lists a cluster again at once
    # when a machine of it ended).
    on_result: Callable[[ApplyResult], None] = lambda result: None
    inflight: InFlight = field(default_factory=InFlight)
    _queue: queue.Queue[Sequence[Action] | None] = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _pending: int = 0

    def executor(self, *, stoppable: bool = True) -> Executor:
        return Executor(
            provider=self.provider,
            journal=self.books,
            launcher=self.launcher_of(),
            specs=self.specs(),
            now=self.now,
            stop_requested=self.stop_requested if stoppable else lambda: False,
            progress=self.progress,
            inflight=self.inflight,
        )

    def commit(self, plan: Plan) -> None:
        """Save a plan's bookkeeping and ledger its findings (under the lock, or in the hold
        that planned it)."""
        self.executor().commit(plan)

    def carry_out(self, actions: Sequence[Action], *, stoppable: bool = True) -> ApplyResult:
        """Carry these actions out now, in this thread, which must not hold the records lock.
        `stoppable`: a stop request ends them after the call in flight (a plan); the head's
        destroys are not stoppable (a destroy asked for must still be made)."""
        result = self.executor(stoppable=stoppable).carry_out(actions)
        self.on_result(result)
        return result

    def apply(self, plan: Plan) -> ApplyResult:
        self.commit(plan)
        return self.carry_out(plan.actions)

    def in_caller(self) -> InCaller:
        """This applier, carrying submitted actions out in the submitter's thread (virtual time,
        where no other thread runs)."""
        return InCaller(self)

    # --- the head's immediate destroys, on the applier's thread ----------------------------------

    def submit(self, actions: Sequence[Action]) -> None:
        """Carry these out as soon as possible, without the caller waiting (their intent is
        already saved: a crash before the call leaves them to the planner's finishing destroy)."""
        if not actions:
            return
        with self._idle:
            self._pending += 1
        self._queue.put(tuple(actions))
        self._start()

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted action has been tried; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what was submitted (a destroy asked for must still be made), then end."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(None)
        thread.join(timeout)
        self._thread = None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rv-applier", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            actions = self._queue.get()
            if actions is None:
                return
            try:
                self.carry_out(actions, stoppable=False)
            except Exception:  # an applier that dies would leave every later destroy undone
                log.exception("the applier could not carry out %d action(s)", len(actions))
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


@dataclass(frozen=True)
class InCaller:
    """Carries submitted actions out at once, in the caller's thread, with `applier`."""

    applier: Applier

    def submit(self, actions: Sequence[Action]) -> None:
        if actions:
            self.applier.carry_out(actions, stoppable=False)
