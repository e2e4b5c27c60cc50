"""What compose-model-cache-grant publishes and compose-model-cache obeys: one row per
ModelCache naming the grant in the grant's status.caches (admitted or refused, at which
admission digest, for which footprint), and the admission digest both sides compute."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import messages
from fleetcache.functions import naming, read

DEFAULT_POOL = "default"  # FleetCluster spec.nodeCache; what a grant without spec.nodePools grants


def node_pool(cache: Mapping) -> str:
    """The node pool a ModelCache fills: its spec.storage.nodePool (default `default`) when
    its tier is Node or it keeps engine images (spec.images) on the pool's nodes, else ""
    (a Volume-tier cache without images fills no node)."""
    if read.get_path(cache, "spec.storage.tier") != "Node" and not read.get_path(cache, "spec.images"):
        return ""
    pool = read.get_path(cache, "spec.storage.nodePool")
    return pool if isinstance(pool, str) and pool else DEFAULT_POOL


def granted_pools(grant_spec: Mapping) -> frozenset[str]:
    """The pools a grant's spec.nodePools names; absent, default only (every grant allowed the
    one pool a cluster had before pools had names, so no grant loses it on upgrade)."""
    pools = grant_spec.get("nodePools")
    if pools is None:
        return frozenset({DEFAULT_POOL})
    return frozenset(p for p in pools if isinstance(p, str)) if isinstance(pools, list) \
        else frozenset()


def admission_digest(cache: Mapping) -> str:
    """What an admission is given for: the source, the placement, pinning, the node pool and
    the resolved content. The grant records it in a row; the cache fans out only when its row
    records the digest of its spec and content now. The pool joins the subject only when it is
    not default, so the digests of caches written before pools had names do not change."""
    resolved = read.get_path(cache, "status.resolved.manifestDigest")
    subject = [read.get_path(cache, "spec.source"), read.get_path(cache, "spec.placement"),
               read.get_path(cache, "spec.retention.pinned") is True,
               resolved if isinstance(resolved, str) else ""]
    pool = node_pool(cache)
    if pool not in ("", DEFAULT_POOL):
        subject.append({"nodePool": pool})
    return naming.short_digest(json.dumps(naming.canonical(subject), sort_keys=True,
                                          separators=(",", ":")), length=16)


@dataclass(frozen=True)
class Footprint:
    """What an admitted cache may hold: one content on a number of clusters."""

    content: str  # the manifest digest
    bytes: int
    clusters: int

    def as_status(self) -> dict:
        return {"manifestDigest": self.content, "bytes": self.bytes, "clusters": self.clusters}

    @classmethod
    def of(cls, value: Any) -> Footprint | None:
        """A published admittedFootprint; malformed or without content reads as none."""
        content = value.get("manifestDigest") if isinstance(value, Mapping) else None
        if not isinstance(content, str) or not content:
            return None
        return cls(messages.clipped(content, 128), max(0, read.as_int(value.get("bytes"))),
                   max(0, read.as_int(value.get("clusters"))))


@dataclass(frozen=True)
class CacheRow:
    """A grant's decision on one ModelCache (status.caches[]), as written and as read back:
    a row read from a status is input, so each field that is malformed reads as absent."""

    name: str
    commit: str
    manifest_digest: str
    bytes: int
    clusters: int
    admitted: bool
    reason: str
    message: str
    admitted_digest: str = ""  # the admission_digest of the spec and content admitted
    footprint: Footprint | None = None

    def as_status(self) -> dict:
        row = {"name": self.name, "commit": self.commit, "manifestDigest": self.manifest_digest,
               "bytes": self.bytes, "clusters": self.clusters, "admitted": self.admitted,
               "reason": self.reason, "message": self.message}
        if self.admitted_digest:
            row["admittedDigest"] = self.admitted_digest
        if self.footprint is not None:
            row["admittedFootprint"] = self.footprint.as_status()
        return row

    @classmethod
    def of(cls, value: Any) -> CacheRow | None:
        if not isinstance(value, Mapping) or not read.name_or_empty(value.get("name")):
            return None

        def text(key: str) -> str:
            found = value.get(key)
            return found if isinstance(found, str) else ""

        return cls(name=value["name"], commit=text("commit"), manifest_digest=text("manifestDigest"),
                   bytes=max(0, read.as_int(value.get("bytes"))),
                   clusters=max(0, read.as_int(value.get("clusters"))),
                   admitted=value.get("admitted") is True, reason=text("reason"),
                   message=messages.clipped(value.get("message") or "", messages.MESSAGE_LIMIT),
                   admitted_digest=text("admittedDigest"),
                   footprint=Footprint.of(value.get("admittedFootprint")))


def cache_rows(caches: Any) -> dict[str, CacheRow]:
    """A grant's status.caches by cache name (the first row of a name counts)."""
    rows: dict[str, CacheRow] = {}
    for value in caches if isinstance(caches, list) else []:
        row = CacheRow.of(value)
        if row is not None:
            rows.setdefault(row.name, row)
    return rows
