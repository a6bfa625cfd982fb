"""What a rented machine is told to run: the create request for one candidate.

The executor asks a `Launcher`; the head (issue 6) supplies one that puts the bootloader in as
PID 1 with a fresh join token. `ImageLauncher` runs the node type's image as it is, for clusters
whose workers need nothing from us at boot (and for tests of the executor alone).
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.observed import CreatedInstance, CreateRequest
from reconciler.model.records import InstanceRecord, Records
from reconciler.model.spec import ClusterSpec, NodeType


class Launcher(Protocol):
    def create_request(
        self, spec: ClusterSpec, node_type: NodeType, record: InstanceRecord, *, bid: float | None
    ) -> CreateRequest: ...

    def before_create(self, records: Records, record: InstanceRecord) -> Records:
        """The records to save before the create call: with what the request prepared (the join
        token's hash), so a candidate can never present something the head has not recorded."""
        ...

    def created(self, record: InstanceRecord, created: CreatedInstance) -> None:
        """The instance exists: bind whatever was prepared for it (a join token) to its id."""
        ...


class ImageLauncher:
    """The node type's image with its env; no agent."""

    def create_request(
        self, spec: ClusterSpec, node_type: NodeType, record: InstanceRecord, *, bid: float | None
    ) -> CreateRequest:
        return CreateRequest(
            image=node_type.image,
            disk_gb=node_type.disk_gb,
            label=record.label,
            env=dict(node_type.env),
            bid_price=bid,
        )

    def before_create(self, records: Records, record: InstanceRecord) -> Records:
        return records

    def created(self, record: InstanceRecord, created: CreatedInstance) -> None:
        return None
