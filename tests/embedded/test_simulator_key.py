"""The embedded simulator starts whatever its random key looks like (a CI run found `up` failing
when `secrets.token_urlsafe` began the key with "-": argparse took it for an option)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.embedded import simulator


@pytest.mark.parametrize("key", ["-bxCAe1DvtU_t2iB54KWLUNQYeZu82ri", "--help", "plain_key_0123"])
def test_the_simulator_starts_with_a_key_that_looks_like_an_option(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulator.secrets, "token_urlsafe", lambda n: key)
    try:
        sim = simulator.start(tmp_path, env=dict(os.environ))
        assert sim.env()["VAST_API_KEY"] == key
        assert simulator.running(tmp_path) is not None
    finally:
        simulator.stop(tmp_path)
