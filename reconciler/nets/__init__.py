"""The nets: the watchdogs that find machines which stopped being useful while the meter runs.

Holds the five machine nets (`never_reported`, `went_silent`, `lost`, and the money chain in
`idle`: scanner, auto-stop, auto-destroy), the request and pool watchdogs (`pools`), the reaper's
gates (`reaper`) and candidate limits, the `Detection` they report, and `dispatch`: the one table
from a scheduled job to its net, with one signature. A net only finds; `planning.react` decides.

Part of the pure core: imports only the standard library, `model` and itself; no I/O, no clock.
"""
