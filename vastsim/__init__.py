"""vastsim: a faithful local vast.ai for tests, benchmarks and the embedded default.

    from vastsim import Sim, Market, VirtualClock, RealClock, serve, InProcessTransport

    sim = Sim(market=Market.default(), clock=VirtualClock(), api_key="k", admin_key="a",
              runner=ScriptedRunner(factory))
    client = httpx.Client(transport=InProcessTransport(sim), base_url="http://vastsim")
    sim.advance(60)                  # virtual time: life cycles and scripted containers
    with serve(sim) as server:       # or a real socket (real time steps in the background)
        server.url                   # VAST_URL for the official CLI

The pieces: `market` (machines and offers), `query` (vast's filter language), `lifecycle`
(statuses on a clock), `billing` (the meter), `faults` (injection), `api` + `routing` + `wire`
(the HTTP surface), `listing` (v1 pagination), `runners` / `process` (containers), `server` and
`transport` (socket and in-process), `cli` (`python -m vastsim serve`). vastsim imports neither
`reconciler` nor `agent`.
"""

from vastsim.billing import Meter, Segment
from vastsim.clock import Clock, RealClock, VirtualClock
from vastsim.faults import Faults
from vastsim.instances import Instance
from vastsim.lifecycle import Timing
from vastsim.market import Bundle, Machine, Market, Traits
from vastsim.process import ProcessRunner
from vastsim.ratelimit import VAST_THRESHOLDS
from vastsim.requestlog import RequestLog, RequestRecord
from vastsim.runners import (
    Behaviour,
    Container,
    ContainerSpec,
    NoContainers,
    Runner,
    ScriptedRunner,
)
from vastsim.server import Server, serve
from vastsim.sim import Sim
from vastsim.transport import InProcessTransport

__all__ = [
    "VAST_THRESHOLDS",
    "Behaviour",
    "Bundle",
    "Clock",
    "Container",
    "ContainerSpec",
    "Faults",
    "InProcessTransport",
    "Instance",
    "Machine",
    "Market",
    "Meter",
    "NoContainers",
    "ProcessRunner",
    "RealClock",
    "RequestLog",
    "RequestRecord",
    "Runner",
    "ScriptedRunner",
    "Segment",
    "Server",
    "Sim",
    "Timing",
    "Traits",
    "VirtualClock",
    "serve",
]
