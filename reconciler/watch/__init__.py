"""`watch`: the controller's loop and what it reads, between the CLI and the pure core.

Holds the `Controller` (construction, specs, and a tick's two phases: `controller`), what is due
and when to wake (`agenda`, on `schedule`), containment of a cluster's failure (`containment`,
one `Backoff`), the nets phase (`netting`), Ray's side (`rayside`: demand, unread heads, pins;
`signals` is its contract, `rayreaders`/`raysignals`/`raydemand` read Ray's GCS), raising an
alert (`alerting`), forgetting old records (`forgetting`), the runner that sleeps, reloads and
serves (`runner`, `source`, `served`, `headside`), and its logs and metrics.

May import every lower layer (`applying`, `planning`, `nets`, `model`, `state`, `head`, `spec`,
`views`, `deps`, `clock`); never `cli` or `operations`. Decisions stay in `planning`: the
packing of Ray's demand is not imported here (tests/layering/layers.py).
"""
