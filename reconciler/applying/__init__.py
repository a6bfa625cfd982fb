"""Applying: the one place that changes anything at vast, and the records it keeps while doing so.

Holds the executor (`executor`, with the rent path in `renting` and the steps every action is
made of in `steps`), the one `Applier` that drives it for ticks, commands and the head's destroys,
the `Journal` (records behind one lock, and the ledger) with `books` for a head run alone, the
listing and offer search that feed a plan (`observe`, `search`), the launcher of a rental's
container (`launch`), and `down`'s bookkeeping (`teardown`, `pinlog`).

May import the pure core (`model`, `planning`), `state`, `vast` and `clock`; never `watch`,
`head`, `cli` or `views`. Only this package calls vast's create, destroy, stop, start, label and
reboot (tests/layering/layers.py), and never while holding the records lock.
"""
