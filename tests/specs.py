"""The one way tests load a cluster spec they wrote (`reconciler.spec.text.spec_yaml` writes it):
through the real loader, so the schema's defaults apply, and a spec a test got wrong fails with the
loader's own words.
"""

from __future__ import annotations

from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts


def load_spec(text: str, file: str = "t.yaml") -> ClusterSpec:
    """The one cluster of spec text `text`, loaded as the file `file`; a spec with an error
    fails here, with the loader's diagnostics."""
    result = load_texts([(file, text)])
    assert result.ok, [f"{d.location}: {d.summary}" for d in result.diagnostics]
    return result.clusters[0]
