"""The client against a served vastsim, over real sockets: every operation and every fault.

The simulator runs on a virtual clock and the client's clock is the same clock: when the client
waits (pacing, backoff, Retry-After) the simulated world moves by exactly that much, so these
tests never really sleep, and vast's per-endpoint rate limits in the simulator see the pauses the
client took.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from reconciler.model import observed
from reconciler.vast import ClientSettings, RetrySettings, VastClient, client_from_settings, errors
from vastsim import Market, Sim, VirtualClock, serve
from vastsim.server import Server

KEY = "served-account-key-7c1e"
IMAGE = "rayproject/ray:2.60.0-py311-cpu"
T0 = 1_790_000_000.0
CREATE = "PUT /api/v0/asks/{id}/"
LIST = "GET /api/v1/instances/"
SHOW = "GET /api/v0/instances/{id}/"
SEARCH = "POST /api/v0/bundles/"


class SimTime:
    """The client's clock is the simulator's: sleeping moves the simulated world."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.clock.now()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.sim.advance(seconds)


@dataclass
class Served:
    sim: Sim
    server: Server
    time: SimTime
    sent: list[httpx.Request]

    def client(self, *, key: str = KEY, **settings: Any) -> VastClient:
        """A client on a real socket to the server; `sent` records what went over the wire."""
        settings.setdefault("retry", RetrySettings(deadline=300.0))
        http = httpx.Client(timeout=10.0, event_hooks={"request": [self.sent.append]})
        return VastClient(
            http=http,
            base_url=self.server.url,
            api_key=key,
            clock=self.time,
            settings=ClientSettings(**settings),
            rng=random.Random(11),
            owns_http=True,
        )

    def count(self, route: str, status: int | None = None) -> int:
        return len(self.sim.requests.filter(route=route, status=status))


@pytest.fixture
def served() -> Iterator[Served]:
    sim = Sim(market=Market.default(), clock=VirtualClock(start=T0), api_key=KEY, admin_key="adm")
    with serve(sim) as server:
        yield Served(sim, server, SimTime(sim), [])


@pytest.fixture
def client(served: Served) -> Iterator[VastClient]:
    with served.client() as vast:
        yield vast


def cheap_offers(vast: VastClient, limit: int = 10) -> list[observed.Offer]:
    search = observed.OfferSearch.of(
        {"num_gpus": {"eq": 1}, "rentable": {"eq": True}, "rented": {"eq": False}},
        limit=limit,
        allocated_storage=20,
    )
    return vast.search_offers(search)


def rent(vast: VastClient, label: str, offer: observed.Offer | None = None, **extra: Any) -> int:
    chosen = offer or cheap_offers(vast, 1)[0]
    request = observed.CreateRequest(
        image=IMAGE, disk_gb=20, label=label, ports=(22, 6379), args=("sleep", "infinity"), **extra
    )
    return vast.create_instance(chosen.id, request).instance_id


def labels(instances: list[observed.Instance]) -> list[str | None]:
    return [i.label for i in instances]


# --- every operation -----------------------------------------------------------------------------


def test_search_returns_matching_offers_cheapest_first(client: VastClient) -> None:
    offers = cheap_offers(client, limit=8)
    assert 1 < len(offers) <= 8
    assert all(o.num_gpus == 1 and o.rentable and not o.rented for o in offers)
    prices = [o.dph_total for o in offers]
    assert prices == sorted(prices)
    # storage is priced at the searched allocation: dph_total = dph_base + 20 GB x cost / 720
    first = offers[0]
    assert first.dph_base is not None
    assert first.storage_cost is not None
    assert first.dph_total == pytest.approx(first.dph_base + 20 * first.storage_cost / 720)


def test_the_whole_life_of_an_instance(served: Served, client: VastClient) -> None:
    instance_id = rent(client, "rv.t.abcdef12.life")
    created = served.sim.instance(instance_id)
    assert created is not None
    assert created.runtype == "args"
    assert list(created.args or []) == ["sleep", "infinity"]

    served.sim.advance(600)
    shown = client.show_instance(instance_id)
    assert shown is not None
    assert shown.actual_status == "running"
    assert shown.label == "rv.t.abcdef12.life"
    assert set(shown.ports) == {"22/tcp", "6379/tcp"}
    assert all(isinstance(port, int) for port in shown.ports.values())
    assert shown.public_ipaddr is not None

    client.label_instance(instance_id, "rv.t.abcdef12.relabelled")
    client.stop_instance(instance_id)
    served.sim.advance(120)
    stopped = client.show_instance(instance_id)
    assert stopped is not None
    assert stopped.intended_status == "stopped"
    assert stopped.label == "rv.t.abcdef12.relabelled"

    client.start_instance(instance_id)
    served.sim.advance(600)
    restarted = client.show_instance(instance_id)
    assert restarted is not None
    assert restarted.actual_status == "running"

    client.reboot_instance(instance_id)
    served.sim.advance(600)

    assert client.destroy_instance(instance_id) is True
    assert client.destroy_instance(instance_id) is False  # already gone is success
    assert client.show_instance(instance_id) is None
    assert instance_id not in [i.id for i in client.list_instances()]


