"""`down` ends nothing before its confirmation: the lock, the listing, the question, and only then
the Ray head's stop and the destroys (issue 14: a declined `down` had already killed the head)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from reconciler import downing, operations
from reconciler.clock import FakeClock
from reconciler.deps import Deps
from reconciler.model.observed import Instance
from reconciler.state.filestore import FileStore

LABEL = "rv.local-sim.0123abcd.i1"


class Events:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.seen: list[str] = []

    def locked(self) -> bool:
        holder = FileStore(self.state_dir, clock=FakeClock()).lock_holder()
        return holder is not None and holder.info.operation == "down"


class FakeVast:
    """The part of vast `down` calls: a listing and destroys, each noted in order."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.instances = {7: Instance(id=7, label=LABEL, actual_status="running", dph_total=0.2)}

    def list_instances(self) -> list[Instance]:
        self.events.seen.append("list" + (" (locked)" if self.events.locked() else ""))
        return list(self.instances.values())

    def destroy_instance(self, instance_id: int) -> bool:
        self.events.seen.append(f"destroy {instance_id}")
        del self.instances[instance_id]
        return True


def _deps(
    tmp_path: Path, events: Events, vast: FakeVast, *, interactive: bool, answer: str
) -> Deps:
    def ask(prompt: str) -> str:
        events.seen.append("ask" + (" (locked)" if events.locked() else ""))
        return answer

    return Deps(
        clock=FakeClock(1_800_000_000.0),
        env={},
        state_dir=tmp_path / ".ray-vast",
        out=io.StringIO(),
        err=io.StringIO(),
        interactive=interactive,
        ask=ask,
        provider_factory=lambda url: vast,  # type: ignore[arg-type,return-value]
    )


def _head(events: Events) -> downing.HeadStop:
    def stop() -> bool:
        events.seen.append("stop head" + (" (locked)" if events.locked() else ""))
        return True

    return downing.HeadStop("the Ray head of local-sim (pid 4242)", stop)


@pytest.mark.parametrize(("interactive", "answer"), [(False, ""), (True, "no")])
def test_a_declined_down_ends_nothing(tmp_path: Path, interactive: bool, answer: str) -> None:
    events = Events(tmp_path / ".ray-vast")
    vast = FakeVast(events)
    deps = _deps(tmp_path, events, vast, interactive=interactive, answer=answer)
    with pytest.raises(operations.OperationError, match="Nothing was"):
        downing.down(deps, "local-sim", [], auto_approve=False, head=_head(events))
    assert "stop head" not in " ".join(events.seen)
    assert not any(e.startswith("destroy") for e in events.seen)
    assert set(vast.instances) == {7}
    shown = deps.out.getvalue()  # type: ignore[attr-defined]
    assert "will destroy 1 instance(s)" in shown and "will stop the Ray head of local-sim" in shown


def test_down_locks_asks_then_stops_the_head_then_destroys(tmp_path: Path) -> None:
    events = Events(tmp_path / ".ray-vast")
    vast = FakeVast(events)
    deps = _deps(tmp_path, events, vast, interactive=True, answer="yes")
    assert downing.down(deps, "local-sim", [], auto_approve=False, head=_head(events)) == 0
    expected = ["list (locked)", "ask (locked)", "stop head (locked)", "destroy 7"]
    assert events.seen[:4] == expected  # then listings until vast confirms
    assert not events.locked()


def test_auto_approved_down_with_only_a_head_stops_it_under_the_lock(tmp_path: Path) -> None:
    events = Events(tmp_path / ".ray-vast")
    vast = FakeVast(events)
    vast.instances.clear()
    deps = _deps(tmp_path, events, vast, interactive=False, answer="")
    assert downing.down(deps, "local-sim", [], auto_approve=True, head=_head(events)) == 0
    assert events.seen == ["list (locked)", "stop head (locked)"]
