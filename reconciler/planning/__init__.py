"""Planning: pure decisions from (spec, observation, records, now) to a plan.

Holds the planner (`plan`, on a `draft` scratchpad: `refresh` from the listing, `lifecycle` of each
record, `scaling` to the wanted count, `offers`, the `breaker`, `orphans`, `retention`,
`revocation`, pins), the packing of Ray's report (the observation carries it as read) onto node
types with Ray's own scheduler, within the cluster's caps and its $/h budget (`raydemand`,
`raypacking`: only this package imports it; `packbudget`: the budget as a bound; `packmemo`: the
same question answered once), the plan for what the nets found (`react`), the guards a plan passes
(`guards`), `down`'s plan (`teardown`), the record deadlines the loop wakes for (`deadlines`), and
`alerts`: the one place an alert is built, with one window.

Part of the pure core: imports only the standard library, `model`, `nets` and itself (and Ray's
scheduler, lazily, in `raypacking` alone); no I/O, no clock.
"""
