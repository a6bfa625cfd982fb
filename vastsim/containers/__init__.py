"""Containers: what runs inside an instance once vast would start its container.

The life cycle (`vastsim.lifecycle`) decides *when* a container starts, stops or is destroyed; a
runner from this package decides *what* that means. The package is built the way runc's
`libcontainer/` is, one mechanism per module:

- `protocol`: the `Runner` protocol the life cycle drives, and the `ContainerSpec` it hands over.
- `scripted`: `ScriptedRunner` (containers as Python objects) and `NoContainers`.
- `runner`: `ProcessRunner`, containers as local process trees; it composes the four below.
- `pidns`: PID namespaces (unshare(2) and the util-linux shim), and the probe for them.
- `cgroups`: the containers' CPU-accounting cgroups.
- `sweep`: process groups and environment markers, the fallback without namespaces.
- `entrypoint`: what a container is given: its PID 1's argv, its ports, its network.

What it may import: the standard library, and its own modules. It imports nothing else of
vastsim (the simulator uses containers, never the other way round), and, as the rest of vastsim,
nothing of `reconciler` or `agent`.
"""
