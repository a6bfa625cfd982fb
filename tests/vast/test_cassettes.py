"""The client against vast's documented real wire shapes, replayed from hand-written cassettes.

The cassettes (see `cassettes/README.md`) hold what the real API sends where the simulator may
differ: 404 auth errors, plain-text and `{"detail"}` 429s, HTML 500s, 410s, both "gone" bodies, a
spot create error that still names an instance, rows with trailing newlines and null fields. The
client talks through a real `httpx.Client` whose transport vcrpy replaces; replay only, so a request
that is not in the cassette fails the test, and every interaction must be played.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import vcr

from reconciler.clock import FakeClock
from reconciler.model import observed
from reconciler.vast import ClientSettings, VastClient, errors

START = 1_790_000_000.0
REPLAY = vcr.VCR(
    cassette_library_dir=str(Path(__file__).parent / "cassettes"),
    record_mode="none",
    filter_headers=["authorization"],
    match_on=["method", "scheme", "host", "port", "path", "query"],
)


@pytest.fixture
def real_client(clock: FakeClock) -> Iterator[VastClient]:
    client = VastClient(
        http=httpx.Client(),
        base_url="https://console.vast.ai",
        api_key="cassette-key",
        clock=clock,
        settings=ClientSettings(),
        rng=random.Random(3),
        owns_http=True,
    )
    yield client
    client.close()


def create_request(**overrides: object) -> observed.CreateRequest:
    return observed.CreateRequest(
        image="ghcr.io/example/ray-worker:2.40",
        disk_gb=40,
        label="rv.demo.abcdef12.r1",
        **overrides,  # type: ignore[arg-type]
    )


def test_a_bad_key_answered_with_404_is_an_auth_error_everywhere(real_client: VastClient) -> None:
    with REPLAY.use_cassette("auth_404_invalid_user_key.yaml") as cassette:
        with pytest.raises(errors.VastAuthError, match="auth_error"):
            real_client.list_instances()
        with pytest.raises(errors.VastAuthError):
            real_client.show_instance(4242)  # not None: the instance is not known to be gone
        with pytest.raises(errors.VastAuthError):
            real_client.destroy_instance(4242)  # not "already gone": it may still bill
        with pytest.raises(errors.VastAuthError):
            real_client.search_offers(observed.OfferSearch())
        assert cassette.all_played


def test_plain_text_429s_are_backed_off_and_retried(
    real_client: VastClient, clock: FakeClock
) -> None:
    with REPLAY.use_cassette("rate_limit_429_plain_text.yaml") as cassette:
        offers = real_client.search_offers(observed.OfferSearch())
        assert real_client.list_instances() == []
        assert cassette.all_played
    assert [o.id for o in offers] == [13217766]
    assert offers[0].geolocation == "Quebec, CA"
    assert real_client.counters[("search", "rate_limited")] == 1
    assert real_client.counters[("list", "rate_limited")] == 1
    assert clock.now() > START  # waited on the fake clock, not on the wall


def test_a_create_refused_with_detail_429_is_retried_once_after_retry_after(
    real_client: VastClient, clock: FakeClock
) -> None:
    with REPLAY.use_cassette("rate_limit_429_detail_create.yaml") as cassette:
        created = real_client.create_instance(13217766, create_request())
        assert cassette.all_played
    assert created.instance_id == 1234568
    assert created.instance_api_key is not None
    assert clock.now() - START >= 5.0  # Retry-After: 5 honoured


def test_an_html_500_is_a_server_error_and_an_unknown_create(real_client: VastClient) -> None:
    with REPLAY.use_cassette("server_500_html.yaml") as cassette:
        with pytest.raises(errors.VastServerError) as shown:
            real_client.show_instance(4242)
        with pytest.raises(errors.CreateOutcomeUnknownError) as created:
            real_client.create_instance(13217766, create_request())
        assert cassette.all_played  # and nothing was retried: each was played once
    assert "Internal Server Error" in str(shown.value)
    assert len(str(shown.value)) < 400
    assert created.value.label == "rv.demo.abcdef12.r1"


def test_410s_are_an_offer_gone_and_a_listing_that_fails(real_client: VastClient) -> None:
    with REPLAY.use_cassette("gone_410_and_deprecated.yaml") as cassette:
        with pytest.raises(errors.VastOfferGoneError):
            real_client.create_instance(13217766, create_request())
        with pytest.raises(errors.VastOfferGoneError):
            real_client.create_instance(13217767, create_request())
        with pytest.raises(errors.VastRejectedError) as listing:
            real_client.list_instances()
        assert cassette.all_played
    assert listing.value.code == "deprecated_endpoint"


def test_both_spellings_of_gone_make_destroy_succeed(real_client: VastClient) -> None:
    with REPLAY.use_cassette("destroy_gone.yaml") as cassette:
        assert real_client.destroy_instance(101) is False
        assert real_client.destroy_instance(102) is False
        assert real_client.destroy_instance(103) is True
        assert real_client.show_instance(103) is None
        assert cassette.all_played


def test_a_spot_create_error_with_new_contract_names_the_orphan(real_client: VastClient) -> None:
    with REPLAY.use_cassette("create_spot_new_contract.yaml") as cassette:
        with pytest.raises(errors.CreateLeftInstanceError) as info:
            real_client.create_instance(13217766, create_request(bid_price=0.05))
        assert cassette.all_played
    assert info.value.instance_id == 8123457
    assert info.value.code == "invalid_price"


def test_real_instance_rows_parse_across_pages(real_client: VastClient) -> None:
    with REPLAY.use_cassette("instances_real_rows.yaml") as cassette:
        instances = real_client.list_instances()
        shown = real_client.show_instance(8123452)
        assert cassette.all_played
    by_id = {i.id: i for i in instances}
    assert list(by_id) == [8123451, 8123452, 8123453, 8123454]

    loading = by_id[8123451]
    assert loading.label == "rv.demo.abcdef12.r1"
    assert loading.actual_status is None
    assert loading.public_ipaddr == "203.0.113.9"
    assert loading.status_msg == "59729b65119e: Pull complete"
    assert loading.ports == {}

    running = by_id[8123452]
    assert running.ports == {"22/tcp": 41022, "6379/tcp": 41379}
    assert running.start_date == 1790000000.5
    assert running.dph_total == pytest.approx(0.4083333333333333)
    assert shown == running

    never_started = by_id[8123453]
    assert never_started.label is None
    assert never_started.actual_status == "created"
    assert never_started.status_msg is not None
    assert "OCI runtime create failed" in never_started.status_msg
    assert never_started.ports == {}

    assert by_id[8123454].label == "someone-elses-notebook"
    assert by_id[8123454].is_bid is True
