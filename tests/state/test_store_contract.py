"""The one contract every state store keeps, run against the file store and the memory store."""

from __future__ import annotations

import dataclasses
import math
import uuid

import pytest

from reconciler import __version__
from reconciler.state import (
    MASK,
    Liveness,
    LockLostError,
    LockNotHeldError,
    SerialMismatchError,
    StateConflictError,
    StateError,
    StateLocked,
    StateLockedError,
    UnlockRefusedError,
    locked,
)
from reconciler.state.errors import LineageMismatchError
from tests.state.conftest import SECRET, Stores

RECORDS = {"clusters": {"demo": {"digest": "abc"}}, "instances": {"i-1": {"vast_id": 17}}}


def test_an_empty_store_reads_as_none(stores: Stores) -> None:
    assert stores.make().read() is None


def test_the_first_write_creates_a_uuid4_lineage_and_serial_1(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        written = store.write(RECORDS, based_on=None)
    assert uuid.UUID(written.lineage).version == 4
    assert written.serial == 1
    assert written.version == 1
    assert written.ray_vast_version == __version__
    assert written.records == RECORDS
    assert stores.make().read() == written


def test_lineage_differs_between_two_new_states(
    stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> None:
    store = stores.make()
    with locked(store, "apply"):
        first = store.write(RECORDS, based_on=None)
    other = stores.elsewhere(tmp_path_factory.mktemp("other")).make()
    with locked(other, "apply"):
        second = other.write(RECORDS, based_on=None)
    assert first.lineage != second.lineage


def test_writing_identical_content_does_not_bump_the_serial(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        first = store.write(RECORDS, based_on=None)
        reordered = {"instances": {"i-1": {"vast_id": 17}}, "clusters": {"demo": {"digest": "abc"}}}
        again = store.write(reordered, based_on=first)
    assert again == first
    assert stores.make().read() == first


def test_changed_content_bumps_the_serial_by_one_and_keeps_the_lineage(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        first = store.write(RECORDS, based_on=None)
        second = store.write({**RECORDS, "blocklist": {"77": 1.5}}, based_on=first)
        third = store.write({}, based_on=second)
    assert (second.serial, third.serial) == (2, 3)
    assert first.lineage == second.lineage == third.lineage
    assert stores.make().read() == third


def test_a_write_based_on_a_foreign_lineage_is_refused(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        mine = store.write(RECORDS, based_on=None)
        foreign = dataclasses.replace(mine, lineage=str(uuid.uuid4()))
        with pytest.raises(LineageMismatchError, match=mine.lineage):
            store.write({"stolen": True}, based_on=foreign)
    assert stores.make().read() == mine


def test_a_write_that_would_start_a_new_state_over_an_existing_one_is_refused(
    stores: Stores,
) -> None:
    store = stores.make()
    with locked(store, "apply"):
        mine = store.write(RECORDS, based_on=None)
        with pytest.raises(LineageMismatchError):
            store.write({"fresh": True}, based_on=None)
    assert stores.make().read() == mine


def test_a_write_based_on_an_old_serial_is_refused(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        first = store.write(RECORDS, based_on=None)
        second = store.write({"n": 2}, based_on=first)
        with pytest.raises(SerialMismatchError):
            store.write({"n": 3}, based_on=first)
    assert stores.make().read() == second


def test_a_write_based_on_a_state_that_no_longer_exists_is_refused(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        mine = store.write(RECORDS, based_on=None)
    other = stores.elsewhere(stores.tmp_path / "elsewhere").make()
    with locked(other, "apply"), pytest.raises(StateConflictError):
        other.write(RECORDS, based_on=mine)
    assert other.read() is None


def test_writing_needs_the_lock(stores: Stores) -> None:
    store = stores.make()
    with pytest.raises(LockNotHeldError):
        store.write(RECORDS, based_on=None)
    assert store.read() is None


def test_records_that_json_cannot_carry_are_refused_before_anything_is_written(
    stores: Stores,
) -> None:
    store = stores.make()
    with locked(store, "apply"):
        for bad in ({"x": math.nan}, {"x": {1, 2}}, {"x": {1: "int key"}}):
            with pytest.raises(ValueError, match="records"):
                store.write(bad, based_on=None)
    assert store.read() is None


def test_reads_return_copies_the_caller_may_change(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        written = store.write(RECORDS, based_on=None)
    written.records["instances"]["i-1"]["vast_id"] = 99
    read = store.read()
    assert read is not None
    read.records["clusters"].clear()
    assert stores.make().read() == dataclasses.replace(written, records=RECORDS)


def test_secrets_in_records_are_masked_before_they_are_saved(stores: Stores) -> None:
    store = stores.make(secrets=(SECRET,))
    with locked(store, "apply"):
        store.write({"env": {"KEY": SECRET, f"k-{SECRET}": [f"Bearer {SECRET}"]}}, based_on=None)
    read = stores.make().read()
    assert read is not None
    assert read.records == {"env": {"KEY": MASK, f"k-{MASK}": [f"Bearer {MASK}"]}}


def test_lock_records_who_holds_it_and_unlock_releases_it(stores: Stores) -> None:
    store, other = stores.make(pid=111), stores.make(pid=222)
    info = store.lock("apply")
    assert (info.operation, info.pid, info.version) == ("apply", 111, __version__)
    assert info.who.startswith("tester@")
    assert info.created == stores.clock.now()
    assert uuid.UUID(info.id)
    assert store.held == info
    holder = other.lock_holder()
    assert holder is not None
    assert (holder.info, holder.liveness) == (info, Liveness.ALIVE)
    store.unlock()
    assert store.held is None
    assert other.lock_holder() is None
    assert other.lock("watch").operation == "watch"
    other.unlock()


def test_a_second_locker_is_refused_with_the_owners_details(stores: Stores) -> None:
    owner, second = stores.make(pid=111), stores.make(pid=222)
    info = owner.lock("watch")
    with pytest.raises(StateLocked) as refused:
        second.lock("apply")
    error = refused.value
    assert isinstance(error, StateLockedError)
    assert error.info == info
    assert not error.stale
    message = str(error)
    for detail in (info.id, "watch", info.who, "111", info.version, "UTC"):
        assert detail in message
    assert f"ray-vast state force-unlock {info.id}" in message
    assert second.held is None
    assert stores.clock.sleeps == []  # no timeout: refused at once
    owner.unlock()


def test_unlock_without_the_lock_is_an_error(stores: Stores) -> None:
    with pytest.raises(LockNotHeldError):
        stores.make().unlock()


def test_locking_twice_from_one_store_is_an_error(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"), pytest.raises(StateError, match="already holds"):
        store.lock("apply")


def test_lock_timeout_retries_with_backoff_on_the_clock_then_gives_up(stores: Stores) -> None:
    owner, waiter = stores.make(pid=1), stores.make(pid=2)
    info = owner.lock("watch")
    start = stores.clock.now()
    with pytest.raises(StateLockedError) as refused:
        waiter.lock("apply", timeout_seconds=30)
    assert stores.clock.sleeps == [1, 2, 4, 8, 15]  # Terraform's backoff, cut at the deadline
    assert stores.clock.now() - start == 30
    assert refused.value.info == info
    assert "after waiting 30s" in str(refused.value)
    owner.unlock()


def test_lock_timeout_takes_the_lock_once_the_owner_releases_it(stores: Stores) -> None:
    owner, waiter = stores.make(pid=1), stores.make(pid=2)
    owner.lock("watch")
    released_after = 3

    def release_on_third_sleep() -> None:
        if len(stores.clock.sleeps) == released_after:
            owner.unlock()

    stores.clock.on_sleep = release_on_third_sleep
    info = waiter.lock("apply", timeout_seconds=60)
    assert len(stores.clock.sleeps) == released_after
    assert waiter.held == info
    waiter.unlock()


def test_force_unlock_with_the_wrong_id_changes_nothing(stores: Stores) -> None:
    owner, human = stores.make(pid=1), stores.make(pid=2)
    info = owner.lock("watch")
    with pytest.raises(UnlockRefusedError):
        human.force_unlock(str(uuid.uuid4()))
    holder = human.lock_holder()
    assert holder is not None
    assert holder.info == info
    owner.unlock()


def test_force_unlock_with_no_lock_is_refused(stores: Stores) -> None:
    with pytest.raises(UnlockRefusedError, match="no state lock"):
        stores.make().force_unlock(str(uuid.uuid4()))


def test_force_unlock_with_the_right_id_frees_the_lock_and_the_old_owner_cannot_write(
    stores: Stores,
) -> None:
    owner, human = stores.make(pid=1), stores.make(pid=2)
    with locked(owner, "apply"):
        base = owner.write(RECORDS, based_on=None)
    info = owner.lock("watch")
    removed = human.force_unlock(info.id)
    assert removed.info == info
    assert human.lock_holder() is None
    human_info = human.lock("apply")
    with pytest.raises(LockLostError):
        owner.write({"late": True}, based_on=base)
    with pytest.raises(LockLostError):
        owner.unlock()
    holder = human.lock_holder()
    assert holder is not None
    assert holder.info == human_info  # the old owner's unlock did not remove the new lock
    assert human.read() == base
    human.unlock()


def test_force_unlock_of_ones_own_lock_is_an_unlock(stores: Stores) -> None:
    store = stores.make()
    info = store.lock("apply")
    assert store.force_unlock(info.id).info == info
    assert store.held is None
    assert stores.make().lock_holder() is None


def test_a_pushed_state_keeps_its_lineage_and_serial_in_an_empty_store(
    stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> None:
    source = stores.make()
    with locked(source, "apply"):
        first = source.write(RECORDS, based_on=None)
        moved = source.write({**RECORDS, "n": 2}, based_on=first)
    target = stores.elsewhere(tmp_path_factory.mktemp("target")).make()
    with locked(target, "migrate"):
        pushed = target.push(moved)
        assert (pushed.lineage, pushed.serial, pushed.records) == (
            moved.lineage,
            moved.serial,
            moved.records,
        )
        again = target.write({**RECORDS, "n": 3}, based_on=pushed)  # it goes on from there
    assert again.serial == moved.serial + 1 and again.lineage == moved.lineage


def test_a_push_into_a_store_that_holds_a_state_is_refused(stores: Stores) -> None:
    store = stores.make()
    with locked(store, "apply"):
        mine = store.write(RECORDS, based_on=None)
        with pytest.raises(LineageMismatchError, match="only into an empty store"):
            store.push(dataclasses.replace(mine, lineage=str(uuid.uuid4())))
    assert stores.make().read() == mine


def test_check_lease_holds_while_the_lock_is_ours_and_not_after_a_force_unlock(
    stores: Stores,
) -> None:
    owner, human = stores.make(pid=1), stores.make(pid=2)
    with pytest.raises(LockNotHeldError):
        owner.check_lease()
    info = owner.lock("apply")
    owner.check_lease()
    human.force_unlock(info.id)
    with pytest.raises(LockLostError):
        owner.check_lease()
