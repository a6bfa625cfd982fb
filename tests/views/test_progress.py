"""Long waits: a live status on a terminal, one plain line without one or with NO_COLOR."""

from __future__ import annotations

import io

from reconciler.views.progress import live, waiting


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_line_without_a_terminal() -> None:
    out = io.StringIO()
    with waiting("Waiting for vast", out=out, env={}):
        pass
    assert out.getvalue() == "Waiting for vast...\n"


def test_plain_line_with_no_color_even_on_a_terminal() -> None:
    out = Terminal()
    assert not live(out, {"NO_COLOR": "1"})
    with waiting("Waiting for vast", out=out, env={"NO_COLOR": "1"}):
        pass
    assert out.getvalue() == "Waiting for vast...\n"


def test_live_status_on_a_terminal() -> None:
    out = Terminal()
    assert live(out, {"TERM": "xterm"})
    with waiting("Waiting for vast", out=out, env={"TERM": "xterm"}):
        pass
    shown = out.getvalue()
    assert "Waiting for vast" in shown and "\x1b[" in shown  # drawn with terminal controls
    assert "Waiting for vast...\n" not in shown
