"""The ModelReplicas that mount a ModelCache, as its rollout in waves reads them: per
cluster, since when all of them are Ready on the new commit, and since when the first of
them on it is not. compose-model-deployment labels each replica with the cache it mounts and
writes the commit it mounts in spec.cache.commit (views/model_replica.py CacheMount);
compose-model-cache-hydration requires them by the same label."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleetcache import reasons
from fleetcache.functions import naming, protocol, read, times

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


def by_cluster(replicas: Iterable[Any], cache: str, commit: str, now: float) -> dict[str, Replicas]:
    """A replica serves this cache when its spec.cache names it (Cache and Node deliveries:
    Wait, Fail and Source mount nothing). A cluster's replicas are Ready on `commit` since the
    latest Ready transition once every one of them mounts it and is Ready; the earliest of
    those on it that is not Ready counts from its Ready condition's last transition, else
    its creation. Crossplane stamps every condition it writes (composite/composition_functions.go),
    so a time it lacks reads as now: a bake waits its full time, and no deadline has passed."""
    found: dict[str, list[tuple[bool, bool, float, str]]] = {}
    for replica in replicas:
        spec = read.mapping_at(replica, "spec")
        cluster = spec.get("clusterName")
        if read.get_path(spec, "cache.modelCacheName") != cache or not isinstance(cluster, str):
            continue
        ready = read.condition_of(replica, "Ready")
        changed = times.seconds_of(ready.get("lastTransitionTime"))
        if changed is None and ready.get("status") != "True":
            changed = times.seconds_of(read.get_path(replica, "metadata.creationTimestamp"))
        found.setdefault(cluster, []).append((
            read.get_path(spec, "cache.commit") == commit, ready.get("status") == "True",
            now if changed is None else changed, reasons.reason_or_empty(read.get_path(replica, "status.reason"))))
    out = {}
    for cluster, rows in sorted(found.items()):
        on_commit = [row for row in rows if row[0]]
        late = sorted((since, reason) for on, ready, since, reason in on_commit if not ready)
        every_ready = len(on_commit) == len(rows) and not late
        out[cluster] = Replicas(ready_since=max(row[2] for row in rows) if every_ready else None,
                                not_ready_since=late[0][0] if late else None,
                                reason=late[0][1] if late else "")
    return out
