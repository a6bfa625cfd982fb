"""The fleet on virtual time now lives in `fleetsim.harness` (packaged, so that `ray-vast simulate`
can run it); this name stays for the benchmarks and tests that import it from here."""

from fleetsim.harness import (
    API_KEY,
    PORT_STEP,
    START,
    VAST_URL,
    ControllerLedger,
    DemandSignals,
    Fleet,
    SimClock,
    fleet,
)

__all__ = [
    "API_KEY",
    "PORT_STEP",
    "START",
    "VAST_URL",
    "ControllerLedger",
    "DemandSignals",
    "Fleet",
    "SimClock",
    "fleet",
]
