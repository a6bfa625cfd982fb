"""ray-vast on virtual time: the whole engine (controller, heads, the agent's state machine in every
container) against an in-process vastsim, for the tests, the benchmarks and `ray-vast simulate`.

A package of its own, beside `reconciler`, `agent` and `vastsim`, because it runs all three in one
process, which the reconciler itself never does (its contract with the agent is the HTTP protocol,
and vastsim is the provider's side): `ray-vast simulate` runs `python -m fleetsim`.
"""
