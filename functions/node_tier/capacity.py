"""The per-node capacity of a cluster's node tier: which tier-Node caches the pool nodes may
warm, which node copies are evicted, and which cache directories the nodes keep.

One writer (DESIGN §7): compose-fleet-cluster decides from the ModelCacheHydrations of its
cluster and publishes status.nodeCache; compose-model-cache-hydration (node_tier/warmers.py)
obeys it. The rules are the volume tier's, through the same `capacity.decide`: every pool node
holds the same caches, so one node's disk stands for all, and each tier-Node cache is one
`capacity.Copy` whose node-tier phase is mapped onto the volume tier's phases.

- demand of a cache: its hydration's spec.bytes; while the cluster holds two commits of it
  (a model update: the volume serves or stores another commit) the volume tier's figure for
  two commits, spec.storage.size, but never more than twice the commit;
- usage: the demand of the caches whose nodes started warming; reserved: the demand of
  those admitted that did not start yet; `free`: the least free space any node reported;
- protections: pinned, mounted or wanted by a placed replica (the hydration's pinned,
  mountedBy, placedReplicas: Node replicas count as mounting), exactly as for volumes;
- an evicted cache stays evicted until a replica of it is placed on the cluster (or it is
  pinned); then it asks for admission like a new one.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleetcache import reasons
from fleetcache.apis import specs
from fleetcache.functions import quantities, read, times
from fleetcache.functions.decisions import capacity
from fleetcache.functions.node_tier.warmer_inputs import DEFAULT_POOL

NODE_TIER = "Node"
# The hydration's status.nodeTier.phase, as the decision reads it.
PHASES = {"Pending": "Pending", "Warming": "Hydrating", "Degraded": "Hydrating",
          "Ready": "Ready", "Failed": "Failed", "Evicted": "Evicted"}
STARTED = ("Warming", "Ready", "Degraded", "Failed")
COUNTS = ("readyNodes", "downloadingNodes", "failedNodes")
AFTER_REMOVAL = "1h"  # keep.json's afterRemoval of a cache still placed (spec.retention's default)


@dataclass(frozen=True)
class Settings:
    """spec.nodeCache as the decision needs it."""

    capacity: int  # capacityPerNode in bytes
    high: int  # percent
    low: int  # percent
    pool: str = DEFAULT_POOL


def cache_key(hydration: dict) -> str:
    """namespace/cache: how status.nodeCache, keep.json and the node agent name a cache."""
    return f"{read.get_path(hydration, 'metadata.namespace')}/" \
           f"{read.get_path(hydration, 'spec.modelCacheName')}"


def pool_of(hydration: dict) -> str:
    """The pool a hydration warms (spec.nodePool; the XRD defaults it to default)."""
    pool = read.get_path(hydration, "spec.nodePool")
    return pool if isinstance(pool, str) and pool else DEFAULT_POOL


def node_hydrations(cluster: str, hydrations: Iterable[dict], pool: str = DEFAULT_POOL
                    ) -> list[dict]:
    """The tier-Node hydrations of this pool that really target this cluster, with a
    readable namespace and cache name (a long cluster name's label is a hashed form, so the
    name is checked). A pool decides over its own caches only: its nodes' disk is its own."""
    return [h for h in hydrations
            if read.get_path(h, "spec.clusterName") == cluster
            and read.get_path(h, "spec.tier") == NODE_TIER
            and pool_of(h) == pool
            and read.name_or_empty(read.get_path(h, "metadata.namespace"))
            and read.name_or_empty(read.get_path(h, "spec.modelCacheName"))]


def demand(hydration: dict) -> int | None:
    """Bytes every pool node holds for this cache; None when spec.bytes is unreadable."""
    spec = read.mapping_at(hydration, "spec")
    status = read.mapping_at(hydration, "status")
    one = capacity.count(spec, "bytes")
    if one is None:
        return None
    commit = spec.get("commit")
    stored = status.get("storedCommits")
    others = {c for c in (stored if isinstance(stored, list) else []) if isinstance(c, str)} \
        | ({status["servingCommit"]} if isinstance(status.get("servingCommit"), str)
           and status["servingCommit"] else set())
    if not others - {commit}:
        return one
    try:
        sized = quantities.quantity_bytes(read.get_path(spec, "storage.size"), "spec.storage.size")
    except specs.InputError:
        sized = 2 * one
    return max(one, min(sized, 2 * one))


