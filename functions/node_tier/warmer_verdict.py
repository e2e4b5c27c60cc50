"""Where the node tier of one hydration stands (node_tier/warmers.py, step 3): why it
composes nothing new here (not configured, a mode it does not support, evicted, waiting for
room or for the volume tier), else the phase the warmers' counts give, each with its reason
and a message that names the remedy."""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import reasons
from fleetcache.functions import protocol, read
from fleetcache.functions.node_tier.warmer_inputs import (
    DEFAULT_POOL,
    Decision,
    Hydration,
    NodeCache,
    VolumeTier,
)
from fleetcache.functions.node_tier.warmer_names import WARMER_KEY, Names
from fleetcache.functions.node_tier.warmer_records import Counts
from fleetcache.functions.views.fleet_cluster import FleetClusterView

STARTED = ("Warming", "Ready", "Degraded", "Failed")  # a latched nodeTier.phase


@dataclass(frozen=True)
class Verdict:
    phase: str  # nodeTier.phase
    reason: str
    message: str


def pool_field(h: Hydration) -> str:
    """Where the FleetCluster declares the hydration's pool, for messages."""
    return "spec.nodeCache" if h.pool == DEFAULT_POOL else f"spec.nodePools[{h.pool}]"


def from_counts(h: Hydration, names: Names, counts: Counts) -> Verdict:
    where = f"on cluster {h.cluster}"
    if not counts.observed:
        return Verdict("Pending", reasons.AwaitingPrerequisites, reasons.with_remedy(
            f"waiting for the warmer DaemonSet {names.warmer} {where} to report its nodes",
            reasons.AwaitingPrerequisites))
    if counts.desired == 0:
        return Verdict("Pending", reasons.NoEligibleNodes, reasons.with_remedy(
            f"no node {where} is in the pool: none matches {pool_field(h)}.nodeSelector with "
            "the opt-in label (control-plane nodes never are)", reasons.NoEligibleNodes))
    tally = (f"{counts.ready}/{counts.desired} nodes {where} hold {h.commit[:10]}, "
             f"{counts.downloading} copying or waiting for a slot, {counts.failed} failed, "
             f"{counts.pending} not started")
    failure = counts.first_failure
    if failure:
        tally += f"; first failure on {failure['node']}: {failure['reason']}"
        if failure["message"]:
            tally += f" ({failure['message']})"
    if counts.ready == counts.desired:
        return Verdict("Ready", reasons.NodesWarm, tally)
    if failure and counts.failed == counts.desired:
        return Verdict("Failed", failure["reason"], reasons.with_remedy(tally, failure["reason"]))
    if failure:
        remedy = reasons.remedy(failure["reason"]) or reasons.remedy(reasons.NodeTierDegraded)
        return Verdict("Degraded", reasons.NodeTierDegraded, f"{tally.rstrip('.')}. {remedy}")
    return Verdict("Warming", reasons.NodesWarming, tally)


def blocked(request: protocol.Request, h: Hydration, cluster: FleetClusterView | None,
            node_cache: NodeCache | None, decision: Decision, volume: VolumeTier
            ) -> Verdict | None:
    """Why the tier composes nothing new here, or None when it composes."""
    where = f"on cluster {h.cluster}"
    if volume.problem or cluster is None:
        return Verdict("Pending", volume.reason or reasons.ClusterNotReady, volume.problem or
                       reasons.with_remedy(f"FleetCluster {h.cluster} cannot be used yet",
                                       reasons.ClusterNotReady))
    if node_cache is None:
        declared = "sets no spec.nodeCache" if h.pool == DEFAULT_POOL else \
            f"has no node pool {h.pool} (spec.nodePools[].name; spec.storage.nodePool of the " \
            "ModelCache names it)"
        return Verdict("Pending", reasons.NodeTierNotConfigured, reasons.with_remedy(
            f"FleetCluster {h.cluster} {declared}: this cache stays on the "
            f"cluster's volume there", reasons.NodeTierNotConfigured))
    if node_cache.storage_class:
        return Verdict("Pending", reasons.NodeCacheModeUnsupported, reasons.with_remedy(
            f"FleetCluster {h.cluster} asks for node caches from storage class "
            f"{node_cache.storage_class} ({node_cache.field}.storageClassName), which is reserved: "
            "this cache stays on the cluster's volume there", reasons.NodeCacheModeUnsupported))
    if node_cache.problem:
        return Verdict("Pending", reasons.NodeTierNotConfigured, reasons.with_remedy(
            f"FleetCluster {h.cluster}'s {node_cache.problem}: this cache stays on the "
            "cluster's volume there", reasons.NodeTierNotConfigured))
    if not h.repo:
        return Verdict("Pending", reasons.InvalidSpec, reasons.with_remedy(
            "spec.source.volume: an existing volume is served in place, in its own layout, so "
            "there is no fleetcache volume to warm nodes from; set spec.storage.tier: Volume "
            "on the ModelCache", reasons.InvalidSpec))
    if not h.manifest_digest:
        return Verdict("Pending", reasons.InvalidSpec, reasons.with_remedy(
            "spec.manifestDigest is empty: every node copy is verified against it (the "
            "ModelCache sets it from its resolve)", reasons.InvalidSpec))
    if not volume.shared:
        return Verdict("Pending", reasons.VolumeNotShared, reasons.with_remedy(
            f"the cache volume {where} is ReadWriteOnce: the warmers on every pool node read "
            "it at once, and a ReadWriteOnce volume attaches to one node", reasons.VolumeNotShared))
    if decision.evicted:
        return Verdict("Evicted", reasons.Evicted, (
            f"cluster {h.cluster} evicted {h.key} from its nodes to get under "
            f"{node_cache.field}.lowWatermark (it was not pinned and no replica mounted the node "
            "copy): the warmers are gone, the node agent deletes the copies, the volume "
            "keeps serving"))
    if not (volume.composing and volume.ready):
        state = "was evicted" if volume.phase == "Evicted" else \
            f"does not hold {h.commit[:10]} yet" if volume.composing else \
            "composes nothing new"
        return Verdict("Pending", reasons.AwaitingVolumeTier, reasons.with_remedy(
            f"nodes {where} are warmed from the cluster's verified volume, which {state} "
            f"(the hydration is {volume.phase}, {volume.reason})", reasons.AwaitingVolumeTier))
    started = read.get_path(request.status, "nodeTier.phase") in STARTED
    if not (decision.admitted or started or request.observed.get(WARMER_KEY)):
        waiting = "has not decided on it yet" if not decision.known else \
            f"has no room for it under {node_cache.field}.highWatermark yet"
        status = "status.nodeCache" if h.pool == DEFAULT_POOL else f"status.nodePools[{h.pool}]"
        return Verdict("Pending", reasons.NodeCapacityLow, reasons.with_remedy(
            f"FleetCluster {h.cluster} {waiting} ({status}): the node copies of "
            f"{h.key} wait", reasons.NodeCapacityLow))
    return None
