"""A cluster's cache capacity: which copies may start and which are evicted, for both tiers.

One writer (DESIGN §7): compose-fleet-cluster decides, the ModelCacheHydrations obey. The
same rules serve both tiers, through this one `decide`:
- the volume tier: each hydration's volume is a `Copy` (functions/fleet_cluster.py), against
  spec.cache.capacity, published in status.cache;
- the node tier: each tier-Node cache's copy on every pool node is a `Copy`
  (functions/node_capacity.py maps its node-tier phases onto the volume tier's), against
  spec.nodeCache.capacityPerNode, published in status.nodeCache.
`decide` is pure and deterministic: the same copies in any order, with the same latched
lists, give the same answer.

- usage: the sum of the copies' usage (measured volumes; a node copy's bytes once started);
- reserved: what admitted downloads still running may add (requested size minus usage);
- eviction, first: only while usage is above the high watermark, Ready copies that are
  neither pinned nor mounted nor wanted by a placed replica, lapsed first, then least
  recently used, until usage is at or below the low watermark. An evicted copy counts
  nothing from then on and stays evicted until it asks to be warmed again;
- admission, then: copies that have not started (nor lapsed, nor left the placement), oldest
  first, while used + reserved + their size stays under the high watermark (and, when the
  disk's free space was measured, reserved + their size fits in it); the first that does not
  fit waits, and so does every later one (no overtaking, so a large copy is not starved).
  Admission is latched.
What is not known (a usage never measured, a mount count not reported) reads as "keep".
A copy of an existing volume (the user's claim, verified in place) is no copy here at all:
see `allocates`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import messages
from fleetcache.functions import read, times

LISTED = 256  # status.cache admitted / waiting / evicted: the XRD's maxItems
NAMED = 5  # waiting copies named in a CapacityLow / NodeCapacityLow message
STARTED_PHASES = ("Hydrating", "Ready")


@dataclass(frozen=True)
class Copy:
    """One copy on the cluster, as its hydration's spec and status say: a volume (the
    hydration's phase) or a cache's node copies (its node-tier phase, mapped onto these)."""

    key: str  # namespace/name (volume tier) or namespace/cache (node tier)
    created: str  # metadata.creationTimestamp, as written ("" if absent)
    size: int | None  # bytes it needs (spec.storage.size); None if unreadable: never admitted
    used: int | None  # bytes it holds (status.usedBytes); None until known
    phase: str  # Pending | Hydrating | Ready | Failed | Evicted ("" if absent)
    serving: bool  # it holds a commit already (a snapshot was Ready): needs no admission
    pinned: bool | None  # status.pinned; None if not reported
    mounted_by: int | None  # status.mountedBy; None if not reported
    placed: int | None  # status.placedReplicas; None if not reported
    lapsed: bool
    last_used: datetime.datetime | None  # status.lastUsedTime, else status.readyTime
    removal: bool  # spec.removal set: the cluster left the cache's placement

    @property
    def started(self) -> bool:
        return started(self.phase, self.serving)

    @property
    def evictable(self) -> bool:
        """Ready and known to be unpinned, unmounted and wanted by no placed replica."""
        return self.phase == "Ready" and self.pinned is False and self.mounted_by == 0 \
            and self.placed == 0 and self.used is not None

    @property
    def in_flight(self) -> int:
        """Bytes this copy may still add while it downloads."""
        return max(0, (self.size or 0) - (self.used or 0))


def started(phase: str, serving: bool) -> bool:
    """A copy that is fetching or has been Ready needs no admission: it has its volume.
    The same test on both sides (the FleetCluster on the hydration's status, the hydration
    on its own), so they agree on who waits."""
    return phase in STARTED_PHASES or serving


def count(fields: Any, key: str) -> int | None:
    """A non-negative integer of a hydration's spec or status, or None when it is absent or
    not one Kubernetes could store (a string, a bool, NaN, beyond int64): unknown."""
    value = fields.get(key) if isinstance(fields, Mapping) else None
    number = read.as_int(value, -1) if isinstance(value, (int, float)) else -1
    return number if number >= 0 else None


def use_of(hydration: Mapping) -> dict:
    """The `Copy` fields both tiers read alike from a hydration: its creation time, what its
    status says of the copy's use (pinned, mountedBy, placedReplicas, lapsed, lastUsedTime
    else readyTime) and whether the cluster left the placement (spec.removal). A malformed
    value reads as unknown, which keeps the copy."""
    status = read.mapping_at(hydration, "status")
    created = read.get_path(hydration, "metadata.creationTimestamp")
    pinned = status.get("pinned")
    return {"created": created if isinstance(created, str) else "",
            "pinned": pinned if isinstance(pinned, bool) else None,
            "mounted_by": count(status, "mountedBy"),
            "placed": count(status, "placedReplicas"),
            "lapsed": status.get("lapsed") is True,
            "last_used": times.parse_time(status.get("lastUsedTime"))
            or times.parse_time(status.get("readyTime")),
            "removal": isinstance(read.get_path(hydration, "spec.removal"), dict)}


def allocates(source: object) -> bool:
    """Whether a hydration's spec.source takes room on its cluster. An existing volume
    (spec.source.volume) is the user's own claim, verified in place: it counts no bytes,
    asks for no admission and is never evicted, since fleetcache never deletes that claim
    and evicting the copy would free nothing. The same test on both sides: the FleetCluster
    leaves exactly these out of its decision and their hydrations do not wait for it."""
    return not (isinstance(source, Mapping) and isinstance(source.get("volume"), Mapping))


@dataclass(frozen=True)
class Decision:
    capacity: int | None
    high: int  # bytes: capacity x highWatermark %
    low: int  # bytes: capacity x lowWatermark %
    used: int
    reserved: int
    admitted: tuple[str, ...]
    waiting: tuple[str, ...]  # in admission order
    evicted: tuple[str, ...]
    stuck: bool  # above the high watermark after eviction: nothing (more) is removable

    @property
    def used_percent(self) -> int | None:
        return self.used * 100 // self.capacity if self.capacity else None

    @property
    def capacity_low(self) -> bool:
        return bool(self.waiting) or self.stuck

    @property
    def lists(self) -> dict:
        """The decisions as both tiers publish them (status.cache, status.nodeCache):
        sorted and bounded like the XRD's lists."""
        return {"admitted": list(self.admitted), "waiting": sorted(self.waiting)[:LISTED],
                "evicted": list(self.evicted)}

    def shortfall(self, where: str, unremovable: str, waiting: str, detail: str = "") -> str:
        """What CapacityLow and NodeCapacityLow say before their remedy: that usage (`where`,
        against the high watermark, said once) stays above it with nothing more removable,
        and which copies wait for room (`waiting` names one; the first NAMED by name), then
        `detail`."""
        said = []
        if self.stuck:
            said.append(f"{where} and {unremovable}")
        if self.waiting:
            names = messages.named(self.waiting, NAMED, each=None)
            said.append(f"{messages.counted(len(self.waiting), waiting)} waiting for room ({names})"
                        + ("" if self.stuck else f"; {where}")
                        + (f"; {detail}" if detail else ""))
        return "; ".join(said)


