"""The model: plain data every layer speaks, with no behaviour that reaches outside it.

Holds the spec (`spec`), what vast showed (`observed`, `observation`), Ray's demand (`demand`), the
records the state keeps and their transitions (`records`, `stretches`, `stopping`, `labels`), a
plan and its changes (`plan`, `changes`), the bill (`cost`), the routing table from a detection
class to its outcome (`routing`), the JSON codec (`codec`), Ray versions, input diagnostics and
`evolve`, the fast copy of a frozen record.

Part of the pure core: imports only the standard library and itself; no I/O, no clock
(tests/layering/layers.py).
"""
