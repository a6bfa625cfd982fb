"""What only the file store does: modes, atomic replacement, backup, corrupt files, lock files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler.state import (
    BACKUP_FILE,
    LOCK_FILE,
    STATE_FILE,
    FileStore,
    Identity,
    Liveness,
    LockFileUnreadableError,
    StateCorruptError,
    StateLockedError,
    StateMissingError,
    StateSnapshot,
    UnlockRefusedError,
    locked,
)
from reconciler.state.snapshot import decode
from tests.state.conftest import SECRET, RecordingClock

ROOT = Path(__file__).parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_states(store: FileStore, *contents: dict[str, object]) -> list[StateSnapshot]:
    written: list[StateSnapshot] = []
    with locked(store, "apply"):
        for records in contents:
            written.append(store.write(records, based_on=written[-1] if written else None))
    return written


class CrashBeforeRename(FileStore):
    """Writes the new version to its temporary file, then fails instead of renaming it in."""

    def _replace(self, src: Path, dst: Path) -> None:
        if dst.name == STATE_FILE:
            assert src.read_bytes().startswith(b"{")  # the temporary file was fully written
            raise OSError("simulated crash before rename")
        super()._replace(src, dst)


def test_a_new_store_does_no_io_until_it_locks(state_dir: Path, file_store: FileStore) -> None:
    assert file_store.read() is None
    assert not state_dir.exists()


def test_the_directory_is_0700_and_the_files_0600(state_dir: Path, file_store: FileStore) -> None:
    old_umask = os.umask(0)  # the loosest umask: modes must not depend on it
    try:
        write_states(file_store, {"a": 1}, {"a": 2})
        file_store.lock("apply")
        assert mode(state_dir / LOCK_FILE) == 0o600
        file_store.unlock()
    finally:
        os.umask(old_umask)
    assert mode(state_dir) == 0o700
    assert mode(state_dir / STATE_FILE) == 0o600
    assert mode(state_dir / BACKUP_FILE) == 0o600


def test_a_loose_existing_directory_is_tightened(state_dir: Path, file_store: FileStore) -> None:
    state_dir.mkdir(mode=0o755)
    state_dir.chmod(0o755)
    with locked(file_store, "apply"):
        pass
    assert mode(state_dir) == 0o700


def test_the_backup_holds_the_previous_version(file_store: FileStore) -> None:
    _, second, third = write_states(file_store, {"n": 1}, {"n": 2}, {"n": 3})
    assert decode(file_store.backup_path.read_bytes(), "backup") == second
    assert file_store.read() == third


def test_a_write_that_changes_nothing_leaves_both_files_alone(file_store: FileStore) -> None:
    _, second = write_states(file_store, {"n": 1}, {"n": 2})
    before = (file_store.path.read_bytes(), file_store.backup_path.read_bytes())
    with locked(file_store, "apply"):
        assert file_store.write({"n": 2}, based_on=second) == second
    assert (file_store.path.read_bytes(), file_store.backup_path.read_bytes()) == before


def test_a_crash_before_the_rename_leaves_the_previous_state_intact(
    state_dir: Path, clock: RecordingClock
) -> None:
    (first,) = write_states(FileStore(state_dir, clock=clock), {"n": 1})
    before = (state_dir / STATE_FILE).read_bytes()
    crashing = CrashBeforeRename(state_dir, clock=clock)
    with locked(crashing, "apply"), pytest.raises(OSError, match="simulated crash"):
        crashing.write({"n": 2}, based_on=first)
    assert (state_dir / STATE_FILE).read_bytes() == before
    assert FileStore(state_dir, clock=clock).read() == first
    assert sorted(p.name for p in state_dir.iterdir()) == [STATE_FILE, BACKUP_FILE]
    store = FileStore(state_dir, clock=clock)
    with locked(store, "apply"):
        assert store.write({"n": 2}, based_on=first).serial == 2


def test_the_file_matches_the_state_schema_and_carries_no_secret(file_store: FileStore) -> None:
    write_states(file_store, {"token": f"key={SECRET}", SECRET: [SECRET]})
    text = file_store.path.read_text()
    assert SECRET not in text
    schema = json.loads((ROOT / "schemas" / "state.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(json.loads(text))


def test_the_schemas_are_relative_symlinks_into_the_package() -> None:
    for name in ("state.schema.json", "ledger.schema.json"):
        link = ROOT / "schemas" / name
        assert link.is_symlink()
        assert os.readlink(link) == f"../reconciler/schemas/{name}"
        assert link.resolve() == (ROOT / "reconciler" / "schemas" / name).resolve()


def test_a_truncated_state_is_an_error_that_points_at_the_backup(file_store: FileStore) -> None:
    _, second = write_states(file_store, {"n": 1}, {"n": 2})
    data = file_store.path.read_bytes()
    file_store.path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StateCorruptError) as corrupt:
        file_store.read()
    message = str(corrupt.value)
    assert str(file_store.path) in message
    assert str(file_store.backup_path) in message
    assert "serial 1" in message
    with locked(file_store, "apply"), pytest.raises(StateCorruptError):
        file_store.write({"n": 3}, based_on=second)  # never written over, never read as empty
    assert file_store.path.read_bytes() == data[: len(data) // 2]


def test_a_corrupt_state_without_a_backup_says_so(file_store: FileStore) -> None:
    write_states(file_store, {"n": 1})
    file_store.path.write_text('{"version": 1, "serial": ')
    with pytest.raises(StateCorruptError, match="no backup"):
        file_store.read()


@pytest.mark.parametrize(
    "document",
    [
        "[]",
        '{"version": 1, "serial": 0, "lineage": "x", "ray_vast_version": "0", "records": {}}',
        '{"version": 1, "serial": 1, "lineage": "", "ray_vast_version": "0", "records": {}}',
        '{"version": 1, "serial": 1, "lineage": "x", "ray_vast_version": "0", "records": []}',
        '{"version": 1, "serial": "1", "lineage": "x", "ray_vast_version": "0", "records": {}}',
        '{"serial": 1, "lineage": "x", "ray_vast_version": "0", "records": {}}',
    ],
    ids=["array", "serial-0", "empty-lineage", "records-array", "serial-string", "no-version"],
)
def test_a_state_that_is_json_but_not_an_envelope_is_corrupt(
    state_dir: Path, file_store: FileStore, document: str
) -> None:
    state_dir.mkdir()
    (state_dir / STATE_FILE).write_text(document)
    with pytest.raises(StateCorruptError):
        file_store.read()


def test_a_missing_state_beside_its_backup_is_not_read_as_empty(file_store: FileStore) -> None:
    write_states(file_store, {"n": 1}, {"n": 2})
    file_store.path.unlink()
    with pytest.raises(StateMissingError, match=BACKUP_FILE):
        file_store.read()


def test_the_lock_file_holds_the_lock_info_and_is_gone_after_unlock(
    state_dir: Path, file_store: FileStore
) -> None:
    info = file_store.lock("apply")
    recorded = json.loads((state_dir / LOCK_FILE).read_text())
    assert recorded == info.to_json()
    assert recorded["path"] == str(state_dir / STATE_FILE)
    file_store.unlock()
    assert sorted(p.name for p in state_dir.iterdir()) == []


def test_an_unreadable_lock_file_is_left_for_a_human(
    state_dir: Path, file_store: FileStore
) -> None:
    state_dir.mkdir()
    (state_dir / LOCK_FILE).write_text("garbage")
    with pytest.raises(LockFileUnreadableError, match="delete that file by hand"):
        file_store.lock("apply")
    with pytest.raises(LockFileUnreadableError):
        file_store.force_unlock("anything")
    assert (state_dir / LOCK_FILE).read_text() == "garbage"


def test_a_lock_from_another_host_is_neither_alive_nor_stale(
    state_dir: Path, file_store: FileStore, clock: RecordingClock
) -> None:
    foreign = FileStore(state_dir, clock=clock, identity=Identity("ops@elsewhere", 99))
    info = foreign.lock("watch")
    # Leave the lock file as a process on another host would: present, with no flock here.
    os.link(state_dir / LOCK_FILE, state_dir / "copy")
    foreign.unlock()
    os.rename(state_dir / "copy", state_dir / LOCK_FILE)
    with pytest.raises(StateLockedError) as refused:
        file_store.lock("apply")
    assert refused.value.liveness is Liveness.UNKNOWN
    assert not refused.value.stale
    assert "elsewhere" in str(refused.value)
    assert "cannot be checked" in str(refused.value)
    with pytest.raises(UnlockRefusedError):
        file_store.force_unlock("not-the-id")
    assert file_store.force_unlock(info.id).info == info
    assert file_store.lock_holder() is None
