"""Views: what people and machines read, rendered from model values (Terraform's `views`).

Holds the renderings of a plan (`plan`), `status`, `cost`, the `ledger`, input diagnostics,
`state list`, pins and the progress lines of a long command. A view computes nothing a decision
depends on and does no I/O beyond returning text or JSON-able values.

May import `model`, `planning` and `nets` (for figures it shows), `state`'s types and the error
root; never `applying`, `watch`, `head` or `cli`.
"""
