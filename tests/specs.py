"""The one way tests write a cluster spec file: the header every spec starts with, then the test's
own fields under `spec:`; and the one way they load it, through the real loader (so the schema's
defaults apply, and a spec a test got wrong fails with the loader's own words).

Tests differ in what a cluster holds, never in how a spec file begins: that part is written here
once, so a change to the header (its apiVersion, say) is one edit, not one per test folder.
"""

from __future__ import annotations

import textwrap

from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts


def spec_yaml(name: str, body: str) -> str:
    """The spec file of cluster `name`: `apiVersion`, `kind`, `metadata`, then `body` (the fields
    under `spec:`, written at any one indent: dedented, then indented under `spec:`)."""
    fields = textwrap.indent(textwrap.dedent(body), "  ")
    return f"apiVersion: ray-vast/v1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec:\n{fields}"


def load_spec(text: str, file: str = "t.yaml") -> ClusterSpec:
    """The one cluster of spec text `text`, loaded as the file `file`; a spec with an error
    fails here, with the loader's diagnostics."""
    result = load_texts([(file, text)])
    assert result.ok, [f"{d.location}: {d.summary}" for d in result.diagnostics]
    return result.clusters[0]
