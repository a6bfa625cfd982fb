"""What each cluster was last applied from: its spec's digest, Git revision and document.

`watch` records it when it takes specs, `apply` when it carries a plan out; `status` run with no
spec directory (the README's "other terminal" command) reads the specs back from it, so it knows
the caps, the provider and the node types' windows of what is running rather than none.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.model.evolve import evolve
from reconciler.model.records import ClusterRecord, Records
from reconciler.model.spec import ClusterSpec


def remembered(
    records: Records, specs: Iterable[ClusterSpec], revision: str | None = None
) -> Records:
    """The records with these clusters' records set (the others kept)."""
    mine = {s.name: ClusterRecord(s.name, s.digest, revision, s.document) for s in specs}
    if all(records.clusters.get(name) == record for name, record in mine.items()):
        return records
    return evolve(records, clusters={**records.clusters, **mine})
