"""The factory the CLI uses to build a vast client.

The factory takes the environment as an argument: code below the CLI never reads `os.environ`.
`VAST_URL` (the variable the official CLI reads too) overrides the URL a spec names; `VAST_API_KEY`
is the key, and its absence is an error that names the variable.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import httpx

from reconciler import clock as clock_mod
from reconciler.vast import client as client_mod
from reconciler.vast import config, errors

DEFAULT_URL = "https://console.vast.ai"
URL_VARIABLE = "VAST_URL"
KEY_VARIABLE = "VAST_API_KEY"
USER_AGENT = "ray-vast"


def client_from_settings(
    *,
    env: Mapping[str, str],
    spec_url: str | None,
    clock: clock_mod.Clock,
    transport: httpx.BaseTransport | None = None,
    settings: config.ClientSettings | None = None,
    rng: random.Random | None = None,
) -> client_mod.VastClient:
    """Build a client from the environment the CLI hands down; `transport` is for tests, `rng`
    (the retries' jitter) for a simulation that must replay exactly."""
    api_key = env.get(KEY_VARIABLE, "").strip()
    if not api_key:
        raise errors.VastConfigError(
            f"{KEY_VARIABLE} is not set: export your vast.ai API key as {KEY_VARIABLE}"
        )
    base_url = env.get(URL_VARIABLE, "").strip() or spec_url or DEFAULT_URL
    settings = settings or config.ClientSettings()
    http = httpx.Client(
        transport=transport,
        timeout=settings.timeout,
        trust_env=False,  # no proxy or netrc settings picked up behind the CLI's back
        follow_redirects=False,  # never carry the Authorization header to another place
        headers={"User-Agent": USER_AGENT},
    )
    try:
        return client_mod.VastClient(
            http=http,
            base_url=base_url,
            api_key=api_key,
            clock=clock,
            settings=settings,
            owns_http=True,
            rng=rng,
        )
    except BaseException:
        http.close()
        raise