def test_listing_follows_pages_to_the_end(served: Served) -> None:
    with served.client(page_size=2) as vast:
        offers = cheap_offers(vast, limit=5)
        ids = [rent(vast, f"rv.t.abcdef12.p{n}", offer) for n, offer in enumerate(offers)]
        listed = vast.list_instances()
    assert sorted(i.id for i in listed) == sorted(ids)
    assert served.count(LIST) == 3  # 5 rows at 2 a page


def test_bulk_destroy(served: Served, client: VastClient) -> None:
    offers = cheap_offers(client, limit=3)
    ids = [rent(client, f"rv.t.abcdef12.b{n}", offer) for n, offer in enumerate(offers)]
    client.destroy_instances(ids[:2])
    assert [i.id for i in client.list_instances()] == [ids[2]]


def test_a_taken_offer_is_offer_gone(client: VastClient) -> None:
    offer = cheap_offers(client, 1)[0]
    rent(client, "rv.t.abcdef12.first", offer)
    with pytest.raises(errors.VastOfferGoneError):
        rent(client, "rv.t.abcdef12.second", offer)


def test_a_bid_below_the_floor_leaves_an_instance_to_destroy(
    served: Served, client: VastClient
) -> None:
    offer = next(o for o in cheap_offers(client) if o.min_bid)
    with pytest.raises(errors.CreateLeftInstanceError) as info:
        rent(client, "rv.t.abcdef12.lowbid", offer, bid_price=0.001)
    orphan = info.value.instance_id
    assert orphan in [i.id for i in client.list_instances()]
    assert client.destroy_instance(orphan) is True


# --- faults ------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["text", "detail", "json"])
@pytest.mark.parametrize("retry_after", [None, 4.0])
def test_429s_in_every_shape_are_ridden_out(
    served: Served, client: VastClient, style: str, retry_after: float | None
) -> None:
    served.sim.faults.rate_limit(LIST, count=2, style=style, retry_after=retry_after)
    start = served.time.now()
    assert client.list_instances() == []
    assert served.count(LIST, 429) == 2
    assert served.count(LIST, 200) == 1
    waited = served.time.now() - start
    if retry_after is not None:
        assert waited == pytest.approx(2 * retry_after)
    else:
        assert waited > 0


def test_a_429_on_create_is_retried_without_a_second_instance(
    served: Served, client: VastClient
) -> None:
    served.sim.faults.rate_limit(CREATE, count=1, style="detail", retry_after=5)
    instance_id = rent(client, "rv.t.abcdef12.limited")
    assert served.count(CREATE, 429) == 1
    assert served.count(CREATE, 200) == 1
    assert list(served.sim.instances) == [instance_id]


def test_the_daily_search_quota_is_not_retried(served: Served, client: VastClient) -> None:
    served.sim.faults.rate_limit(SEARCH, count=5, style="quota")
    with pytest.raises(errors.VastSearchQuotaError):
        cheap_offers(client)
    assert served.count(SEARCH) == 1


@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_errors_with_html_are_retried_for_reads(
    served: Served, client: VastClient, status: int
) -> None:
    instance_id = rent(client, "rv.t.abcdef12.html")
    served.sim.faults.server_error(SHOW, count=2, status=status)
    shown = client.show_instance(instance_id)
    assert shown is not None
    assert served.count(SHOW, status) == 2


def test_an_html_500_is_not_retried(served: Served, client: VastClient) -> None:
    served.sim.faults.server_error(SHOW, count=1, status=500)
    with pytest.raises(errors.VastServerError) as info:
        client.show_instance(123)
    assert info.value.status == 500
    assert served.count(SHOW) == 1


def test_a_lost_create_response_is_an_unknown_outcome_and_the_label_finds_it(
    served: Served, client: VastClient
) -> None:
    served.sim.faults.lose_create_response()
    label = "rv.t.abcdef12.lost"
    with pytest.raises(errors.CreateOutcomeUnknownError) as info:
        rent(client, label)
    assert info.value.label == label
    assert served.count(CREATE) == 1  # never retried into a second billed instance
    assert len(served.sim.instances) == 1
    (found,) = [i for i in client.list_instances() if i.label == label]
    assert found.id in served.sim.instances


def test_a_gateway_error_after_the_create_ran_is_an_unknown_outcome(
    served: Served, client: VastClient
) -> None:
    served.sim.faults.server_error(CREATE, status=504, after=True)
    with pytest.raises(errors.CreateOutcomeUnknownError):
        rent(client, "rv.t.abcdef12.gateway")
    assert served.count(CREATE) == 1
    assert labels(client.list_instances()) == ["rv.t.abcdef12.gateway"]


