"""Format versions: the upgrade chain, golden round-trips, and refusing what is too new."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler.state import CURRENT_VERSION, STATE_FILE, FileStore, StateTooNewError, locked
from reconciler.state.errors import StateCorruptError
from reconciler.state.snapshot import decode, encode
from reconciler.state.versions import UPGRADES, upgrade
from tests.state.conftest import RecordingClock

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[2]
GOLDEN = sorted(p.name.removesuffix(".in.json") for p in FIXTURES.glob("*.in.json"))


def test_every_old_version_has_one_upgrade_step() -> None:
    assert sorted(UPGRADES) == list(range(CURRENT_VERSION))


@pytest.mark.parametrize("name", GOLDEN)
def test_an_old_state_upgrades_to_the_golden_current_one(name: str) -> None:
    upgraded = encode(decode((FIXTURES / f"{name}.in.json").read_bytes(), name))
    assert upgraded.decode() == (FIXTURES / f"{name}.out.json").read_text()


@pytest.mark.parametrize("name", GOLDEN)
def test_a_current_golden_state_round_trips_unchanged(name: str) -> None:
    current = (FIXTURES / f"{name}.out.json").read_bytes()
    assert encode(decode(current, name)) == current
    schema = json.loads((ROOT / "schemas" / "state.schema.json").read_text())
    Draft202012Validator(schema).validate(json.loads(current))


def test_upgrade_v0_keeps_identity_and_renames_the_payload() -> None:
    old = json.loads((FIXTURES / "v0.in.json").read_text())
    new = upgrade(dict(old), "v0")
    assert (new["version"], new["serial"], new["lineage"]) == (1, old["serial"], old["lineage"])
    assert new["ray_vast_version"] == old["tool_version"]
    assert new["records"] == old["resources"]
    assert "resources" not in new and "tool_version" not in new


def test_the_file_store_reads_an_old_state_and_writes_it_back_current(
    state_dir: Path, clock: RecordingClock
) -> None:
    state_dir.mkdir()
    shutil.copy(FIXTURES / "v0.in.json", state_dir / STATE_FILE)
    store = FileStore(state_dir, clock=clock)
    old = store.read()
    assert old is not None
    assert (old.version, old.serial) == (1, 7)
    with locked(store, "apply"):
        new = store.write({**old.records, "blocklist": {"9": 1.0}}, based_on=old)
    assert (new.serial, new.lineage) == (8, old.lineage)
    on_disk = json.loads((state_dir / STATE_FILE).read_text())
    assert (on_disk["version"], on_disk["serial"]) == (CURRENT_VERSION, 8)


def test_a_state_from_a_newer_ray_vast_is_refused_and_left_alone(
    state_dir: Path, clock: RecordingClock
) -> None:
    newer = json.loads((FIXTURES / "v0.out.json").read_text())
    newer["version"] = CURRENT_VERSION + 1
    newer["ray_vast_version"] = "9.0.0"
    newer["records"] = {"shape": "we cannot know"}
    state_dir.mkdir()
    text = json.dumps(newer)
    (state_dir / STATE_FILE).write_text(text)
    store = FileStore(state_dir, clock=clock)
    with pytest.raises(StateTooNewError) as refused:
        store.read()
    message = str(refused.value)
    assert f"format version {CURRENT_VERSION + 1}" in message
    assert "newer version of ray-vast" in message
    assert "9.0.0" in message
    with locked(store, "apply"), pytest.raises(StateTooNewError):
        store.write({}, based_on=None)
    assert (state_dir / STATE_FILE).read_text() == text


@pytest.mark.parametrize("version", ["1", -1, None, True, 1.0])
def test_a_version_that_is_not_a_natural_number_is_corrupt(version: object) -> None:
    with pytest.raises(StateCorruptError, match="version"):
        upgrade({"version": version}, "test")
