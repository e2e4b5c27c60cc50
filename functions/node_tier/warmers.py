"""The node tier of one ModelCacheHydration (spec.tier Node): the cluster's verified volume
copied onto the local disk of every opted-in pool node, by a restricted DaemonSet on the
cluster (design/node-tier.md §3).

compose-model-cache-hydration calls `run` once per call, after it composed the volume tier.
Lifecycle, top to bottom:
1. read the FleetCluster's pool this hydration names (spec.nodeCache for default, else its
   spec.nodePools[] entry: the selector, the opt-in label, the path) and that pool's row of
   the per-node capacity decision compose-fleet-cluster publishes (status.nodeCache,
   status.nodePools[]) (node_tier/warmer_inputs.py);
2. observe the warmer DaemonSet's numbers and the per-node records its pods write
   (node_tier/warmer_records.py);
3. decide: a reason the tier cannot run here (not configured, a mode it does not support,
   evicted, waiting for room, the volume not Ready on this commit), else the phase the
   counts give (node_tier/warmer_verdict.py);
4. compose on the cluster: the pool's hostPath PV pre-bound to the node PVC, the status
   ConfigMap the warmers write (Observe/Create/Delete), the warmers' RBAC, their RoleBinding
   to the slot Role in fleetcache-system, and the warmer DaemonSet
   (node_tier/warmer_manifests.py, named by node_tier/warmer_names.py);
5. report status.nodeTier (`run` does 3 to 5).

A function cannot list a remote cluster's nodes: the DaemonSet controller does the fan-out
(a node that joins the pool gets a warmer, one that leaves or disappears loses it), and the
counts come back through two fixed-name objects. Nothing here trusts a record: a garbage
record is skipped, every count is clamped to the DaemonSet's own numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fleetcache import reasons, shapes
from fleetcache.functions import protocol, read
from fleetcache.functions.k8s import objects
from fleetcache.functions.node_tier.warmer_inputs import (
    Decision,
    Hydration,
    NodeCache,
    VolumeTier,
    kept_on_nodes,
)
from fleetcache.functions.node_tier.warmer_manifests import (
    access_manifests,
    claim_manifest,
    pv_manifest,
    status_manifest,
    warmer_manifest,
)
from fleetcache.functions.node_tier.warmer_names import (
    ACCESS_KEYS,
    CLAIM_KEY,
    KEYS,
    PV_KEY,
    STATUS_KEY,
    WARMER_KEY,
    Names,
    label_key,
    pool_hash,
)
from fleetcache.functions.node_tier.warmer_records import Counts, count
from fleetcache.functions.node_tier.warmer_verdict import Verdict, blocked, from_counts
from fleetcache.functions.views.fleet_cluster import FleetClusterView

NODE_TIER = "Node"
CLAIM_BOUND_QUERY = "has(object.status) && has(object.status.phase) && " \
                    "object.status.phase == 'Bound'"
WAITS = (reasons.AwaitingVolumeTier, reasons.NodeCapacityLow)  # keep what exists; the rest removes it


# --- 4. compose ---------------------------------------------------------------------------


def compose_objects(request: protocol.Request, h: Hydration, names: Names, node_cache: NodeCache,
                    cluster: FleetClusterView, volume_claim: str,
                    keep: frozenset[str] | None, outcome: protocol.Outcome) -> None:
    def remote(key: str, manifest: dict, ready: bool, **kwargs: Any) -> None:
        outcome.compose(key, objects.remote_object(names.object(key), h.namespace, manifest,
                                               cluster.provider_config, labels=h.labels,
                                               **kwargs), ready)

    def seen(key: str) -> bool:
        return bool(objects.remote_manifest(request.observed.get(key)))

    claim = objects.remote_manifest(request.observed.get(CLAIM_KEY))
    remote(PV_KEY, pv_manifest(h, names, node_cache), seen(PV_KEY))
    remote(CLAIM_KEY, claim_manifest(h, names, node_cache, claim),
           read.get_path(claim, "status.phase") == "Bound", readiness_query=CLAIM_BOUND_QUERY,
           watch=True)
    # The per-node records say nothing a query can add up: the provider re-reads them every
    # 30 s until this tier last reported Ready.
    settled = read.get_path(request.status, "nodeTier.phase") == "Ready"
    remote(STATUS_KEY, status_manifest(h, names), seen(STATUS_KEY),
           management_policies=objects.OBSERVE_CREATE_DELETE,
           readiness_query=objects.awaited_query(not settled), watch=True)
    for key, manifest in zip(ACCESS_KEYS, access_manifests(h, names), strict=True):
        remote(key, manifest, seen(key))
    if keep is None:  # which commits replicas read is not known yet: the warmers stay as they are
        objects.carry_over(request, outcome, [WARMER_KEY])
        return
    remote(WARMER_KEY, warmer_manifest(h, names, node_cache, cluster.agent_image,
                                       volume_claim, keep), seen(WARMER_KEY),
           readiness_query=objects.ROLLED_OUT_QUERY, watch=True)


# --- 5. the hook: decide, compose, report --------------------------------------------------


def warmer_commit(outcome: protocol.Outcome) -> str:
    """The commit the warmer DaemonSet of this call warms (composed, or kept as observed);
    "" when there is none."""
    resource = outcome.desired.get(WARMER_KEY)
    containers = read.get_path(resource[0] if resource else None,
                              "spec.forProvider.manifest.spec.template.spec.containers")
    args = containers[0].get("args") if isinstance(containers, list) and containers \
        and isinstance(containers[0], dict) else None
    if not isinstance(args, list) or "--commit" not in args[:-1]:
        return ""
    commit = args[args.index("--commit") + 1]
    return commit if shapes.is_resolved_commit(commit) else ""


def run(request: protocol.Request, h: Hydration, fleet_cluster: dict | None,
        cluster: FleetClusterView | None, volume_claim: str, volume: VolumeTier,
        replicas: list[dict] | None, outcome: protocol.Outcome) -> dict:
    """Decide, compose and return status.nodeTier.

    What exists stays while the tier waits for its volume or for room, and while the
    hydration holds what it has; the counts are then those of the commit the warmers keep
    (during a model update, the previous one until the volume holds the new one). A node
    eviction, or a cluster whose spec.nodeCache cannot serve this cache, removes it.
    """
    node_cache = NodeCache.of_pool(read.get_path(fleet_cluster, "spec"), h.pool)
    decision = Decision.of_pool(read.get_path(fleet_cluster, "status"), h.pool, h.key)
    names = Names(h, pool_hash(node_cache.pool) if node_cache and node_cache.pool else "")
    verdict = blocked(request, h, cluster, node_cache, decision, volume)
    if verdict is None:
        if node_cache is not None and cluster is not None:  # always: blocked() said why not
            compose_objects(request, h, names, node_cache, cluster, volume_claim,
                            kept_on_nodes(replicas, h), outcome)
    elif verdict.reason in WAITS and volume.composing:
        objects.carry_over(request, outcome, [k for k in KEYS if k in request.observed])
    elif verdict.reason not in WAITS and not volume.problem:
        for key in KEYS:  # also over the hydration's hold: this cache has no node tier here
            outcome.desired.pop(key, None)
    warmed = warmer_commit(outcome) if not volume.problem else ""
    counts = count(request, warmed or h.commit)
    if verdict is None or (warmed and counts.observed):
        kept = from_counts(dataclasses.replace(h, commit=warmed or h.commit), names, counts)
        if verdict is not None and warmed != h.commit:
            kept = Verdict(kept.phase, kept.reason, f"{kept.message}; they keep "
                           f"{warmed[:10]} until the volume holds {h.commit[:10]}")
        verdict = kept
    labelled = node_cache is None or node_cache.labels
    status = {"phase": verdict.phase, "commit": warmed or h.commit,
              "labelKey": label_key(h.namespace, h.cache) if labelled else "",
              **Counts(True).as_status(), "reason": verdict.reason, "message": verdict.message}
    if names.pool_hash:
        status["claimName"] = names.claim
    if verdict.phase != "Evicted" and counts.observed:
        status.update(counts.as_status())
    return status
