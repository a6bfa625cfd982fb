"""What the executor needs of vast: the part of `reconciler.vast.VastClient` it calls.

Written as a Protocol so the executor is tested against the real client over real sockets, and so
nothing here depends on how the client talks HTTP.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.observed import CreatedInstance, CreateRequest, Instance, Offer, OfferSearch


class Provider(Protocol):
    def search_offers(self, query: OfferSearch) -> list[Offer]: ...

    def create_instance(self, offer_id: int, request: CreateRequest) -> CreatedInstance: ...

    def list_instances(self) -> list[Instance]: ...

    def show_instance(self, instance_id: int) -> Instance | None: ...

    def destroy_instance(self, instance_id: int) -> bool: ...

    def stop_instance(self, instance_id: int) -> None: ...

    def start_instance(self, instance_id: int) -> None: ...
