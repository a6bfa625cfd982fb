"""Node-type shapes: the least a worker will have, from its offer filters or declared.

DESIGN.md section 10. The table below is the rule of `reconciler/spec/shapes.py` read from the
outside: a spec in, the shape the planner will use out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.model.spec import NodeType
from reconciler.spec.schema import cluster_schema, fill_defaults
from reconciler.spec.shapes import lower_bound
from tests.specs import load_spec

GB = 10**9


def spec(body: str, name: str = "t") -> str:
    """The spec file of one node type `w` with `body`: its metadata in block form, as the line
    numbers the validate tests below assert count it."""
    indented = "\n".join("      " + line for line in body.strip("\n").splitlines())
    return f"""apiVersion: ray-vast/v1
kind: Cluster
metadata:
  name: {name}
spec:
  max_dollars_per_hour: 5
  node_types:
    w:
      max_workers: 3
      image: img
{indented}
"""


def node_type(body: str) -> NodeType:
    return load_spec(spec(body), "c.yaml").node_types["w"]


def resources(body: str) -> dict[str, float]:
    return dict(node_type(body).shape.resources)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("offer: {filters: {cpu_cores_effective: {gte: 4}}}", {"CPU": 4}),
        ("offer: {filters: {cpu_cores_effective: {eq: 8}}}", {"CPU": 8}),
        # rounded down, as the agent starts Ray with the cgroup quota rounded down
        ("offer: {filters: {cpu_cores_effective: {gte: 7.5}}}", {"CPU": 7}),
        # gt on a fractional field: the bound itself, which rounding down makes exact
        ("offer: {filters: {cpu_cores_effective: {gt: 4}}}", {"CPU": 4}),
        ("offer: {filters: {cpu_cores_effective: {gte: 0.5}}}", {"CPU": 1}),
        ("offer: {filters: {cpu_cores_effective: {in: [16, 8, 12]}}}", {"CPU": 8}),
        ("offer: {filters: {cpu_cores_effective: {in: [2, 8, 12], gte: 6}}}", {"CPU": 8}),
        ("offer: {filters: {cpu_cores_effective: {gte: 2, gt: 3}}}", {"CPU": 3}),
        # only an upper bound bounds nothing below
        ("offer: {filters: {cpu_cores_effective: {lte: 64}}}", {}),
        # cpu_cores is the host's, not the container's
        ("offer: {filters: {cpu_cores: {gte: 16}}}", {}),
        ("offer: {filters: {num_gpus: {eq: 1}}}", {"GPU": 1}),
        # gt on a whole-number field: the next whole number
        ("offer: {filters: {num_gpus: {gt: 1}}}", {"GPU": 2}),
        ("offer: {filters: {num_gpus: {in: [4, 2, 8]}}}", {"GPU": 2}),
        ("offer: {filters: {num_gpus: {gte: 1, neq: 1}}}", {"GPU": 2}),
        ("offer: {filters: {num_gpus: {gte: 1, notin: [1, 2]}}}", {"GPU": 3}),
        ("offer: {filters: {num_gpus: {in: [1, 2, 4], notin: [1]}}}", {"GPU": 2}),
        ("offer: {filters: {num_gpus: {gte: 0}}}", {}),
        (
            "offer: {filters: {cpu_ram: {gte: 16000}}}",
            {"memory": 11.2 * GB, "object_store_memory": 4.8 * GB},
        ),
        # the object store is capped at 200 GB, as Ray caps it
        (
            "offer: {filters: {cpu_ram: {gte: 1000000}}}",
            {"memory": 800 * GB, "object_store_memory": 200 * GB},
        ),
        ("ray_resources: {prep: 1}", {"prep": 1}),
        (
            "offer: {filters: {cpu_cores_effective: {gte: 4}, num_gpus: {eq: 1}}}\n"
            "ray_resources: {prep: 1}",
            {"CPU": 4, "GPU": 1, "prep": 1},
        ),
        # declared keys win over derived ones, one key at a time
        (
            "offer: {filters: {cpu_cores_effective: {gte: 16}, num_gpus: {eq: 2}}}\n"
            "resources: {CPU: 8}",
            {"CPU": 8, "GPU": 2},
        ),
        (
            "resources: {CPU: 4, GPU: 1, memory: 1000, TPU: 4}",
            {"CPU": 4, "GPU": 1, "memory": 1000, "TPU": 4},
        ),
        # 0 removes a resource, as Ray leaves it out
        ("offer: {filters: {num_gpus: {eq: 1}}}\nresources: {CPU: 2, GPU: 0}", {"CPU": 2}),
        ("ray_resources: {prep: 1}\nresources: {prep: 1, CPU: 2}", {"prep": 1, "CPU": 2}),
    ],
)
def test_shape_from_the_spec(body: str, expected: dict[str, float]) -> None:
    assert resources(body) == pytest.approx(expected)


def test_labels_are_ray_labels_and_labels_and_the_two_every_worker_has() -> None:
    shape = node_type("ray_labels: {team: ml}\nlabels: {zone: eu}").shape
    assert dict(shape.labels) == {
        "team": "ml",
        "zone": "eu",
        "rv_cluster": "t",
        "rv_node_type": "w",
    }


def test_declared_custom_resources_and_labels_are_advertised_by_each_worker() -> None:
    """What the planner assumes a worker has, the worker must say it has: the enrollment
    answer gives Ray `ray_resources` and `ray_labels`, so the declared ones join them."""
    declared = node_type("ray_resources: {a: 1}\nresources: {CPU: 2, b: 3}\nlabels: {zone: eu}")
    assert dict(declared.ray_resources) == {"a": 1, "b": 3}
    assert dict(declared.ray_labels) == {"zone": "eu"}


def test_each_resource_says_where_it_came_from() -> None:
    shape = node_type(
        "offer: {filters: {cpu_cores_effective: {gte: 4}, num_gpus: {eq: 1}}}\n"
        "ray_resources: {prep: 1}\nresources: {GPU: 2}"
    ).shape
    assert dict(shape.sources) == {
        "CPU": "offer.filters.cpu_cores_effective (at least 4)",
        "GPU": "resources.GPU",
        "prep": "ray_resources.prep",
    }
    assert shape.has_cpu


def test_new_fields_have_no_default_so_existing_digests_stay() -> None:
    """A spec that does not use `resources:` or `labels:` fills the same document as before
    they existed (the digest is of the filled document: a change would re-plan every cluster)."""
    doc: Any = {
        "apiVersion": "ray-vast/v1",
        "kind": "Cluster",
        "metadata": {"name": "t"},
        "spec": {"max_dollars_per_hour": 1, "node_types": {"w": {"image": "i", "max_workers": 1}}},
    }
    filled = fill_defaults(doc, cluster_schema())
    assert "resources" not in filled["spec"]["node_types"]["w"]
    assert "labels" not in filled["spec"]["node_types"]["w"]


@pytest.mark.parametrize(
    ("ops", "whole", "expected"),
    [
        ({}, False, None),
        ({"eq": 3}, False, 3),
        ({"gte": 2, "eq": 3}, False, 3),
        ({"gt": 2.5}, True, 3),
        ({"gt": 2}, True, 3),
        ({"gte": 2.2}, True, 3),
        ({"in": (5, 3, 9), "lt": 4}, False, 3),
        ({"in": (5, 3, 9), "gt": 3}, False, 5),
        # no member allowed: the set is empty; the operators' bound is all that is left
        ({"in": (1, 2), "gte": 4}, False, 4),
        ({"eq": "4"}, False, None),
        ({"eq": True}, False, None),
        ({"gte": 10**400}, False, None),
    ],
)
def test_lower_bound_of_one_filter(
    ops: dict[str, Any], whole: bool, expected: float | None
) -> None:
    assert lower_bound(ops, whole=whole) == expected


def test_validate_warns_with_file_line_and_field(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(spec("offer:\n  filters:\n    num_gpus: {eq: 1}"))
    outcome = CliRunner().invoke(app, ["validate", str(file)])
    assert outcome.exit_code == 0, outcome.output
    assert (
        f"{file}:11:7: warning: node type 'w' has no CPU lower bound, so ray-vast cannot tell "
        "how many tasks a worker of it takes (spec.node_types.w.offer)"
    ) in outcome.stderr
    assert "filter cpu_cores_effective (e.g. {gte: 4}) or declare resources: {CPU: 4}" in (
        outcome.stderr
    )
    assert "Success! 1 cluster valid in 1 file: t (1 warning)." in outcome.output


def test_validate_says_a_numeric_filter_given_text_is_an_error(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(spec("offer:\n  filters:\n    num_gpus: {eq: abc}"))
    outcome = CliRunner().invoke(app, ["validate", str(file)])
    assert outcome.exit_code == 1
    assert (
        f"{file}:13:26: error: spec.node_types.w.offer.filters.num_gpus.eq must be a whole "
        "number, not 'abc' (spec.node_types.w.offer.filters.num_gpus.eq)"
    ) in outcome.stderr


@pytest.mark.parametrize(
    ("gpu_name", "accelerator"),
    [
        ("{eq: A100 SXM4}", "A100"),
        ("{in: [A100 SXM4, A100 PCIE]}", "A100"),  # two cards Ray names alike
        ("{eq: RTX 4090}", "GeForce-RTX-4090"),  # Ray's name of "NVIDIA GeForce RTX 4090"
        ("{in: [RTX 4090, RTX 3090]}", None),  # no one name: Ray would say either
        ("{neq: A100 SXM4}", None),
    ],
)
def test_a_gpu_name_filter_gives_rays_accelerator_label_and_resource(
    gpu_name: str, accelerator: str | None
) -> None:
    """Issue 24: `label_selector={"ray.io/accelerator-type": "A100"}` and
    `accelerator_type="A100"` rented nothing: the shape had neither."""
    shape = node_type(f"offer: {{filters: {{gpu_name: {gpu_name}, num_gpus: {{eq: 1}}}}}}").shape
    assert shape.labels.get("ray.io/accelerator-type") == accelerator
    derived = {k: v for k, v in shape.resources.items() if k.startswith("accelerator_type:")}
    assert derived == ({f"accelerator_type:{accelerator}": 1.0} if accelerator else {})
