"""How long a ModelCache's copies are kept: the pure retention decision.

compose-model-cache asks what a cluster that left the placement keeps: its copy stays
while a replica there mounts it or it is pinned, then until the later of when it left and
its last use, plus spec.retention.afterRemoval. The answer reads the hydration's own status
(mountedBy, pinned, lastUsedTime, written by compose-model-cache-hydration); anything
missing or unreadable there reads as "keep" (DESIGN.md §7), never as "remove". (Deleting
the ModelCache itself is held by the Usage each Cache replica composes: design/deployments.md.)
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from fleetcache import reasons
from fleetcache.functions import read, times

# Why a cluster that left the placement still keeps its copy (status.retained[].reason).
MOUNTED, PINNED, AFTER_REMOVAL, STATUS_UNKNOWN = reasons.Mounted, reasons.Pinned, reasons.AfterRemoval, \
    reasons.StatusUnknown


@dataclass(frozen=True)
class Retention:
    """spec.retention, read through the model (defaults and patterns already applied)."""

    pinned: bool
    ttl_after_last_use: str | None
    after_removal: datetime.timedelta

    @classmethod
    def of(cls, spec: dict) -> Retention:
        retention = spec.get("retention") or {}
        after = retention.get("afterRemoval", "1h")
        return cls(pinned=retention.get("pinned") is True,
                   ttl_after_last_use=retention.get("ttlAfterLastUse"),
                   after_removal=times.duration(after))

    def for_hydration(self) -> dict:
        """The hydration's spec.retention: what its composer needs to pin and lapse a copy."""
        return {"pinned": self.pinned,
                **({"ttlAfterLastUse": self.ttl_after_last_use}
                   if self.ttl_after_last_use else {})}


def mounted_by(hydration: dict | None) -> int | None:
    """How many replicas mount this copy (status.mountedBy); None when it does not say."""
    value = read.get_path(hydration, "status.mountedBy")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    count = read.as_int(value, -1)
    return count if count >= 0 else None


def is_pinned(hydration: dict | None) -> bool:
    """The effective pin the hydration reports (status.pinned); while it reports none, the
    pin it was given (spec.retention.pinned), so an unreported pin still keeps the copy."""
    reported = read.get_path(hydration, "status.pinned")
    if isinstance(reported, bool):
        return reported
    return read.get_path(hydration, "spec.retention.pinned") is True


# --- a cluster that left the placement ----------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """A copy on a cluster outside the placement that is still composed, and why."""

    cluster: str
    since: datetime.datetime
    until: datetime.datetime
    reason: str

    def removal(self) -> dict:
        """The hydration's spec.removal."""
        return {"since": times.format_time(self.since), "until": times.format_time(self.until)}

    def as_status(self) -> dict:
        return {"cluster": self.cluster, **self.removal(), "reason": self.reason}


def latched_since(cluster: str, hydration: dict | None, retained_rows: Any,
                  now: datetime.datetime) -> datetime.datetime:
    """When the cluster was first seen outside the placement: the earliest of the
    ModelCache's status.retained row and the hydration's own spec.removal.since (the latch
    for clusters beyond the rows the status lists), else now. Never later than now, so
    neither a refresh nor a time in the future can postpone the removal."""
    found = [times.parse_time(read.get_path(hydration, "spec.removal.since"))]
    for row in retained_rows if isinstance(retained_rows, list) else ():
        if isinstance(row, dict) and row.get("cluster") == cluster:
            found.append(times.parse_time(row.get("since")))
    return min([t for t in found if t is not None] + [now])


def decide(cluster: str, hydration: dict, since: datetime.datetime, now: datetime.datetime,
           retention: Retention) -> Kept | None:
    """Keep the copy of a cluster that left the placement, or None: remove it now.

    Kept while a replica there mounts it, while it is pinned, then until the later of
    `since` and its last use plus afterRemoval. A status that does not say whether a
    replica mounts it, or when it was last used, keeps it.
    """
    last_used_value = read.get_path(hydration, "status.lastUsedTime")
    last_used = times.parse_time(last_used_value)
    until = max(since, last_used or since) + retention.after_removal
    mounted = mounted_by(hydration)
    if mounted is None:
        return Kept(cluster, since, until, STATUS_UNKNOWN)
    if mounted > 0:
        return Kept(cluster, since, until, MOUNTED)
    if is_pinned(hydration):
        return Kept(cluster, since, until, PINNED)
    if last_used_value is not None and last_used is None:
        return Kept(cluster, since, until, STATUS_UNKNOWN)
    if now < until:
        return Kept(cluster, since, until, AFTER_REMOVAL)
    return None


def mounted_replicas(hydrations: list[dict]) -> int:
    """Replicas that mount a copy, over the given hydrations (those that say)."""
    return sum(mounted_by(h) or 0 for h in hydrations)
