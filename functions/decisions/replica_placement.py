"""Which cluster each replica of a ModelDeployment runs on (compose-model-deployment, step 2),
among the candidates (the Ready FleetClusters matching spec.placement, in name order): a
replica keeps its cluster while that cluster is a candidate (and under
maxReplicasPerCluster); new replicas go to the best-ranked candidate, ranked by where the
cache stands there (a node holding the commit, the cache Ready, a cache serving the previous
commit, a cache target not yet Ready, then the rest), ties by fewest replicas of this
deployment, then by name."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from fleetcache.functions.views.model_replica import Previous
from fleetcache.functions.views.served_model import Model

MAX_REPLICAS = 1000


def cache_tier(model: Model, cluster: str) -> int:
    """0: a node there holds the commit; 1: the cache is Ready there; 2: it still serves a
    previous commit; 3: a cache target not yet Ready; 4: the rest, failed targets included."""
    row = model.targets.get(cluster)
    if row is None:
        return 4
    if row.phase == "Ready" and model.commit:
        tier = model.node_tiers.get(cluster)
        return 0 if tier is not None and tier.serves(model.commit) else 1
    if row.serving_commit:
        return 2
    return 4 if row.phase == "Failed" else 3


def place(replicas: int, max_per_cluster: int | None, candidates: list[str], model: Model,
          previous: Mapping[int, Previous]) -> dict[int, str | None]:
    """Replica index -> cluster (None: nowhere to go). Replicas keep a cluster that is
    still a candidate, lowest index first; the others take the best-ranked candidate."""
    cap = max_per_cluster or MAX_REPLICAS
    counts = {name: 0 for name in candidates}
    placed: dict[int, str | None] = {}
    for index in range(replicas):
        before = previous.get(index)
        if before and before.cluster in counts and counts[before.cluster] < cap:
            placed[index] = before.cluster
            counts[before.cluster] += 1
    heap = [(cache_tier(model, name), count, name) for name, count in counts.items()
            if count < cap]
    heapq.heapify(heap)
    for index in range(replicas):
        if index in placed:
            continue
        if not heap:
            placed[index] = None
            continue
        tier, count, name = heapq.heappop(heap)
        placed[index] = name
        if count + 1 < cap:
            heapq.heappush(heap, (tier, count + 1, name))
    return placed
