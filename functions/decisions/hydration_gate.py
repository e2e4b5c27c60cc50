"""Whether a ModelCacheHydration's copy may fetch, as its composer obeys the FleetCluster.

The FleetCluster must exist and be Ready (`look_up_cluster`); a latched Ready survives one
that is not. Capacity is the FleetCluster's decision (functions/decisions/capacity.py,
published in its status.cache); the hydration obeys it between deciding its phase and
composing (`gate_of`): a copy that has not started and is not admitted waits
(Pending/CapacityLow) composing nothing new; a copy listed as evicted composes nothing, so
Crossplane deletes its volume (phase Evicted), until a replica is placed on the cluster
again. A hydration whose cluster left the placement (spec.removal), or whose copy lapsed
(`use_of`: no replica placed for spec.retention.ttlAfterLastUse), never starts a new fetch.
Pure: time only through request.now.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Protocol

from fleetcache import reasons
from fleetcache.functions import protocol, quantities, read, times
from fleetcache.functions.decisions import capacity
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.hydration import MOUNTING, Phase, Use


class Copy(Protocol):
    """The hydration's spec as the gate reads it (compose-model-cache-hydration's HydrationSpec)."""

    @property
    def cluster(self) -> str: ...

    @property
    def cache(self) -> str: ...

    @property
    def source(self) -> dict: ...

    @property
    def size(self) -> str: ...

    @property
    def pinned(self) -> bool: ...

    @property
    def ttl(self) -> datetime.timedelta | None: ...

    @property
    def removal(self) -> dict | None: ...


@dataclass(frozen=True)
class ClusterLookup:
    """The FleetCluster, or why it cannot be used yet (reason is "" when it can)."""

    view: FleetClusterView | None
    reason: str = ""
    message: str = ""


def look_up_cluster(fetched: list | None, name: str) -> ClusterLookup:
    """fetched: what Crossplane fetched for the FleetCluster's requirement (None: not yet)."""
    if fetched is None:
        return ClusterLookup(None, reasons.ClusterNotReady,
                             f"waiting for Crossplane to fetch FleetCluster {name}")
    if not fetched:
        return ClusterLookup(None, reasons.ClusterNotFound, f"FleetCluster {name} does not exist")
    view = FleetClusterView.of(fetched[0])
    if not view.ready:
        return ClusterLookup(view, reasons.ClusterNotReady, f"FleetCluster {name} is not Ready")
    return ClusterLookup(view)


def use_of(request: protocol.Request, spec: Copy, replicas: list | None, ready_time: str | None) -> Use:
    """lastUsedTime is the current hour while a replica mounts the copy, else latched. The
    copy lapses once ttlAfterLastUse has passed since the later of its last use and its
    readyTime with no replica placed here; that is latched until one is placed again.
    replicas: the ModelReplicas of this cache on this cluster (None while not fetched)."""
    placed = mounted = None
    if replicas is not None:  # required by the cache and cluster labels
        here = [read.mapping_at(r, "spec") for r in replicas]
        here = [r for r in here if r.get("clusterName") == spec.cluster]
        placed = len(here)
        mounted = sum(1 for r in here if r.get("delivery") in MOUNTING
                      and read.get_path(r, "cache.modelCacheName") == spec.cache)
    latched_use = times.parse_time(request.status.get("lastUsedTime"))
    last_used = times.hour_of(request.now) if mounted else \
        times.hour_of(latched_use) if latched_use else None
    if placed:
        lapsed = False
    elif request.status.get("lapsed") is True:
        lapsed = True
    else:
        since = max((t for t in (times.parse_time(last_used), times.parse_time(ready_time))
                     if t is not None), default=None)
        lapsed = placed == 0 and spec.ttl is not None and since is not None \
            and request.now >= since + spec.ttl
    return Use(mounted_by=mounted, placed=placed, last_used=last_used, lapsed=lapsed,
               pinned=spec.pinned and not lapsed)


