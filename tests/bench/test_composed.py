"""The composed classes of the fleet benchmark: a broken image rents at most breaker slots x
factor per breaker cycle, for a request of 2 slots as for one of 8, and recovers once fixed;
two clusters in one controller end none of each other's machines."""

from __future__ import annotations

import pytest

from bench import composed


@pytest.mark.slow
@pytest.mark.parametrize("wanted", [2, 8])
def test_a_broken_image_is_held_to_the_breaker_and_recovers_once_fixed(wanted: int) -> None:
    broken = composed.broken_image(failure_hours=0.5, wanted=wanted)
    assert broken.max_per_cycle <= broken.bound
    assert broken.pauses >= 1
    assert broken.workers_after_fix == wanted


@pytest.mark.slow
def test_two_clusters_in_one_controller_destroy_nothing_of_each_other() -> None:
    two = composed.two_clusters()
    assert two.false_destroys == 0
    assert two.workers["a"] == 2 and two.workers["b"] == 3
    assert two.removed_pruned
