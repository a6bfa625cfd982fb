"""A worker the money chain stopped (its disk kept) and Ray's demand started again takes on work:
the scenario of `ray-vast simulate` and the fleet benchmark (`fleetsim.scenario`) gives its
resume a fresh story, so it works again, goes quiet again, and is stopped or ended again. Without
it, a started-again worker stayed quiet forever and billed as idle to the end of its life.
"""

from __future__ import annotations

import dataclasses

import pytest

from fleetsim.harness import fleet
from fleetsim.mix import FLEET_MIX, Fate
from fleetsim.scenario import Config, Scenario, default_windows, resumed_story, story
from fleetsim.simulate import ended_at, market, simulate
from tests.scenarios.world import cluster
from vastsim import Market
from vastsim.market import STANDARD_IMAGES, Machine

# every rental works a short job, then is quiet; demand steps often, so stops meet returns
IDLE_ONLY = dataclasses.replace(
    FLEET_MIX,
    fates={Fate.IDLE: 1.0},
    orphans_per_day=0.0,
    job_hours=(0.2, 0.4),
    demand_step_hours=(0.3, 0.7),
)


def test_a_resume_draws_what_strikes_a_running_machine_from_its_own_stream() -> None:
    config = Config(seed=5, mix=FLEET_MIX)
    drawn = {resumed_story(config, rank, 1).fate for rank in range(200)}
    assert drawn == {Fate.IDLE, Fate.HEALTHY, Fate.DIES, Fate.NET_DROP}  # no pull, no new image
    dying = next(
        resumed_story(config, k, 1)
        for k in range(200)
        if resumed_story(config, k, 1).fate is Fate.DIES
    )
    assert dying.job == float("inf") and dying.fail_after > 0
    assert resumed_story(config, 3, 1) == resumed_story(config, 3, 1)
    assert resumed_story(config, 3, 1) != resumed_story(config, 3, 2)
    first = Config(seed=5, first_fates=(Fate.STALL,))
    assert story(first, 0).fate is Fate.STALL
    assert story(first, 1) == story(config, 1)  # the rest of the ranks as the mix draws them


@pytest.mark.timeout(120)
def test_a_worker_started_again_for_demand_works_again() -> None:
    spec = cluster("back", min_workers=0, max_workers=4, factor=1, cap=4.0)
    config = Config(seed=2, hours=5.0, mix=IDLE_ONLY, demand={("back", "gpu"): (0, 4)})
    windows, pull_limit = default_windows()
    with fleet([spec], market=market(config), typed=True) as f:
        scenario = Scenario(config, f, windows=windows, pull_limit=float(pull_limit))
        scenario.install()
        f.run_until(config.end, step=config.step, each=scenario.step)
        resumed = [t for t in scenario.tracked.values() if t.stint > 0]
        assert resumed, "no worker was stopped and started again"
        for t in resumed:
            segments = f.sim.meter.segments(t.vast_id)
            # its idle stretch before the stop ended at the resume, where a job began
            closed = [e for e in t.episodes if e.fate is Fate.IDLE and e.stint < t.stint]
            assert closed and all(e.until is not None for e in closed)
            assert t.job_from is not None and t.job_from == max(e.until or 0.0 for e in closed)
            assert t.story.fate in (Fate.IDLE, Fate.HEALTHY)
            # it said busy after the resume: its agent's sample follows the new job
            assert t.working(t.job_from + 1.0) or any(a <= 1.0 < b for a, b in t.story.gaps)
            # and whatever ended it, ended it after the resume, or it is still working
            last = ended_at(segments, t.job_from)
            if last is not None:
                assert last >= t.job_from


@pytest.mark.timeout(120)
def test_a_host_that_drops_takes_every_instance_on_it_and_none_counts_as_a_false_destroy() -> None:
    """One host with four GPUs holds all the workers; the first rental's fate is a net-drop,
    which takes the host offline, and every worker on it with it. Each one ended is a failure of
    the net-drop class, not a false destroy of a healthy worker (as the accounting said before)."""
    host = Machine(machine_id=7, host_id=70, gpu_name="RTX 4090", num_gpus=4, dph_base=0.3)
    spec = cluster("one-host", min_workers=3, max_workers=3, factor=1, cap=4.0)
    mix = dataclasses.replace(
        FLEET_MIX, fates={Fate.HEALTHY: 1.0}, orphans_per_day=0.0, fail_after_hours=(0.5, 0.5)
    )
    config = Config(seed=3, hours=3.0, mix=mix, first_fates=(Fate.NET_DROP,))
    result = simulate([spec], config, offers=Market([host], images=dict(STANDARD_IMAGES)))
    net_drop = next(c for c in result.classes if c.fate is Fate.NET_DROP)
    assert net_drop.failures == 3 and net_drop.ended == 3  # the drop and the two beside it
    assert result.false_destroys == {}
