"""Cluster specs: YAML in, a validated `model.spec.ClusterSpec` out, or diagnostics naming file,
line and field.

Holds the positioned YAML reader (`yamlread`), the JSON Schema with its defaults (`schema`,
`schema_errors`), the building of the model (`build`), the node-type shapes Ray packs onto
(`shapes`), the semantic checks (`checks`) and the directory loader (`loader`). A spec that does
not load changes nothing.

May import `model`, `rayruntime` (the local Ray version) and third-party yaml/jsonschema; never
`applying`, `watch`, `head` or `cli`.
"""
