"""The agents of a virtual-time fleet now live in `fleetsim.agents` (packaged, so that `ray-vast
simulate` can run them); this name stays for the benchmarks and tests that import it from here."""

from fleetsim.agents import (
    DOCKER_STOP_GRACE,
    HEALTHY,
    RAY_STARTUP,
    REFUSED,
    UNREACHABLE,
    AgentBehaviour,
    AgentWorld,
    ContainerFault,
    Image,
    Route,
    Span,
)

__all__ = [
    "DOCKER_STOP_GRACE",
    "HEALTHY",
    "RAY_STARTUP",
    "REFUSED",
    "UNREACHABLE",
    "AgentBehaviour",
    "AgentWorld",
    "ContainerFault",
    "Image",
    "Route",
    "Span",
]
