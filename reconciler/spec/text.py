"""The text of a cluster spec file, for code that writes one (the examples' tests, the benchmarks,
the simulator's worlds): the header every spec starts with, then the caller's fields under
`spec:`. The header is the schema's (`apiVersion`, `kind`, `metadata.name`), written here once,
so a change to it is one edit, not one per folder that writes specs.
"""

from __future__ import annotations

import textwrap

API_VERSION = "ray-vast/v1"


def spec_yaml(name: str, body: str) -> str:
    """The spec file of cluster `name`: `apiVersion`, `kind`, `metadata`, then `body` (the fields
    under `spec:`, written at any one indent: dedented, then indented under `spec:`)."""
    fields = textwrap.indent(textwrap.dedent(body), "  ")
    return f"apiVersion: {API_VERSION}\nkind: Cluster\nmetadata: {{name: {name}}}\nspec:\n{fields}"
