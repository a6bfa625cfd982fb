"""Records by cluster and node type, indexed once (issue 25: a linear planner). The planner's
figure is `python -m bench.planner --baseline REV`; these pin what the index answers."""

from __future__ import annotations

import pytest

from reconciler.model.records import Phase
from reconciler.planning.draft import Draft
from tests.planning.builders import LINEAGE, NOW, record, records, request


def test_each_question_answers_the_records_a_scan_would_in_the_same_order() -> None:
    items = [
        record("i1"),
        record("i2", cluster="c2"),
        record("i3", node_type="cpu"),
        record("i4"),
        request("q1"),
        request("q2", node_type="cpu"),
        request("q3", cluster="c2"),
    ]
    index = records(*items).index
    assert [r.id for r in index.of_cluster("c1")] == ["i1", "i3", "i4"]
    assert [r.id for r in index.of_node_type("c1", "gpu")] == ["i1", "i4"]
    assert [r.id for r in index.of_node_type("c2", "gpu")] == ["i2"]
    assert index.of_node_type("c3", "gpu") == []
    assert [r.id for r in index.requests_of("c1", "gpu")] == ["q1"]
    assert [r.id for r in index.requests_of("c1", "cpu")] == ["q2"]


def test_a_drafts_index_sees_each_record_as_the_plan_changed_it_and_each_request_it_placed() -> (
    None
):
    draft = Draft.start(records(record("i1"), request("q1")), lineage=LINEAGE, now=NOW)
    draft.update(draft.instances["i1"], phase=Phase.RUNNING)
    assert [r.phase for r in draft.of_node_type("c1", "gpu")] == [Phase.RUNNING]
    draft.add_request(request("q2"))
    assert [r.id for r in draft.index.requests_of("c1", "gpu")] == ["q1", "q2"]


def test_a_plan_that_would_move_a_record_to_another_node_type_is_refused() -> None:
    draft = Draft.start(records(record("i1")), lineage=LINEAGE, now=NOW)
    with pytest.raises(ValueError, match="does not add or move"):
        draft.update(draft.instances["i1"], node_type="cpu")
