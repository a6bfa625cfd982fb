"""vastsim: a faithful local vast.ai for tests, benchmarks and the embedded default.

    from vastsim import Sim, Market, VirtualClock, RealClock, serve, InProcessTransport

    sim = Sim(market=Market.default(), clock=VirtualClock(), api_key="k", admin_key="a",
              runner=ScriptedRunner(factory))
    client = httpx.Client(transport=InProcessTransport(sim), base_url="http://vastsim")
    sim.advance(60)                  # virtual time: life cycles and scripted containers
    with serve(sim) as server:       # or a real socket (real time steps in the background)
        server.url                   # VAST_URL for the official CLI

The pieces: `world` (the account under one lock, and its time; `sim` adds the API and the
faults), `market` (machines and offers), `query` (vast's filter language), `lifecycle`
(statuses on a clock), `billing` (the meter), `faults` (injection), `api` + `routing` + `wire`
(the HTTP surface), `listing` (v1 pagination), `containers` (the runners), `server` and
`transport` (socket and in-process), `cli` (`python -m vastsim serve`). vastsim imports neither
`reconciler` nor `agent`.
"""

from vastsim.billing import Meter, Segment
from vastsim.clock import Clock, RealClock, VirtualClock
from vastsim.containers.protocol import ContainerSpec, Runner
from vastsim.containers.runner import ProcessRunner
from vastsim.containers.scripted import Behaviour, Container, NoContainers, ScriptedRunner
from vastsim.faults import Faults
from vastsim.instances import Instance
from vastsim.lifecycle import Timing
from vastsim.market import Bundle, Machine, Market, Traits
from vastsim.ratelimit import VAST_THRESHOLDS
from vastsim.requestlog import RequestLog, RequestRecord
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
