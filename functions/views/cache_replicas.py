"""The ModelReplicas that mount a ModelCache, as its rollout in waves reads them: per
cluster, since when all of them serve the new commit and are Ready, and since when the
first of them on it does not. compose-model-deployment labels each replica with the cache it
mounts and writes the commit it mounts in spec.cache.commit (views/model_replica.py
CacheMount); compose-model-cache-hydration requires them by the same label.

A replica's Ready does not prove the commit: its engine's Deployment rolls with
maxUnavailable 0, so a replica moved to a new commit stays Ready on its old pod. The commit
its pods serve is its status.servingCommit, and its `Serving` condition's lastTransitionTime
says since when (compose-model-replica moves both when the Deployment has rolled out)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleetcache import reasons
from fleetcache.functions import naming, protocol, read, times
from fleetcache.functions.views.model_replica import SERVING, served_commit

REPLICAS_KEY = "model-replicas"


def requirement(namespace: str, cache: str) -> protocol.Requirement:
    """Every ModelReplica of this cache in its namespace, by the label its deployment writes."""
    return protocol.Requirement(naming.API_VERSION, "ModelReplica", namespace=namespace,
                                match_labels=((naming.LABEL_MODEL_CACHE, naming.label_value(cache)),))


@dataclass(frozen=True)
class Replicas:
    """The replicas that serve this cache on one cluster, as the caller read them. A cluster
    with none is absent from the mapping: its cache alone gates it."""

    ready_since: float | None  # all of them Ready on the new commit since then; None: not (yet)
    not_ready_since: float | None  # the earliest one on the new commit not Ready since then
    reason: str = ""  # why that one is not Ready


@dataclass(frozen=True)
class OnCommit:
    """One replica as the gate reads it: whether it is on the commit (spec.cache.commit),
    serves it and is Ready, since when it is so or is not, and why not."""

    on: bool
    ready: bool
    since: float
    reason: str

    @classmethod
    def of(cls, replica: Any, commit: str, now: float) -> OnCommit:
        """Ready on `commit` when its Serving condition is True for it (status.servingCommit
        and status.model.revision name it) and its Ready condition is True, since the later of
        their last transitions. Not so, since: its Ready condition's transition (else its
        creation) when it serves the commit but its engine is not available; its Serving
        condition's when it rolls to the commit (or a fatal error made it Unknown). A
        replica not yet composed on the commit (status.model.revision still another) has no
        time of its own: it reads as now. Crossplane stamps every condition it writes
        (composite/composition_functions.go), so a time it lacks reads as now: a bake waits
        its full time, and no deadline has passed."""
        ready, serving = read.condition_of(replica, "Ready"), read.condition_of(replica, SERVING)
        composed = read.get_path(replica, "status.model.revision") == commit
        serves = composed and serving.get("status") == "True" \
            and served_commit(read.mapping_at(replica, "status")) == commit
        up = ready.get("status") == "True"
        ready_at = times.seconds_of(ready.get("lastTransitionTime"))
        serving_at = times.seconds_of(serving.get("lastTransitionTime"))
        if serves and up:
            since = None if ready_at is None or serving_at is None else max(ready_at, serving_at)
        elif serves:
            since = ready_at if ready_at is not None else \
                times.seconds_of(read.get_path(replica, "metadata.creationTimestamp"))
        else:
            since = serving_at if composed else None
        return cls(read.get_path(replica, "spec.cache.commit") == commit, serves and up,
                   now if since is None else since,
                   reasons.reason_or_empty(read.get_path(replica, "status.reason")))


def by_cluster(replicas: Iterable[Any], cache: str, commit: str, now: float) -> dict[str, Replicas]:
    """A replica serves this cache when its spec.cache names it (Cache and Node deliveries:
    Wait, Fail and Source mount nothing). A cluster's replicas are Ready on `commit` since the
    latest of their times once every one of them is on it, serves it and is Ready; the
    earliest of those on it that is not counts from its own time (OnCommit.of)."""
    found: dict[str, list[OnCommit]] = {}
    for replica in replicas:
        spec = read.mapping_at(replica, "spec")
        cluster = spec.get("clusterName")
        if read.get_path(spec, "cache.modelCacheName") != cache or not isinstance(cluster, str):
            continue
        found.setdefault(cluster, []).append(OnCommit.of(replica, commit, now))
    out = {}
    for cluster, rows in sorted(found.items()):
        on_commit = [row for row in rows if row.on]
        late = sorted((row.since, row.reason) for row in on_commit if not row.ready)
        every_ready = len(on_commit) == len(rows) and not late
        out[cluster] = Replicas(ready_since=max(row.since for row in rows) if every_ready else None,
                                not_ready_since=late[0][0] if late else None,
                                reason=late[0][1] if late else "")
    return out
