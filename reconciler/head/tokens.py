"""Join tokens: how a candidate proves which instance record it was rented for.

A token is random (`secrets.token_urlsafe`), handed to the candidate in its environment at create,
and kept by the head only as its sha256, so a leaked state file enrolls nobody. It is bound to one
instance record and, at its first use, to one boot of the container; it is single use and expires
with the enrollment window. Everything here but `mint` is a pure function of the records.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace

from reconciler.model.records import JoinToken, Records
from reconciler.model.spec import ClusterSpec, NodeType

TOKEN_BYTES = 32


def mint() -> str:
    """A fresh token (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def digest(token: str) -> str:
    """How a token is stored and looked up: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def enrollment_window(spec: ClusterSpec, node_type: NodeType) -> float:
    """How long a token may wait for its candidate: the longest a genuine candidate can take,
    which is its image pull plus the time it allows itself to enroll before it gives up."""
    return float(node_type.pull_limit_seconds + spec.watchdogs.candidate_self_destroy_seconds)


def join_token(token: str, *, cluster: str, record_id: str, now: float, window: float) -> JoinToken:
    return JoinToken(
        token_hash=digest(token),
        record_id=record_id,
        cluster=cluster,
        issued_at=now,
        expires_at=now + window,
    )


def with_token(records: Records, token: JoinToken) -> Records:
    """The records holding `token` as the only token of its record (a create retried on another
    offer keeps its record id and gets a new token; the old one must stop working)."""
    kept = {h: t for h, t in records.tokens.items() if t.record_id != token.record_id}
    kept[token.token_hash] = token
    return replace(records, tokens=kept)


def prune(records: Records, now: float) -> Records:
    """Drop tokens nobody can use any more: unused and expired, or of a record that has ended.
    A used token of a live record is kept, because it authenticates that instance's report."""

    def keep(token: JoinToken) -> bool:
        record = records.instances.get(token.record_id)
        if record is None or not record.live:
            return False
        return token.used_at is not None or token.expires_at > now

    kept = {h: t for h, t in records.tokens.items() if keep(t)}
    if len(kept) == len(records.tokens):
        return records
    return replace(records, tokens=kept)
