"""The simulator: the world (`vastsim.world`), the API that serves it and the faults that bend it.

`Sim` is what callers build; it is the only module that knows all three, so `api`, `control` and
`faults` import the world and never the simulator (no import circle). See the package docstring for
the tour.
"""

from __future__ import annotations

from collections.abc import Mapping

from vastsim.api import Api
from vastsim.clock import Clock
from vastsim.containers.protocol import Runner
from vastsim.faults import Faults
from vastsim.lifecycle import Timing
from vastsim.market import Market
from vastsim.world import World


class Sim(World):
    """A faithful local vast.ai. See the package docstring for the tour."""

    def __init__(
        self,
        *,
        market: Market | None = None,
        clock: Clock | None = None,
        api_key: str = "vastsim",
        admin_key: str | None = None,
        runner: Runner | None = None,
        timing: Timing | None = None,
        auth_error_status: int = 401,
        rate_limits: bool | Mapping[str, float] = False,
        initial_credit: float = 1000.0,
        first_instance_id: int = 20_000_001,
    ) -> None:
        super().__init__(
            market=market,
            clock=clock,
            api_key=api_key,
            admin_key=admin_key,
            runner=runner,
            timing=timing,
            initial_credit=initial_credit,
            first_instance_id=first_instance_id,
        )
        self.faults = Faults(self)
        self.faults.auth_status(auth_error_status)
        if rate_limits:
            thresholds = None if rate_limits is True else dict(rate_limits)
            self.faults.enable_rate_limits(thresholds)
        self.app = Api(self, self.faults)