def ready_time_of(request: protocol.Request, phase: Phase) -> str | None:
    """The hour this copy first became Ready, latched; an evicted copy starts afresh."""
    if phase.phase == "Evicted":
        return None
    latched = times.parse_time(request.status.get("readyTime"))
    if latched:
        return times.hour_of(latched)
    return times.hour_of(request.now) if phase.ready else None


@dataclass(frozen=True)
class Gate:
    """What the FleetCluster's decision, spec.removal or a lapse makes of the phase."""

    phase: Phase | None = None  # None: the phase stands
    hold: bool = False  # compose nothing new, keep what exists
    evicted: bool = False  # compose nothing: Crossplane deletes the volume


def gate_of(request: protocol.Request, spec: Copy, cluster: ClusterLookup, job_exists: bool,
            phase: Phase, use: Use, serving: bool) -> Gate:
    """serving: the volume serves a commit that was Ready."""
    evicted_message = (f"cluster {spec.cluster} evicted this copy to get under its low "
                       "watermark: it was not pinned and no replica mounted it; its volume is "
                       "deleted, and it is warmed again once a replica of "
                       f"{spec.cache} is placed on {spec.cluster}")
    if request.status.get("phase") == "Evicted" and not use.placed:  # whatever the cluster
        return Gate(Phase("Evicted", reasons.Evicted, reasons.with_remedy(evicted_message, reasons.Evicted)),
                    evicted=True)
    view = cluster.view
    if view is None or cluster.reason:
        return Gate()
    key = f"{request.namespace}/{request.name}"
    cache = view.cache
    where = f"on cluster {spec.cluster}"
    if cache is not None and key in cache.evicted and phase.ready and use.placed == 0 \
            and use.mounted_by == 0 and not use.pinned and capacity.allocates(spec.source):
        return Gate(Phase("Evicted", reasons.Evicted, reasons.with_remedy(evicted_message, reasons.Evicted)),
                    evicted=True)
    if phase.ready or job_exists:
        return Gate()
    if spec.removal:
        return Gate(Phase("Pending", reasons.LeftPlacement, reasons.with_remedy(
            f"cluster {spec.cluster} left the placement of {spec.cache} (since "
            f"{spec.removal['since']}): no new fetch starts {where}; the copy keeps serving "
            f"what it holds until {spec.removal['until']}", reasons.LeftPlacement)), hold=True)
    if use.lapsed:  # latched: the ttl may be unset since
        period = f" for {spec.ttl // datetime.timedelta(hours=1)}h" if spec.ttl is not None else ""
        return Gate(Phase("Pending", reasons.Lapsed, (
            f"no replica used this copy {where}{period} "
            "(spec.retention.ttlAfterLastUse), so it lapsed and fetches nothing new: place a "
            f"replica of {spec.cache} on {spec.cluster} to warm it again")), hold=True)
    started = capacity.started(reasons.reason_or_empty(request.status.get("phase")), serving)
    if view.capacity is None or started or phase.phase == "Failed" \
            or not capacity.allocates(spec.source) \
            or (cache is not None and key in cache.admitted and key not in cache.evicted):
        return Gate()
    return Gate(Phase("Pending", reasons.CapacityLow, reasons.with_remedy(
        waiting_message(spec, view), reasons.CapacityLow)), hold=True)


def waiting_message(spec: Copy, view: FleetClusterView) -> str:
    needs = f"this copy needs {spec.size} (spec.storage.size) on cluster {spec.cluster}"
    cache = view.cache
    if cache is None or cache.capacity != view.capacity:
        return f"{needs}; waiting for FleetCluster {spec.cluster} to admit it (it has not " \
               "decided for its spec.cache.capacity yet)"
    high = (view.capacity or 0) * view.high_watermark // 100
    free = max(0, high - cache.used - cache.reserved)
    return (f"{needs} and would pass its high watermark: {quantities.human_bytes(free)} is free "
            f"under {view.high_watermark}% of {quantities.human_bytes(view.capacity or 0)} "
            f"({quantities.human_bytes(cache.used)} used, {quantities.human_bytes(cache.reserved)} reserved "
            "by downloads admitted or running); it starts once there is room, in creation "
            "order")
