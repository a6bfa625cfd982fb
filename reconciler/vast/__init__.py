"""The vast.ai API client: the only code in `reconciler` that imports httpx.

    from reconciler.vast import client_from_settings
    vast = client_from_settings(env=os.environ, spec_url=None, clock=SystemClock())
    offers = vast.search_offers(OfferSearch.of({"num_gpus": {"eq": 1}}))

See `client` for the operations, `errors` for the error tree, `retry` for what is retried.

May import `model` and the error root (and httpx, tenacity); nothing above it.
"""

from reconciler.vast.client import VastClient
from reconciler.vast.config import ClientSettings
from reconciler.vast.errors import (
    CreateLeftInstanceError,
    CreateOutcomeUnknownError,
    VastAuthError,
    VastConfigError,
    VastConnectError,
    VastError,
    VastNotFoundError,
    VastOfferGoneError,
    VastProtocolError,
    VastRateLimitError,
    VastRejectedError,
    VastSearchQuotaError,
    VastServerError,
    VastTransportError,
)
from reconciler.vast.factory import client_from_settings
from reconciler.vast.retry import RetrySettings

__all__ = [
    "ClientSettings",
    "CreateLeftInstanceError",
    "CreateOutcomeUnknownError",
    "RetrySettings",
    "VastAuthError",
    "VastClient",
    "VastConfigError",
    "VastConnectError",
    "VastError",
    "VastNotFoundError",
    "VastOfferGoneError",
    "VastProtocolError",
    "VastRateLimitError",
    "VastRejectedError",
    "VastSearchQuotaError",
    "VastServerError",
    "VastTransportError",
    "client_from_settings",
]
