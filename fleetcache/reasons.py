"""Reasons and their remedies."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fleetcache import exitcodes


@dataclass(frozen=True)
class Reason:
    name: str
    remedy: str


REASONS: dict[str, Reason] = {
    r.name: r
    for r in (
        Reason("ClusterNotReady", "Wait for the FleetCluster to become Ready, or check its "
               "ProviderConfig credentials (kubectl describe fleetcluster)."),
        Reason("ClusterNotFound", "Create the FleetCluster, or fix the name in "
               "spec.placement.clusterNames."),
        Reason("NoClusters", "Label FleetClusters to match spec.placement.clusterSelector, "
               "or list them in spec.placement.clusterNames."),
        Reason("TokenSecretMissing", "Create the Secret named by "
               "spec.source.huggingFace.tokenSecretRef in this namespace, with the key it names."),
        Reason("CredentialsSecretMissing", "Create the Secret named by the field in the message "
               "(spec.source.s3.credentialsSecretRef, spec.distribution.mirror.s3 or "
               "regions[].s3 credentialsSecretRef) in this namespace, with the keys it names "
               "(accessKeyIdKey and secretAccessKeyKey, AWS_ACCESS_KEY_ID and "
               "AWS_SECRET_ACCESS_KEY by default), or fix the name."),
        Reason("HydrationFailed", "See the failed clusters' ModelCacheHydration status for the "
               "cause (kubectl get modelcachehydrations)."),
        Reason("DeadlineExceeded", "The agent Job ran longer than spec.job.activeDeadlineSeconds: "
               "raise it, or check the cluster's bandwidth to the endpoint."),
        Reason("BackoffLimitExceeded", "The agent Job failed more often than "
               "spec.job.backoffLimit; read the last progress record and the Job's pod logs."),
        Reason("InvalidSpec", "Fix the field named in the message."),
        Reason("OutsideGrant", "Narrow spec.placement to clusters the ModelCacheGrant covers "
               "(kubectl get modelcachegrant <spec.grantRef.name> -o yaml: spec.clusters), or ask "
               "the platform team for a grant that covers them."),
        Reason("PinningNotAllowed", "Set spec.retention.pinned to false, or ask the platform "
               "team to set spec.allowPinned on the ModelCacheGrant."),
        Reason("OverQuota", "Ask the platform team to raise the ModelCacheGrant's "
               "spec.quota.bytes, or free room: delete ModelCaches naming the grant, or narrow "
               "their spec.placement (kubectl get modelcachegrant shows BUDGET, USED and "
               "PROJECTED)."),
        Reason("ModelCacheNotFound", "Create the ModelCache named by spec.modelCacheRef.name "
               "in this namespace, or fix the name."),
        Reason("MaxReplicasPerCluster", "Raise spec.maxReplicasPerCluster, lower "
               "spec.replicas, or widen spec.placement to more Ready clusters."),
        Reason("AwaitingPrerequisites", "If this persists, check the Synced condition of "
               "those Objects (kubectl get objects -n <namespace>); a token Secret that never "
               "appears usually means the Secret named by tokenSecretRef is missing in this "
               "namespace."),
        Reason("JobNotStarted", "The agent Job exists but has not started: check quota and "
               "admission on the cluster (kubectl describe job)."),
        Reason("VolumeNotBound", "The cache PVC is not Bound: check that the storage class "
               "(spec.storage.storageClassName, else the FleetCluster's "
               "spec.cache.storageClassName) exists, supports the access mode and has "
               "capacity (kubectl describe pvc)."),
        Reason("VolumeNotExpandable", "The cache PVC's storage class cannot grow it to hold the "
               "new commit beside the one replicas still serve: recreate the volume in a "
               "storage class with allowVolumeExpansion: true (spec.storage.storageClassName "
               "on the ModelCache, then delete this ModelCacheHydration), or set "
               "spec.storage.size on the ModelCache large enough for two commits, or delete "
               "this ModelCacheHydration to recreate the volume at the new size."),
        Reason("CapacityLow", "Raise the FleetCluster's spec.cache.capacity or "
               "spec.cache.highWatermark, or remove caches from this cluster (a ModelCache's "
               "placement), or unpin caches no replica needs (spec.retention.pinned) so they can "
               "be evicted."),
        Reason("CapacityAvailable", "None: every hydration on the cluster fits under the high "
               "watermark (or the cluster sets no spec.cache.capacity)."),
        Reason("Evicted", "None needed: the copy was unpinned and unmounted and the cluster was "
               "above its high watermark. Placing a replica of the cache on this cluster warms it "
               "again; pin the ModelCache (spec.retention.pinned) to keep its copies."),
        Reason("LeftPlacement", "None needed: the cluster left the ModelCache's placement, so its "
               "copy only serves what it holds until spec.removal.until; add the cluster to the "
               "placement again to update it."),
        Reason("GrantNotFound", "Ask the platform team for a ModelCacheGrant in this namespace "
               "(kubectl get modelcachegrants) and name it in spec.grantRef.name; until the grant "
               "exists the cache neither resolves nor fans out, and copies it already has keep "
               "serving."),
        Reason("AwaitingGrant", "None: the ModelCacheGrant decides on this spec (and its "
               "resolved size) at its next reconcile; if it lasts, check that "
               "compose-model-cache-grant runs (kubectl describe modelcachegrant)."),
        # The node tier (functions/node_tier.py): status.nodeTier of a hydration, and the
        # ModelCache's Degraded condition.
        Reason("NodeTierNotConfigured", "None if intended: the cache stays on the cluster's "
               "volume there. For node copies, the platform team sets spec.nodeCache on the "
               "FleetCluster (nodeSelector, path, capacityPerNode; design/node-tier.md)."),
        Reason("NodeCacheModeUnsupported", "Node caches from a storage class "
               "(spec.nodeCache.storageClassName) are reserved and not built: remove it from "
               "the FleetCluster and set spec.nodeCache.path to a dedicated filesystem mounted "
               "on every pool node."),
        Reason("NoEligibleNodes", "Label the GPU nodes that should hold copies with the "
               "FleetCluster's spec.nodeCache.optInLabel (default fleetcache.dev/node-cache="
               "enabled), and check that they match spec.nodeCache.nodeSelector "
               "(control-plane nodes never do); give spec.nodeCache.tolerations for their "
               "taints."),
        Reason("NodeTierDegraded", "See the named clusters' ModelCacheHydration "
               "status.nodeTier.firstFailure (kubectl get modelcachehydrations: NODES) and the "
               "warmer pod on that node (kubectl logs ds/<cache>-node-warmer); replicas there "
               "keep reading the cluster volume meanwhile."),
        Reason("VolumeNotShared", "Give the cache volume access mode ReadWriteMany (the "
               "ModelCache's spec.storage.accessMode, else the FleetCluster's "
               "spec.cache.accessMode; an existing PVC keeps its mode: delete this "
               "ModelCacheHydration to recreate it), or set the ModelCache's "
               "spec.storage.tier to Volume."),
        Reason("AwaitingVolumeTier", "None: nodes copy from the cluster's verified volume, "
               "so they start once the hydration's phase is Ready on this commit; see its "
               "reason if that lasts."),
        Reason("NodesWarming", "None: the pool nodes copy from the cluster's volume, at most "
               "spec.nodeCache.maxConcurrentNodes at once per cluster; raise it to go faster."),
        Reason("NodesWarm", "None: every eligible pool node holds the verified commit."),
        # The FleetCluster's node tier (functions/node_capacity.py, node_system.py).
        Reason("NodeCapacityLow", "Raise the FleetCluster's spec.nodeCache.capacityPerNode or "
               "highWatermark (only as far as the pool nodes' disks really hold), remove "
               "tier-Node caches from this cluster or set their spec.storage.tier to Volume, "
               "or unpin node caches no replica needs so they can be evicted; the volume "
               "serves meanwhile."),
        Reason("NodeCapacityAvailable", "None: every tier-Node cache on the cluster fits under "
               "spec.nodeCache.highWatermark of capacityPerNode."),
        Reason("NodeAgentReady", "None: every pool node runs the node agent "
               "(fleetcache-system/fleetcache-node-agent)."),
        Reason("NodeAgentNotReady", "See the node agent's pods on the named cluster (kubectl -n "
               "fleetcache-system get pods -l app.kubernetes.io/component=node-agent): a pod "
               "that cannot mount spec.nodeCache.path means the path is missing on that node "
               "(create the filesystem, or remove the node's opt-in label)."),
        # Sources beyond the Hub and the fleet mirror (functions/sources.py, functions/mirror.py).
        Reason("AwaitingManifest", "None: an S3 or existing-volume source is fetched or verified "
               "against the manifest its ModelCache latched (status.resolved.manifest); if it "
               "lasts, check that the ModelCache is Resolved on this commit (kubectl describe "
               "modelcache)."),
        Reason("WaitingForMirror", "None: the publishing cluster (the ModelCache's "
               "status.mirror.publisher) fetches this commit from the origin and publishes it "
               "to spec.distribution.mirror first; the others then read the mirror. If it "
               "lasts, see the publisher's ModelCacheHydration."),
    )
}
for _row in exitcodes.EXIT_CODES:
    REASONS[_row.reason] = Reason(_row.reason, _row.remedy)


def remedy(reason: str) -> str:
    found = REASONS.get(reason)
    return found.remedy if found else ""


def with_remedy(message: str, reason: str) -> str:
    """A status message that says what happened and then what to do."""
    fix = remedy(reason)
    if not fix or fix.rstrip(".") in message:  # said already (perhaps before a final period)
        return message
    return f"{message.rstrip('.')}. {fix}" if message else fix



REASON_SHAPE = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")


def reason_or_empty(value: Any) -> str:
    """A reason read from input (the agent's record, a hydration's status) if it has a
    reason's shape (CamelCase, at most 64 characters), else "": a hostile string must not
    become a condition reason the API server refuses."""
    return value if isinstance(value, str) and REASON_SHAPE.match(value) else ""
