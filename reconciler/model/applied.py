"""What each cluster was last applied from: its spec's digest, Git revision and document, and
whether `down` holds it down.

`watch` records it when it takes specs, `apply` when it carries a plan out; `status` run with no
spec directory (the README's "other terminal" command) reads the specs back from it, so it knows
the caps, the provider and the node types' windows of what is running rather than none. `down`
marks it (`ClusterRecord.down_at`); applying the cluster again, or a change to its spec, lifts
the mark (a new record).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


# What a cluster held down gets from a controller, said wherever it is held.
HELD_DOWN = "nothing is rented for it until its spec changes or it is applied again"


def following(
    records: Records, declared: Mapping[str, ClusterSpec], held: set[str], revision: str | None
) -> Records:
    """The records with the clusters a controller follows (`declared`: digest, revision,
    document) as their cluster records; a cluster held down keeps its record and its mark; the
    records of clusters no longer declared go. The same records when nothing changed."""
    clusters = {
        name: records.clusters[name]
        if name in held
        else ClusterRecord(name, spec.digest, revision, spec.document)
        for name, spec in declared.items()
    }
    return records if dict(records.clusters) == clusters else evolve(records, clusters=clusters)


def downed(
    records: Records, cluster: str, now: float, specs: Iterable[ClusterSpec] = ()
) -> Records:
    """The records with `cluster` held down from `now` (its record made from `specs` when it
    has none yet); unchanged when there is nothing to hold it by."""
    record = records.clusters.get(cluster)
    if record is None:
        spec = next((s for s in specs if s.name == cluster), None)
        if spec is None:
            return records
        record = ClusterRecord(spec.name, spec.digest, None, spec.document)
    if record.down_at is not None:
        return records
    held = evolve(record, down_at=now)
    return evolve(records, clusters={**records.clusters, cluster: held})


def lifted(records: Records, names: Iterable[str]) -> Records:
    """The records with `down`'s hold of these clusters lifted (`up` brings them up)."""
    held = {n: r for n in names if (r := records.clusters.get(n)) and r.down_at is not None}
    if not held:
        return records
    clusters = {**records.clusters, **{n: evolve(r, down_at=None) for n, r in held.items()}}
    return evolve(records, clusters=clusters)


def held_down(records: Records, specs: Mapping[str, ClusterSpec]) -> set[str]:
    """The clusters of `specs` that `down` holds down (their spec unchanged since)."""
    return {
        name
        for name, spec in specs.items()
        if (record := records.clusters.get(name)) is not None and record.holds_down(spec.digest)
    }


def downed_names(records: Records) -> set[str]:
    """Every cluster a `down` mark stands on, whatever spec it is planned with."""
    return {name for name, record in records.clusters.items() if record.down_at is not None}
