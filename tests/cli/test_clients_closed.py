"""Every vast client a command opens is closed when the command ends (issue 14: clients were
never closed, and their connection pools lived until the process did)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from reconciler import deps as deps_mod
from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.model.observed import Instance
from tests.served import LOCAL_SIM


class Client:
    """A vast client with nothing listed and nothing offered; it notes whether it was closed."""

    opened: ClassVar[list[Client]] = []

    def __init__(self, **_kw: Any) -> None:
        self.closed = False
        Client.opened.append(self)

    def list_instances(self) -> list[Instance]:
        return []

    def search_offers(self, query: object) -> list[object]:
        return []

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "argv",
    [["status", str(LOCAL_SIM)], ["plan", str(LOCAL_SIM)], ["down", "local-sim", "--auto-approve"]],
)
def test_a_command_closes_the_clients_it_opened(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Client.opened = []
    monkeypatch.setattr(deps_mod, "client_from_settings", Client)
    env = {"VAST_API_KEY": "k", "VAST_URL": "http://127.0.0.1:9", "RAY_VAST_PACING": "off"}
    result = CliRunner().invoke(app, [*argv, "--state-dir", str(tmp_path / "s")], env=env)
    assert result.exit_code in (0, 2), result.output
    assert Client.opened, "the command opened no client"
    assert all(c.closed for c in Client.opened)


def test_a_client_factory_passed_in_is_used_and_its_clients_closed(tmp_path: Path) -> None:
    """A test hands `Deps` its own vast client factory (no patching), and `close` closes what it
    opened, as for the real one."""
    deps = deps_mod.Deps(
        clock=FakeClock(0.0),
        env={},
        state_dir=tmp_path / "s",
        out=io.StringIO(),
        err=io.StringIO(),
        interactive=False,
        ask=input,
        client_factory=Client,  # type: ignore[arg-type]
    )
    Client.opened = []
    deps.provider([])
    deps.close()
    assert [c.closed for c in Client.opened] == [True]
