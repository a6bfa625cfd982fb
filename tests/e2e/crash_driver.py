"""`apply --auto-approve` that SIGKILLs itself at one persistence point (run by test_crash.py).

usage: python crash_driver.py STATE_DIR SPEC POINT
POINT counts the persistence points of the apply in order: every state save, and every provider
call that changes something at vast (the moment after vast answered and before it is saved).
The process kills itself with SIGKILL right after point POINT, like a power cut would.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from reconciler.clock import Clock, SystemClock
from reconciler.deps import Deps, StoreFactory
from reconciler.operations import apply_specs
from reconciler.spec.loader import load
from reconciler.state.filestore import FileStore
from reconciler.state.store import StateStore
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings


class Points:
    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.seen = 0

    def passed(self) -> None:
        self.seen += 1
        if self.seen == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)


class CrashingStore(FileStore):
    points: Points

    def write(self, records: Any, *, based_on: Any) -> Any:
        snapshot = super().write(records, based_on=based_on)
        self.points.passed()
        return snapshot


class CrashingProvider:
    def __init__(self, inner: Any, points: Points) -> None:
        self.inner = inner
        self.points = points

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in ("create_instance", "destroy_instance", "stop_instance", "start_instance"):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            self.points.passed()
            return result

        return call


def crashing_stores(points: Points) -> StoreFactory:
    def make(state_dir: Path, *, clock: Clock, secrets: tuple[str, ...]) -> StateStore:
        store = CrashingStore(state_dir, clock=clock, secrets=secrets)
        store.points = points
        return store

    return make


def main() -> int:
    state_dir, spec, point = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    points = Points(point)
    env = dict(os.environ)
    clock = SystemClock()
    inner = client_from_settings(
        env=env, spec_url=None, clock=clock, settings=ClientSettings(pacing=False)
    )
    deps = Deps(
        clock=clock,
        env=env,
        state_dir=state_dir,
        out=sys.stdout,
        err=sys.stderr,
        interactive=False,
        ask=input,
        provider_factory=lambda url: CrashingProvider(inner, points),  # type: ignore[arg-type,return-value]
        store_factory=crashing_stores(points),
    )
    code = apply_specs(deps, list(load(spec).clusters), auto_approve=True, allow_mass_destroy=False)
    print(f"POINTS {points.seen}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