@pytest.mark.parametrize("status", [500, 503])
def test_a_failing_listing_page_fails_the_listing(served: Served, status: int) -> None:
    with served.client(page_size=2, retry=RetrySettings(max_attempts=3)) as vast:
        for n, offer in enumerate(cheap_offers(vast, limit=5)):
            rent(vast, f"rv.t.abcdef12.f{n}", offer)
        served.sim.faults.fail_listing(page=2, status=status, count=3)
        with pytest.raises(errors.VastServerError):
            vast.list_instances()


def test_a_listing_page_that_fails_once_is_retried_and_complete(served: Served) -> None:
    with served.client(page_size=2) as vast:
        for n, offer in enumerate(cheap_offers(vast, limit=5)):
            rent(vast, f"rv.t.abcdef12.r{n}", offer)
        served.sim.faults.fail_listing(page=3, status=503, count=1)
        assert len(vast.list_instances()) == 5


def test_an_instance_hidden_from_listings_is_reported_as_vast_lists_it(
    served: Served, client: VastClient
) -> None:
    # The client reports each listing as vast sent it (no cache, no invented rows); deciding that
    # an instance missing for one listing is not gone is the planner's job (60 s rule).
    instance_id = rent(client, "rv.t.abcdef12.hidden")
    served.sim.faults.hide_instance(instance_id, listings=1)
    assert client.list_instances() == []
    assert client.show_instance(instance_id) is not None
    assert [i.id for i in client.list_instances()] == [instance_id]


@pytest.mark.parametrize("auth_status", [401, 404])
def test_a_wrong_key_is_an_auth_error_never_gone_or_empty(
    served: Served, client: VastClient, auth_status: int
) -> None:
    instance_id = rent(client, "rv.t.abcdef12.keyed")
    served.sim.faults.auth_status(auth_status)
    with served.client(key="wrong-key") as wrong:
        with pytest.raises(errors.VastAuthError):
            wrong.list_instances()
        with pytest.raises(errors.VastAuthError):
            wrong.show_instance(instance_id)
        with pytest.raises(errors.VastAuthError):
            wrong.destroy_instance(instance_id)
    assert instance_id in served.sim.instances


def test_pacing_keeps_a_burst_clear_of_vasts_rate_limits(served: Served) -> None:
    served.sim.faults.enable_rate_limits()  # vast's documented thresholds, 429 on violation
    with served.client() as vast:
        offers = cheap_offers(vast, limit=3)
        ids = [rent(vast, f"rv.t.abcdef12.burst{n}", offer) for n, offer in enumerate(offers)]
        for instance_id in ids:
            vast.show_instance(instance_id)
            vast.label_instance(instance_id, f"rv.t.abcdef12.burst-{instance_id}")
            vast.list_instances()
        for instance_id in ids:
            vast.destroy_instance(instance_id)
        assert all(outcome == "ok" for _, outcome in vast.counters)
    assert not served.sim.requests.filter(status=429)


def test_without_pacing_the_same_burst_meets_429s_and_retries_through(served: Served) -> None:
    served.sim.faults.enable_rate_limits()
    with served.client(pacing=False) as vast:
        for _ in range(3):
            vast.list_instances()
        assert vast.counters[("list", "ok")] == 3
        assert vast.counters[("list", "rate_limited")] >= 2
    assert served.sim.requests.filter(status=429)


# --- the key ---------------------------------------------------------------------------------


def test_the_key_travels_only_in_the_authorization_header(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    failures: list[errors.VastError] = []
    with served.client() as vast:
        served.sim.faults.rate_limit(LIST, count=1, style="json")
        vast.list_instances()
        served.sim.faults.lose_create_response()
        try:
            rent(vast, "rv.t.abcdef12.secret")
        except errors.VastError as exc:
            failures.append(exc)
        served.sim.faults.server_error(SHOW, status=500)
        try:
            vast.show_instance(1)
        except errors.VastError as exc:
            failures.append(exc)
        text = repr(vast) + str(vast)
    with served.client(key=KEY + "-revoked") as wrong:
        try:
            wrong.list_instances()
        except errors.VastError as exc:
            failures.append(exc)
    assert len(failures) == 3
    assert KEY not in text
    for exc in failures:
        assert KEY not in str(exc)
        assert KEY not in repr(exc)
    assert caplog.records
    for record in caplog.records:
        assert KEY not in record.getMessage()
    assert served.sent
    for request in served.sent:
        assert KEY not in str(request.url)
        assert KEY not in request.content.decode()
        for name, value in request.headers.items():
            assert (KEY in value) == (name.lower() == "authorization")
    for record in served.sim.requests:
        assert KEY not in record.path


def test_the_factory_reaches_the_served_sim_through_vast_url(served: Served) -> None:
    env = {"VAST_API_KEY": KEY, "VAST_URL": served.server.url}
    with client_from_settings(env=env, spec_url="http://unused.invalid", clock=served.time) as vast:
        assert vast.list_instances() == []
    assert served.count(LIST, 200) == 1
