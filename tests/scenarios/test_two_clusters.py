"""Two clusters in one `watch`: added, edited, removed, and one whose file turns invalid.

Finding 1 of issue 12: `Controller._reconcile` planned only the clusters due this tick, and the
planner treated every other cluster as removed from the spec: adding a second spec file ended both
healthy workers of the first, and editing one file ended the other cluster's worker.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from types import SimpleNamespace

from fleetsim.harness import START, fleet
from reconciler.watch.runner import _reload
from reconciler.watch.source import SpecSource
from tests.scenarios.world import (
    H,
    M,
    alive,
    cluster,
    cluster_text,
    dollars,
    ended_by,
    lines,
    run,
    workers,
)

ALPHA = cluster("alpha", min_workers=2)
BETA = cluster("beta", min_workers=1)
GAMMA = cluster("gamma", min_workers=2)


def test_adding_editing_and_removing_a_cluster_leaves_the_others_alone() -> None:
    with fleet([ALPHA, BETA, GAMMA]) as f:
        f.controller.set_specs({"alpha": ALPHA})
        run(f, START + 10 * M)
        first = workers(f, "alpha")
        assert len(first) == 2

        # a second and a third spec file appear: alpha keeps its workers, they get their own
        f.controller.set_specs({"alpha": ALPHA, "beta": BETA, "gamma": GAMMA})
        run(f, f.clock.now() + 10 * M)
        assert workers(f, "alpha") == first
        beta, gamma = workers(f, "beta"), workers(f, "gamma")
        assert len(beta) == 1 and len(gamma) == 2

        # alpha's file is edited (its thresholds): beta and gamma are untouched
        edited = cluster("alpha", min_workers=2, watchdogs={"went_silent_after_seconds": 600})
        f.controller.set_specs({"alpha": edited, "beta": BETA, "gamma": GAMMA})
        run(f, f.clock.now() + 10 * M)
        assert workers(f, "alpha") == first
        assert (workers(f, "beta"), workers(f, "gamma")) == (beta, gamma)

        # beta's file is removed: its one worker is all of beta, so an unattended watch holds
        # the prune and alerts (issue 21: the guard never held a cluster of one) ...
        f.controller.set_specs({"alpha": edited, "gamma": GAMMA}, revision="rev-2")
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "beta") == beta
        alerts = [a for a in f.controller.records().alerts if a.cls == "mass_destroy_refused"]
        assert [a.cluster for a in alerts] == ["beta"]
        # ... and `watch --allow-mass-destroy` prunes it (the revision in the ledger)
        f.controller.allow_mass_destroy = True
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "beta") == set()
        f.controller.allow_mass_destroy = False
        assert {ended_by(f)[v] for v in beta} == {"removed_from_spec"}
        paid = dollars(f, "beta")
        run(f, f.clock.now() + 10 * M)
        assert dollars(f, "beta") == paid  # the meter stopped with the prune
        assert f.controller.records().clusters.keys() == {"alpha", "gamma"}
        assert f.controller.records().clusters["alpha"].revision == "rev-2"

        # ... gamma's is removed too: that would destroy all of it, so an unattended watch holds
        # it and alerts, and `watch --allow-mass-destroy` carries it out
        f.controller.set_specs({"alpha": edited})
        run(f, f.clock.now() + 5 * M)
        assert workers(f, "gamma") == gamma and alive(f, "gamma") == gamma
        alerts = [a for a in f.controller.records().alerts if a.cls == "mass_destroy_refused"]
        assert [a.cluster for a in alerts] == ["beta", "gamma"]
        f.controller.allow_mass_destroy = True
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "gamma") == set()

        # through all of it, nothing of alpha ended and no healthy machine ended but by prune
        assert workers(f, "alpha") == first
        ends = ended_by(f)
        assert not first & ends.keys()
        assert {ends[v] for v in beta | gamma} == {"removed_from_spec"}
        assert not lines(f, "went_silent") and not lines(f, "never_reported")


def test_a_spec_file_that_turns_invalid_changes_nothing_and_alerts(tmp_path: Path) -> None:
    (tmp_path / "alpha.yaml").write_text(cluster_text("alpha", min_workers=2))
    (tmp_path / "beta.yaml").write_text(cluster_text("beta", min_workers=1))
    source = SpecSource(tmp_path)
    loaded = source.poll()
    assert loaded is not None and loaded.ok
    with fleet(list(loaded.clusters)) as f:
        run(f, START + 10 * M)
        before = workers(f, "alpha") | workers(f, "beta")
        assert len(before) == 3
        deps = SimpleNamespace(err=io.StringIO(), clock=f.clock)
        logger = logging.getLogger("scenario")

        (tmp_path / "beta.yaml").write_text("apiVersion: ray-vast/v1\nkind: Cluster\nspec: [\n")
        _reload(source, f.controller, deps, logger)  # type: ignore[arg-type]
        run(f, f.clock.now() + 1 * H)
        assert workers(f, "alpha") | workers(f, "beta") == before
        assert set(f.controller.specs) == {"alpha", "beta"}  # the last good specs stay
        assert "beta.yaml" in deps.err.getvalue()
        alerts = {a.cluster for a in f.controller.records().alerts if a.cls == "specs_invalid"}
        assert alerts == {"alpha", "beta"}
        assert not ended_by(f).keys() & before

        # the directory is whole again, without beta: now beta is pruned, once a person says
        # yes (its one worker is all of it)
        (tmp_path / "beta.yaml").unlink()
        _reload(source, f.controller, deps, logger)  # type: ignore[arg-type]
        f.controller.allow_mass_destroy = True
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "beta") == set() and len(workers(f, "alpha")) == 2


def test_one_file_is_a_plan_about_its_own_clusters() -> None:
    """A `watch` of one file never prunes what the file does not name."""
    with fleet([ALPHA, BETA]) as f:
        run(f, START + 10 * M)
        beta = workers(f, "beta")
        f.controller.prune = False
        f.controller.set_specs({"alpha": ALPHA})
        run(f, f.clock.now() + 10 * M)
        assert alive(f, "beta") == beta and beta