def decide(copies: Iterable[Copy], capacity: int | None, high_percent: int, low_percent: int,
           admitted: Iterable[str], evicted: Iterable[str], free: int | None = None
           ) -> Decision:
    """`admitted` and `evicted` are the lists the last decision published (latched); `free`
    is the least free space measured on the disk the copies share (None: not measured), which
    admission never overcommits, whatever the budget says."""
    by_key = {c.key: c for c in copies}
    ordered = sorted(by_key.values(), key=lambda c: c.key)
    evicted_now = still_evicted(ordered, set(evicted))
    admitted_now = {k for k in admitted if k in by_key and k not in evicted_now
                    and by_key[k].phase not in ("Ready", "Failed", "Evicted")}
    used = sum(c.used or 0 for c in ordered if c.key not in evicted_now)
    reserved = sum(c.in_flight for c in ordered if c.key not in evicted_now
                   and (c.key in admitted_now or c.phase == "Hydrating"))
    high = capacity * high_percent // 100 if capacity else 0
    low = capacity * low_percent // 100 if capacity else 0
    stuck = False
    if capacity is not None and used > high:
        for copy in eviction_order(c for c in ordered if c.key not in evicted_now):
            if used <= low or len(evicted_now) >= LISTED:
                break
            evicted_now.add(copy.key)
            used -= copy.used or 0
        stuck = used > high
    candidates = sorted((c for c in ordered if not c.started and not c.removal
                         and not c.lapsed and c.phase not in ("Failed", "Evicted")
                         and c.key not in admitted_now and c.key not in evicted_now),
                        key=lambda c: (c.created, c.key))
    waiting: list[str] = []
    for copy in candidates:
        if capacity is None:  # no budget: every copy starts (hydrations do not ask)
            reserved += copy.in_flight
            if len(admitted_now) < LISTED:
                admitted_now.add(copy.key)
            continue
        fits = copy.size is not None and used + reserved + copy.size <= high \
            and (free is None or reserved + copy.size <= free)
        if waiting or not fits or len(admitted_now) >= LISTED:
            waiting.append(copy.key)
            continue
        admitted_now.add(copy.key)
        reserved += copy.in_flight
    return Decision(capacity=capacity, high=high, low=low, used=used, reserved=reserved,
                    admitted=tuple(sorted(admitted_now)), waiting=tuple(waiting),
                    evicted=tuple(sorted(evicted_now)), stuck=stuck)


def still_evicted(copies: list[Copy], latched: set[str]) -> set[str]:
    """A copy that says it is Evicted stays so; one listed but not yet obeyed (still Ready)
    stays listed while it is still evictable. Any other state (warming again, mounted, gone)
    takes it off the list."""
    return {c.key for c in copies
            if c.phase == "Evicted" or (c.key in latched and c.evictable)}


def eviction_order(copies: Iterable[Copy]) -> list[Copy]:
    """Lapsed copies first, then least recently used; a copy with no use or ready time
    known goes last, and the name breaks ties."""
    never = datetime.datetime.max.replace(tzinfo=datetime.UTC)
    return sorted((c for c in copies if c.evictable),
                  key=lambda c: (not c.lapsed, c.last_used or never, c.key))
