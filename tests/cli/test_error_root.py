"""The CLI catches one root, `RayVastError`: a failure ray-vast has put into words is one line,
`Error: ...`, and exit status 1; anything else (a `ValueError` included) is a bug and surfaces
with its traceback instead of passing for a clean refusal."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from reconciler import deps as deps_mod
from reconciler.cli import COMMANDS, STATE_COMMANDS, app, context
from reconciler.cli import inspect as inspect_cmd
from reconciler.clock import FakeClock
from reconciler.errors import InputError, RayVastError
from reconciler.spec.loader import load
from reconciler.views.ledger import parse_since
from tests.served import LOCAL_SIM

ENV = {"VAST_URL": "http://127.0.0.1:9", "VAST_API_KEY": "k", "RAY_VAST_STATE_DIR": ""}


def _status_raising(exc: Exception, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    def status(*_args: object, **_kwargs: object) -> int:
        raise exc

    monkeypatch.setattr(inspect_cmd.operations, "status", status)
    return CliRunner().invoke(app, ["status", "--state-dir", str(tmp_path / "s")], env=ENV)


def test_a_ray_vast_error_is_one_clean_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _status_raising(RayVastError("the thing failed; do this next"), tmp_path, monkeypatch)
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == "Error: the thing failed; do this next\n"
    assert "Traceback" not in result.output


def test_an_unexpected_value_error_is_not_swallowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _status_raising(ValueError("a bug"), tmp_path, monkeypatch)
    assert isinstance(result.exception, ValueError)
    assert str(result.exception) == "a bug"
    assert "Error: a bug" not in result.stderr


class Closing:
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("exc", "surfaces"), [(RayVastError("known"), typer.Exit), (ValueError("a bug"), ValueError)]
)
def test_the_clients_are_closed_however_the_command_ends(
    exc: Exception, surfaces: type[Exception]
) -> None:
    deps = Closing()
    with pytest.raises(surfaces), context.reported(deps):  # type: ignore[arg-type]
        raise exc
    assert deps.closed


def test_bad_input_the_cli_reported_is_a_ray_vast_error() -> None:
    """What a person gives that cannot be used is still said cleanly: a bad --since, specs of
    two provider URLs."""
    with pytest.raises(RayVastError, match="--since"):
        parse_since("yesterday-ish", 0.0)
    (spec,) = load(LOCAL_SIM).clusters
    other = replace(spec, name="other", provider=replace(spec.provider, url="http://b.example"))
    deps = deps_mod.Deps(
        clock=FakeClock(0.0),
        env=ENV,
        state_dir=Path("unused"),
        out=io.StringIO(),
        err=io.StringIO(),
        interactive=False,
        ask=input,
    )
    with pytest.raises(InputError, match="more than one provider URL"):
        deps.provider([spec, other])


def test_every_marked_command_is_registered() -> None:
    assert set(context.MARKED) == set(COMMANDS) | set(STATE_COMMANDS)
    assert len(COMMANDS) + len(STATE_COMMANDS) == len(context.MARKED)
