"""Running the official `vastai` CLI against a served vastsim, hermetically (reference section 1.2:
VAST_URL, the key, a temporary HOME and XDG dirs, no update check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def vastai_argv() -> list[str]:
    script = Path(sys.executable).parent / "vastai"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from vastai.cli.main import main; sys.exit(main())"]


def run_vastai(
    args: tuple[str, ...], *, url: str, key: str, home: Path, wide: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_STATE_HOME": str(home / "state"),
        "VAST_URL": url,
        "VAST_API_KEY": key,
        "VASTAI_NO_UPDATE_CHECK": "1",
    }
    if wide:  # tables on one line each, no colour
        env.update(NO_COLOR="1", COLUMNS="250")
    return subprocess.run(
        [*vastai_argv(), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
