"""Two clusters' real Ray heads, each with its own token, read by one process in turn.

Ray keeps one auth token per process; each reader switches to its own before it asks, so the
readers of two clusters both read (a reader with the other cluster's token is refused by its GCS).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.embedded import rayhead
from reconciler.model.spec import ClusterSpec
from reconciler.watch import raysignals
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.raysignals import RaySignals
from tests.e2e.test_live_seed import loopback_only
from tests.scenarios.world import cluster
from tests.watch.test_watch_process import free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(not loopback_only(), reason="Ray needs a loopback-only network namespace"),
]

NAMES = ("alpha", "beta")


@pytest.fixture
def heads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ClusterSpec]]:
    for variable in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(variable, raising=False)  # restored afterwards, whatever Ray set
    monkeypatch.setattr(raysignals._Token, "active", None)
    specs: dict[str, ClusterSpec] = {}
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    try:
        for name in NAMES:
            port = free_port()
            token = tokens / name
            token.write_text(secrets.token_hex(32))
            token.chmod(0o600)
            rayhead.start(tmp_path, name, port=port, token_path=token, env=dict(os.environ))
            specs[name] = cluster(name, head=f"head: {{address: 127.0.0.1, ray_port: {port}}}")
        yield specs
    finally:
        for name in NAMES:
            rayhead.stop(tmp_path, name)


def test_each_clusters_reader_reads_its_own_head_with_its_own_token(
    heads: dict[str, ClusterSpec], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"

    def make(spec: ClusterSpec) -> RaySignals:
        address = f"{spec.head.address}:{spec.head.ray_port}"
        return RaySignals(address, spec.name, token_path=str(tokens / spec.name))

    readers = RayReaders(heads, make=make)
    try:
        for _ in range(2):  # in turn, twice: each switch back still reads
            for name, spec in heads.items():
                assert readers.reports({name: spec}) is not None, f"{name}'s head was not read"
        # a reader given the other cluster's token is refused: the tokens really differ
        wrong = RaySignals(
            f"127.0.0.1:{heads['beta'].head.ray_port}", "beta", token_path=str(tokens / "alpha")
        )
        assert wrong.reports({"beta": heads["beta"]}) is None
        assert readers.reports({"alpha": heads["alpha"]}) is not None
    finally:
        readers.stop()
