"""Ray and Python versions across a cluster: what Ray itself refuses, and what an image tag says.

Ray refuses a worker node whose versions differ from the cluster's. In Ray 2.60 the check is
`ray._private.utils.check_version_info`, which `ray._private.node.Node.__init__` calls for every
worker node before it starts a process (and `ray.init` for every driver), against the
`ray_version` and `python_version` the head wrote to the GCS's cluster metadata:

- the Ray versions must be the same string (`ray.__version__`);
- the Python versions (`major.minor.patch` of `sys.version_info`) must be equal at the level
  `RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL` names in the joining process's environment: `patch`
  (the default: 3.11.7 and 3.11.9 do not join) or `minor` (only 3.11 against 3.11; a patch
  difference is a warning in Ray's log). Any other value makes Ray's check raise `ValueError`,
  so that node cannot start either. (Ray Client compares at `minor`; a node does not.)

`refusal` is that rule as a pure function, so the head can refuse a candidate at enrollment with
the reason in plain words instead of renting it, letting Ray fail its `ray start`, and renting
another. `from_image` reads what a `rayproject/ray:2.49.0-py310-cu121` style tag promises, for
`validate` and `plan` to warn before anything is rented. `fingerprint` is what a node type's halt
is bound to: its image and environment (where `RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL` may be
set), so a change to either lifts it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_MATCH_LEVEL = "patch"  # Ray 2.60's default for RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL
MATCH_LEVEL_ENV = "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"
MATCH_LEVELS = ("patch", "minor")

# The Ray the head runs and ray-vast was checked against: the packing hands Ray's demand to this
# Ray's ResourceDemandScheduler (tests/planning/test_ray_packing_corpus.py fails on another one),
# and `up` warns when the head would run another.
TESTED_RAY_VERSION = "2.60.0"


@dataclass(frozen=True)
class RayVersions:
    """The Ray and the Python one side runs Ray with; None where it could not be told.

    `python_match_level` is the joining side's `RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL` as its Ray
    will see it (None: not set, which is `patch`); it means nothing on the head's side."""

    ray: str | None
    python: str | None
    python_match_level: str | None = None

    @property
    def known(self) -> bool:
        return self.ray is not None and self.python is not None

    def says(self) -> str:
        """`Ray 2.60.0 (Python 3.11.7)`, with `unknown` for what is not known."""
        return f"Ray {self.ray or 'unknown'} (Python {self.python or 'unknown'})"


def refusal(head: RayVersions, node: RayVersions) -> str | None:
    """Why Ray would refuse `node` as a worker of a cluster whose head runs `head`, in words;
    None when it joins, or when either side's versions are not known (Ray decides then)."""
    if not head.known or not node.known:
        return None
    level = node.python_match_level or DEFAULT_MATCH_LEVEL
    if node.ray != head.ray:
        return "Ray refuses a worker node of another Ray version"
    if level not in MATCH_LEVELS:
        return (
            f"{MATCH_LEVEL_ENV}={level!r} in the image's environment is neither 'patch' nor "
            "'minor', and Ray's version check refuses to run with it"
        )
    if level == "minor":
        if _minor(node.python) != _minor(head.python):
            return "Ray refuses a worker node of another Python minor version"
        return None
    if node.python != head.python:
        return (
            "Ray refuses a worker node of another Python version, to the patch level unless "
            f"the image's environment sets {MATCH_LEVEL_ENV}=minor"
        )
    return None


def _minor(version: str | None) -> tuple[str, ...]:
    return tuple((version or "").split(".")[:2])


# --- what an image tag promises -------------------------------------------------------------

# Ray's own images (and Anyscale's): rayproject/ray, rayproject/ray-ml, rayproject/ray-llm,
# anyscale/ray, at any registry.
_RAY_REPOSITORY = re.compile(r"(?:^|/)(?:rayproject|anyscale)/ray(?:-ml|-llm)?$")
# 2.49.0, 2.49.0-py310, 2.49.0-py310-cu121, 2.49.0.a1b2c3-py311-cpu, 2.49.0-gpu, 2.49.0-aarch64
_TAG = re.compile(r"^(?P<ray>\d+\.\d+\.\d+)(?:\.[0-9a-f]{6,40})?(?P<rest>(?:-[A-Za-z0-9_.]+)*)$")
_PYTHON = re.compile(r"^py(?P<major>\d)(?P<minor>\d{1,2})$")


@dataclass(frozen=True)
class TagVersions:
    """What an image's tag names: a Ray version, and a Python minor version when it says one."""

    ray: str
    python_minor: str | None  # "3.10"


def from_image(image: str) -> TagVersions | None:
    """The versions a Ray image's tag names (`rayproject/ray:2.49.0-py310-cu121`: Ray 2.49.0,
    Python 3.10); None for any other image or tag (`latest`, `nightly`, a user's own image)."""
    reference = image.split("@", 1)[0].strip()
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon <= slash:
        return None
    repository, tag = reference[:colon], reference[colon + 1 :]
    if not _RAY_REPOSITORY.search(repository):
        return None
    found = _TAG.match(tag)
    if found is None:
        return None
    python = None
    for part in found["rest"].split("-"):
        named = _PYTHON.match(part)
        if named:
            python = f"{named['major']}.{named['minor']}"
    return TagVersions(found["ray"], python)


def tag_disagrees(tag: TagVersions, head: RayVersions) -> list[str]:
    """What the tag names that the head does not run: `Ray 2.49.0`, `Python 3.10`."""
    out = []
    if head.ray is not None and tag.ray != head.ray:
        out.append(f"Ray {tag.ray}")
    if (
        head.python is not None
        and tag.python_minor is not None
        and tag.python_minor != ".".join(_minor(head.python))
    ):
        out.append(f"Python {tag.python_minor}")
    return out


# --- what a halt is bound to ----------------------------------------------------------------


def fingerprint(image: str, env: Mapping[str, str]) -> str:
    """A node type's image and environment, hashed (the environment may hold a user's secrets,
    which the records must not): what decides the Ray and Python its containers run, and what
    Ray's check compares at."""
    canonical = json.dumps({"image": image, "env": dict(sorted(env.items()))}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
