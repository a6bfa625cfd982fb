"""What the controller learns from the cluster's Ray head: demand, busy nodes, live nodes.

Read from the GCS only (no driver, no local raylet): `GcsClient.get_all_node_info` for which
nodes are alive (our control-plane probe of each worker), and the autoscaler's cluster resource
state for pending demand and which nodes are idle. Each Ray node carries the `rv_record` label the
enrollment answer gave it, which ties it to its record.

Each cluster has its own head and token (`RayReaders` keeps one reader per cluster); Ray holds
one token per process, so each reader's calls switch to its own token first.

The demand is read as Ray's autoscaler reads it (`raydemand`); the planner packs it. The
`request_resources()` constraint is in the cluster resource state only under autoscaler v2; a
head that runs v1 (`ray start --head`'s default, ray-vast's own heads among them) keeps it in the
GCS key-value store, read when the state has none. Constructing a GCS client against a dead GCS
blocks for ~40 s, so a TCP connect comes first and the client is kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import RayReport
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.watch import raydemand, rayreport
from reconciler.watch.rayevents import DriverEvents

log = logging.getLogger("ray_vast")

ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE
IDLE = 3  # autoscaler NodeStatus.IDLE
DEAD = 2  # autoscaler NodeStatus.DEAD


# Ray keeps one auth token per process (its loader caches what RAY_AUTH_TOKEN_PATH names, and
# every GCS call sends it); readers of several clusters' heads take turns under this lock.
class _Token:
    lock = threading.RLock()
    active: str | None = None  # the path the loader was last pointed at


@contextlib.contextmanager
def _authenticated(token_path: str | None) -> Iterator[None]:
    """Ray's calls inside this block send the token in `token_path` (None: whatever the process
    environment says, as for a head without token auth)."""
    with _Token.lock:
        if token_path is not None and token_path != _Token.active:
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
            os.environ.pop("RAY_AUTH_TOKEN", None)
            from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # noqa: PLC0415

            AuthenticationTokenLoader.instance().reset_cache()
            _Token.active = token_path
        yield


class RaySignals:
    """Signals from one Ray head; anything unreadable reads as "no sample", never as "idle"."""

    def __init__(self, address: str, cluster: str, *, token_path: str | None = None) -> None:
        self.address = address
        self.cluster = cluster
        self.token_path = token_path
        self._client: Any = None
        self._seen_version = 0  # the GCS's resource state version at the last reading
        self._events = DriverEvents(cluster)  # what the head's drivers are told (rayevents)
        if token_path and "ray" not in sys.modules:
            # Ray reads its token settings from the process environment when it is first
            # imported: they must be in place before anything imports Ray (a later reader of
            # another cluster switches them, `_authenticated`).
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN_PATH"] = token_path
        # Imported here, in the thread that builds the signals, not lazily in the watch thread:
        # Ray's modules fail to import when two threads import them at once. Ray is heavy, so
        # only a watch that reads a Ray head loads it.
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # noqa: PLC0415
        from ray.autoscaler.v2.sdk import get_cluster_resource_state  # noqa: PLC0415

        self._client_class = GcsClient
        self._resource_state = get_cluster_resource_state

    def close(self) -> None:
        """Forget the GCS client (a reader of a cluster that was removed, or whose head moved),
        and close the drivers' event file."""
        self._client = None
        self._events.close()

    def _gcs(self) -> Any:
        if self._client is None:
            host, _, port = self.address.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=2):
                pass
            self._client = self._client_class(address=self.address)
        return self._client

    def _state(self) -> Any:
        state = self._resource_state(self._gcs())
        self._seen_version = int(state.cluster_resource_state_version)
        return state

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        """Report this cluster's autoscaling state to its head's GCS, as Ray's autoscaler
        does (what `ray status` shows as pending and failed), and tell the head's drivers the
        demand no node type can serve, as Ray's autoscaler does (`rayevents`)."""
        state = states.get(self.cluster)
        if state is None:
            return
        with _authenticated(self.token_path):
            told = rayreport.encoded(state, now=now, seen_version=self._seen_version)
            try:
                self._gcs().report_autoscaling_state(told)
                self._events.infeasible(state.infeasible, now, self._head_logs)
            except Exception as exc:
                log.warning("Ray of %s not told what ray-vast is doing: %s", self.cluster, exc)

    def _head_logs(self) -> str | None:
        """The logs directory of the head's current session, when it is on this machine."""
        for node in self._gcs().get_all_node_info(timeout=5).values():
            if node.is_head_node and node.state == ALIVE:
                logs = os.path.join(node.session_dir, "logs")
                return logs if os.path.isdir(logs) else None
        return None

    # Each reading runs with this reader's token: Ray holds one token per process, read at each
    # call from what the environment names once its cache is reset.

    def unread(self) -> Collection[str]:
        """Nothing of its own: `RayReaders` tells which cluster's reading failed."""
        return ()

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        with _authenticated(self.token_path):
            return self._reports(specs)

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        with _authenticated(self.token_path):
            return self._busy(records, now)

    def work(self, records: Records) -> Mapping[str, bool] | None:
        with _authenticated(self.token_path):
            return self._work(records)

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        with _authenticated(self.token_path):
            return self._drain_idle(record_ids, deadline)

    def probes(self, records: Records) -> Mapping[str, bool]:
        with _authenticated(self.token_path):
            return self._probes(records)

    def _reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        """What the head reports for its cluster: the demand and Ray's live nodes, as Ray's
        autoscaler reads them (`raydemand`); the packing is the planner's."""
        if self.cluster not in specs:
            return {}
        try:
            state = self._state()
            # autoscaler v1 (the head's default) keeps request_resources() in the KV store
            kept = (
                None
                if len(state.cluster_resource_constraints)
                else self._gcs().internal_kv_get(raydemand.V1_REQUEST_KEY, None, timeout=5)
            )
        except Exception as exc:
            log.warning("Ray demand of %s not read: %s", self.cluster, exc)
            return None
        return {self.cluster: raydemand.report(state, requested=raydemand.v1_requested(kept))}

    def _busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        """Ray's half of the idle scanner's traffic, for the records Ray has a node of (the
        agent's sample is the other half, `RayReaders.busy`)."""
        try:
            state = self._state()
            nodes = self._records_by_node()
        except Exception as exc:
            log.warning("Ray node usage of %s not read: %s", self.cluster, exc)
            return {}
        return dict(_node_work(state, nodes))

    def _work(self, records: Records) -> Mapping[str, bool] | None:
        """Ray's view of work per record (reaper gate 3); a live record Ray has no node of holds
        no work."""
        try:
            state = self._state()
            nodes = self._records_by_node()
        except Exception as exc:
            log.warning("Ray work of %s not read: %s", self.cluster, exc)
            return None
        # every live record of this reader's cluster: no live node of it holds no work
        out = {r.id: False for r in records.live_instances(self.cluster)}
        out.update(_node_work(state, nodes))
        return out

    def _drain_idle(self, record_ids: Sequence[str], deadline: float) -> Mapping[str, bool] | None:
        """DrainNode with the idle-termination reason and a deadline, as autoscaler v2 drains an
        idle node: Ray accepts only a node that is idle, and stops placing work on it. A record
        whose node Ray does not have is accepted (nothing to drain)."""
        try:
            by_record = {r: n for n, r in self._records_by_node().items()}
            gcs = self._gcs()
            from ray.core.generated import autoscaler_pb2  # noqa: PLC0415
        except Exception as exc:
            log.warning("Ray nodes of %s not drained: %s", self.cluster, exc)
            return None
        why = autoscaler_pb2.DrainNodeReason.Value(  # type: ignore[attr-defined]
            "DRAIN_NODE_REASON_IDLE_TERMINATION"
        )
        out: dict[str, bool] = {}
        for record_id in record_ids:
            node = by_record.get(record_id)
            if node is None:
                out[record_id] = True
                continue
            try:
                accepted, refusal = gcs.drain_node(
                    node, why, "idle past the node type's window", int(deadline * 1000)
                )
            except Exception as exc:
                log.warning("Ray node of %s not drained: %s", record_id, exc)
                continue
            out[record_id] = bool(accepted)
            log.info("Ray node of %s drained for idle end: %s %s", record_id, accepted, refusal)
        return out

    def _probes(self, records: Records) -> Mapping[str, bool]:
        try:
            nodes = self._gcs().get_all_node_info(timeout=5)
        except Exception as exc:
            log.warning("Ray nodes of %s not read: %s", self.cluster, exc)
            return {}
        return {
            n.labels["rv_record"]: n.state == ALIVE
            for n in nodes.values()
            if "rv_record" in n.labels and n.state == ALIVE
        }

    def _records_by_node(self) -> dict[str, str]:
        nodes = self._gcs().get_all_node_info(timeout=5)
        return {
            nid.hex(): n.labels["rv_record"]
            for nid, n in nodes.items()
            if "rv_record" in n.labels and n.state == ALIVE
        }


def _node_work(state: Any, nodes: Mapping[str, str]) -> dict[str, bool]:
    """Per record Ray has a node of: whether Ray reports work there. A node that autoscaler v2
    does not call IDLE has leased resources, actors or placement-group bundles on it; a DEAD one
    holds none. A record with several nodes (Ray restarted on a resumed worker leaves the old
    node DEAD in the table) has work when any of them has."""
    out: dict[str, bool] = {}
    for node in state.node_states:
        record_id = nodes.get(bytes(node.node_id).hex())
        if record_id is not None:
            out[record_id] = out.get(record_id, False) or node.status not in (IDLE, DEAD)
    return out
