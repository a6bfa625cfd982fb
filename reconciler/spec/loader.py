"""Load a directory of cluster specs into typed models, or into diagnostics.

The only outcomes of loading are models and diagnostics: any input, however broken, yields a list
of problems with file, line, column and JSON path, and nothing is changed anywhere. Schema problems
come first (all of them, from `iter_errors`), then the semantic checks of `spec.checks` run on the
documents that passed the schema.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.model.diagnostics import Diagnostics, Location
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec, SourceRef
from reconciler.spec import build, checks, schema_errors
from reconciler.spec.schema import cluster_schema, fill_defaults
from reconciler.spec.yamlread import Positions, read_documents

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class LoadResult:
    """What a load produced; `clusters` is empty whenever there is an error."""

    clusters: tuple[ClusterSpec, ...]
    diagnostics: Diagnostics
    files: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.diagnostics.has_errors()


def spec_files(target: Path) -> list[Path]:
    """The YAML files of a spec directory (recursively, hidden folders skipped), or one file."""
    if target.is_file():
        return [target]
    found = [
        p
        for p in target.rglob("*")
        if p.suffix in YAML_SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(target).parts)
    ]
    return sorted(found)


def load(target: Path) -> LoadResult:
    """Load every cluster under `target` (a directory or a file)."""
    diags = Diagnostics()
    if not target.exists():
        diags.error(f"no such file or directory: {target}")
        return LoadResult((), diags, ())
    files = spec_files(target)
    if not files:
        diags.error(f"no .yaml or .yml files under {target}")
    sources = []
    for path in files:
        text = _read_text(path, diags)
        if text is not None:
            sources.append((str(path), text))
    return load_texts(sources, diags)


def load_texts(sources: list[tuple[str, str]], diags: Diagnostics | None = None) -> LoadResult:
    """Load clusters from (file name, YAML text) pairs; the pure heart of `load`."""
    diags = diags if diags is not None else Diagnostics()
    loaded: list[tuple[ClusterSpec, Any, Positions]] = []
    for file, text in sources:
        for document in read_documents(text, file, diags):
            if document.data is None:
                continue
            item = _load_document(document.data, document.positions, diags, ok=document.ok)
            if item is not None:
                loaded.append(item)
    checks.check_across(loaded, diags)
    clusters = tuple(c for c, _, _ in loaded) if not diags.has_errors() else ()
    return LoadResult(clusters, diags, tuple(f for f, _ in sources))


def _load_document(
    data: Any, positions: Positions, diags: Diagnostics, *, ok: bool
) -> tuple[ClusterSpec, Any, Positions] | None:
    """Schema-check one document (even one with YAML problems), then build and check it."""
    before = len(diags.errors())
    schema_errors.report(data, positions, diags)
    if not ok or len(diags.errors()) > before:
        return None
    filled = fill_defaults(data, cluster_schema())
    source = SourceRef(positions.file, positions.document_line)
    cluster = build.cluster(filled, source=source, digest=digest(filled))
    checks.check_cluster(cluster, filled, positions, diags)
    return cluster, filled, positions


def digest(document: Any) -> str:
    """A stable fingerprint of a cluster's full (defaults filled) spec."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _read_text(path: Path, diags: Diagnostics) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        diags.error(f"not UTF-8 text: {exc.reason}", Location(str(path), 1, 1))
    except OSError as exc:
        diags.error(f"cannot read file: {exc.strerror}", Location(str(path), 1, 1))
    return None


def last_applied(records: Records) -> list[ClusterSpec]:
    """The specs the clusters were last applied from, as their records keep them (none for a
    record from before they were kept, or one that no longer loads)."""
    sources = [
        (f"(the state's record of {name})", record.document)
        for name, record in sorted(records.clusters.items())
        if record.document
    ]
    return list(load_texts(sources).clusters) if sources else []
