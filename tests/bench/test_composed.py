"""The composed classes of the fleet benchmark: a broken image rents at most breaker slots x
factor per 10 minutes and recovers once fixed; two clusters in one controller end none of each
other's machines."""

from __future__ import annotations

import pytest

from bench import composed


@pytest.mark.slow
def test_a_broken_image_is_held_to_the_breaker_and_recovers_once_fixed() -> None:
    broken = composed.broken_image(failure_hours=0.5)
    assert broken.max_per_10_minutes <= broken.bound
    assert broken.pauses >= 1
    assert broken.workers_after_fix == 2  # the streak's hosts were unblocked


@pytest.mark.slow
def test_two_clusters_in_one_controller_destroy_nothing_of_each_other() -> None:
    two = composed.two_clusters()
    assert two.false_destroys == 0
    assert two.workers["a"] == 2 and two.workers["b"] == 3
    assert two.removed_pruned
