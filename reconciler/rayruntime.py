"""The one place that reads which Ray and Python this process runs: the head's versions.

The head's Ray is started with this interpreter's `ray` (`reconciler.embedded.rayhead`), so
the versions it writes to the GCS's cluster metadata, which every worker node is checked
against, are this process's: `importlib.metadata.version("ray")` (what `ray.__version__` says,
read without importing Ray) and `sys.version_info`. Read once; everything below the CLI is
handed a `RayVersions` instead (`HeadApp(versions=...)`, `checks.image_warnings(head=...)`), so
tests say which head they mean.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata

from reconciler.model.rayversions import RayVersions


@functools.cache
def local() -> RayVersions:
    """This process's Ray (None when Ray is not installed) and Python (`major.minor.patch`)."""
    try:
        ray: str | None = metadata.version("ray")
    except metadata.PackageNotFoundError:
        ray = None
    return RayVersions(ray, "{}.{}.{}".format(*sys.version_info[:3]))
