"""What a process container is given: its PID 1's argv, its ports and its network.

What runs as PID 1:
- `runtype: args`: the create's `args` as argv, run directly (no shell). When the create also has
  `onstart`, it is the entrypoint (that is where the official CLI puts `--entrypoint`, and how
  dstack runs `onstart: /bin/sh` with `args: ["-c", script]`): argv = split(onstart) + args.
- any other runtype: `sh -c '<onstart>'` followed by an idle PID 1, because on vast the ssh/jupyter
  entrypoint keeps the container up after the onstart script ends.

There is no NAT on one machine: each published container port p gets a free local port P, the
container sees `VAST_TCP_PORT_<p>=P` (as on vast) and must listen on P itself, which is what vast's
identity mappings (ports above 70000) ask of containers too. Each instance has its own loopback
address 127.a.b.c (never 127.0.0.1, never shared by two live instances; an IP change gives it
another): it is `PUBLIC_IPADDR`, and `VASTSIM_SOURCE_IP` tells the container's processes to bind
their outgoing connections to it (on vast the host's NAT does that), so a server on 127.0.0.1 sees
which instance is calling. Linux routes the whole 127.0.0.0/8 to `lo`, so binding any of them
needs no configuration, in a loopback-only network namespace too.
"""

from __future__ import annotations

import shlex

from vastsim.containers.protocol import ContainerSpec

HOST_NETWORK_ENV = "VASTSIM_HOST_NETWORK"  # agent/sampling.py reads it (the agent has no vastsim)

IDLE = "exec sleep infinity"

# Ray's fixed default ports (GCS, dashboard, client server, dashboard agent): a Ray in a container
# takes them for itself whatever ports it is told, so no published port is one of them.
RESERVED = frozenset({6379, 8265, 10001, 52365, 52366})


def command(spec: ContainerSpec) -> list[str]:
    """argv of PID 1 (see the module docstring)."""
    if spec.runtype.strip() == "args":
        entry: list[str] = []
        if spec.onstart and spec.onstart.strip():
            try:
                entry = shlex.split(spec.onstart)
            except ValueError:
                entry = [spec.onstart]
        argv = entry + list(spec.args or ())
        return argv or ["sh", "-c", IDLE]
    script = (spec.onstart or "").strip()
    return ["sh", "-c", f"{script}\n{IDLE}" if script else IDLE]