def copy_of(hydration: dict) -> capacity.Copy:
    """A cache's node copies as the decision sees them. Malformed fields read as unknown,
    which keeps the copy (and an unreadable demand never admits it)."""
    node = read.mapping_at(hydration, "status.nodeTier")
    phase = reasons.reason_or_empty(node.get("phase"))
    use = capacity.use_of(hydration)
    wanted = use["pinned"] is True or bool(use["mounted_by"]) or bool(use["placed"])
    started = phase in STARTED or any(capacity.count(node, key) for key in COUNTS)
    if phase == "Evicted" and wanted:
        phase, started = "Pending", False  # asked for again: admitted like a new copy
    size = demand(hydration)
    return capacity.Copy(
        key=cache_key(hydration),
        size=size,
        used=size if started and phase != "Evicted" else None,
        phase=PHASES.get(phase, "Pending"),
        serving=started,
        **use,
    )


def least_free(hydrations: Iterable[dict]) -> int | None:
    """The least free space any pool node reported on the cache filesystem (every cache's
    warmers report the same filesystem); None until one did."""
    free = [capacity.count(read.mapping_at(h, "status.nodeTier"), "minFreeBytes")
            for h in hydrations]
    return min((f for f in free if f is not None), default=None)


def decide(settings: Settings, hydrations: list[dict], latched: Any) -> capacity.Decision:
    """`latched`: the status.nodeCache the last decision published."""
    def listed(name: str) -> list[str]:
        values = read.get_path(latched, name)
        return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []

    return capacity.decide([copy_of(h) for h in hydrations], settings.capacity, settings.high,
                           settings.low, listed("admitted"), listed("evicted"),
                           free=least_free(hydrations))


# --- the keep-list the node agent reads (ConfigMap fleetcache-node-dirs, keep.json) ----------


def go_duration(delta: datetime.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    return f"{seconds // 3600}h{seconds % 3600 // 60}m{seconds % 60}s"


def keep_list(hydrations: list[dict], decision: capacity.Decision,
              now: datetime.datetime) -> dict[str, dict]:
    """{"<ns>/<cache>": {since, afterRemoval}} for every tier-Node cache of the cluster that
    is not evicted and not removed past its time. A cache whose cluster left its placement
    keeps its directory until spec.removal.until (since + afterRemoval, the agent's rule);
    one still pinned, mounted or placed there (or not known to be unwanted) stays as placed."""
    keep: dict[str, dict] = {}
    for hydration in hydrations:
        key = cache_key(hydration)
        if key in decision.evicted:
            continue
        removal = read.get_path(hydration, "spec.removal")
        since = times.parse_time(read.get_path(removal, "since"))
        until = times.parse_time(read.get_path(removal, "until"))
        use = capacity.use_of(hydration)
        unwanted = use["pinned"] is False and use["mounted_by"] == 0 and use["placed"] == 0
        if since is None or not unwanted:
            keep[key] = {"since": None, "afterRemoval": AFTER_REMOVAL}
        elif until is None:
            keep[key] = {"since": times.format_time(since), "afterRemoval": AFTER_REMOVAL}
        elif now < until:
            keep[key] = {"since": times.format_time(since), "afterRemoval": go_duration(until - since)}
    return dict(sorted(keep.items()))


def keep_json(keep: dict[str, dict]) -> str:
    return json.dumps(keep, sort_keys=True, separators=(",", ":"))


# --- report -------------------------------------------------------------------------------


def status_of(decision: capacity.Decision) -> dict:
    capacity_bytes = decision.capacity or 0
    percent = decision.used_percent or 0
    return {"capacityPerNodeBytes": capacity_bytes, "demandBytes": decision.used,
            "usedPercent": percent,
            "summary": f"{quantities.human_bytes(decision.used)}/{quantities.human_bytes(capacity_bytes)} "
                       f"({percent}%)",
            **decision.lists}


def pool_condition(cluster: str, settings: Settings, decision: capacity.Decision,
                   free: int | None) -> tuple[bool, str, str]:
    """NodeCapacityLow of one pool: (status, reason, message); the default pool's words are
    those the cluster's one pool had before pools had names."""
    used = f"{quantities.human_bytes(decision.used)} of {quantities.human_bytes(settings.capacity)} per node"
    pool = "" if settings.pool == DEFAULT_POOL else f" in pool {settings.pool}"
    if not decision.capacity_low:
        return False, reasons.NodeCapacityAvailable, \
            f"the node caches on cluster {cluster}{pool} need {used}"
    where = f"the node caches on cluster {cluster}{pool} need {used} (high watermark " \
            f"{settings.high}%: {quantities.human_bytes(decision.high)})"
    said = decision.shortfall(
        where, "no node copy is removable: every remaining one is pinned, used by a replica or "
        "not Ready on its nodes", "node cache", "" if free is None else
        f"the fullest pool node has {quantities.human_bytes(free)} free (if the disks hold less than "
        "capacityPerNode, set it to what they hold, so unused node copies are evicted)")
    return True, reasons.NodeCapacityLow, reasons.with_remedy(said, reasons.NodeCapacityLow)
