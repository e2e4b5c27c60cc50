"""Delivery per replica (compose-model-deployment, step 3): Node, Cache, Source, Wait or
Fail, by the table of DESIGN.md §3 and spec.delivery, with the additions of
design/deployments.md: a cluster whose cache is not Ready on the resolved commit but still
holds a verified earlier one (its servingCommit) keeps serving that one from the cache; on a
cluster holding the cache on tier Node, Node delivery (the node's own copy) is weighed before
the volume (decisions/node_delivery.py); a model no engine loads from its source (an S3
prefix, a volume's own files) waits where the table says Source; and on a cluster the cache's
rollout in waves holds on earlier content, the table runs on that content (its commit is the
one served, from the cache or the source) and says the rollout is why. On a cluster that
mounts image volumes, a cache with an OCI artifact of the commit served is delivered as that
artifact (Image), unless the replica could not mount it there: then the table decides, and
says why (decisions/image_delivery.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fleetcache import messages, reasons, shapes
from fleetcache.functions.decisions import image_delivery, node_delivery
from fleetcache.functions.decisions.node_delivery import NodePolicy
from fleetcache.functions.views.hydration import ClusterReport
from fleetcache.functions.views.model_replica import Previous
from fleetcache.functions.views.node_tier import NodeTier
from fleetcache.functions.views.served_model import Content, Model

# What the table says of the cache's standing on the content a replica serves; on a cluster the
# rollout holds, that content is an earlier commit, and the rollout is why it serves that one.
SAID_OF_THE_CACHE = (reasons.CacheReady, reasons.Hydrating, reasons.HydrationFailed)


@dataclass(frozen=True)
class Policy:
    """spec.delivery: what a replica does while its cluster's cache is not Ready."""

    while_hydrating: str
    on_hydration_failure: str
    switch_to_cache: str
    node: NodePolicy


@dataclass(frozen=True)
class Delivery:
    delivery: str  # Node | Cache | Image | Source | Wait | Fail
    reason: str
    commit: str  # the commit the replica loads ("" for Wait/Fail, or before a resolve)
    detail: str = ""  # what the reason means here (ModelReplica spec.deliveryReason)
    node: Mapping = field(default_factory=dict)  # a Node replica's spec.nodeCache
    image: Mapping = field(default_factory=dict)  # an Image replica's spec.image

    @property
    def delivery_reason(self) -> str:
        """The replica's spec.deliveryReason: said where the node tier was weighed (the
        volume tier's replicas keep the spec they had; placements[].reason says why)."""
        return messages.clipped(f"{self.reason}: {self.detail}", messages.MESSAGE_LIMIT) \
            if self.detail else ""


def decide(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery: the cache's artifact as an image volume where the cluster
    mounts them, else by the table, saying so where the artifact could not be mounted."""
    image = image_delivery.choose(model.artifact, model.content_on(cluster).commit,
                                  cluster in model.image_clusters, cluster, before) \
        if model.cache_found and model.cache_name and cluster in model.targets else ""
    if model.artifact is not None and model.cache_name and image == image_delivery.IMAGE:
        return Delivery("Image", reasons.ImageVolume, model.artifact.commit,
                        image_delivery.mounted_detail(model.artifact, cluster),
                        image=model.artifact.mount(model.cache_name))
    chosen = on_the_volume_path(model, cluster, policy, before)
    if model.artifact is not None and image == image_delivery.FALLBACK:
        return replace(chosen, reason=reasons.ImageVolumeUnavailable,
                       detail=image_delivery.fallback_detail(model.artifact, cluster))
    return chosen


def on_the_volume_path(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery by the table; where it says Source for a model no engine
    loads from its source (an S3 prefix, a volume's own files), the replica waits instead,
    keeping the table's reason."""
    chosen = by_table(model, cluster, policy, before)
    if chosen.delivery == "Source" and not model.from_source:
        return Delivery("Wait", chosen.reason, "")
    if cluster in model.held and chosen.delivery in ("Cache", "Source") \
            and chosen.reason in SAID_OF_THE_CACHE:
        return replace(chosen, reason=reasons.PreviousCommitHeldByRollout)
    return chosen


def by_table(model: Model, cluster: str, policy: Policy, before: Previous | None) -> Delivery:
    """One replica's delivery by DESIGN.md §3's table and spec.delivery, with one addition:
    a cluster not Ready on the resolved commit that still holds a verified earlier commit
    (servingCommit) keeps serving that one from the cache, hydrating or failed alike. On a
    cluster the rollout holds, "the resolved commit" is the held one (`Model.content_on`)."""
    if model.cache_name is None:
        return Delivery("Source", reasons.NoModelCache, model.commit)
    if not model.cache_found:
        # The model served last, from the source; never served one: nothing to load.
        if model.repo:
            return Delivery("Source", reasons.ModelCacheNotFound, model.commit)
        return Delivery("Wait", reasons.ModelCacheNotFound, "")
    row = model.targets.get(cluster)
    if row is None:
        return Delivery("Source", reasons.NotACacheTarget, model.commit)
    # Already loading the resolved commit from the source on this cluster: never sent back
    # to an older snapshot (a downgrade and a second roll); it follows the table.
    running_source = before is not None and before.cluster == cluster \
        and before.delivery == "Source"
    tier = model.node_tiers.get(cluster)
    content = model.content_on(cluster)
    if row.phase == "Ready" and content.commit:
        if policy.switch_to_cache == "Never" and running_source:
            return Delivery("Source", reasons.SwitchToCacheNever, content.commit)
        if tier is not None and content.manifest_digest:
            return node_or_volume(content, tier, policy, cluster, before)
        return Delivery("Cache", reasons.CacheReady, content.commit)
    kept = kept_on_node(row, tier, policy, before, cluster)
    if kept is not None:
        return kept
    if row.serving_commit and not running_source:
        reason = reasons.PreviousCommitHydrationFailed if row.phase == "Failed" \
            else reasons.PreviousCommitWhileHydrating
        return Delivery("Cache", reason, row.serving_commit)
    if row.phase == "Failed":
        if policy.on_hydration_failure == "Fail":
            return Delivery("Fail", reasons.HydrationFailed, "")
        return Delivery("Source", reasons.HydrationFailed, content.commit)
    if policy.while_hydrating == "Wait":
        return Delivery("Wait", reasons.Hydrating, "")
    return Delivery("Source", reasons.Hydrating, content.commit)


def node_or_volume(content: Content, tier: NodeTier, policy: Policy, cluster: str,
                   before: Previous | None) -> Delivery:
    """On a cluster holding the cache on tier Node with its volume Ready on `content`: the
    node copy when a node holds the commit (spec.delivery.node), else the volume, saying why."""
    here = before.delivery if before is not None and before.cluster == cluster else ""
    choice = node_delivery.choose(tier, content.commit, policy.node, policy.switch_to_cache, here)
    if choice.delivery == "Cache":
        return Delivery("Cache", choice.reason, content.commit, choice.detail)
    reverted = before.reverted_at if before is not None and here == "Node" else ""
    return Delivery("Node", choice.reason, content.commit, choice.detail,
                    node_delivery.node_cache_spec(tier, content.commit, content.manifest_digest,
                                                  policy.node, reverted))


def kept_on_node(row: ClusterReport, tier: NodeTier | None, policy: Policy,
                 before: Previous | None, cluster: str) -> Delivery | None:
    """A Node replica whose cluster hydrates a new commit on its volume (or failed to) keeps
    its node copy of the commit it serves, unchanged (no roll), while the node PVC is still
    there and Node delivery is not turned off; its pod falls back to the volume, which keeps
    that commit, on a node without it."""
    if tier is None or not tier.mountable or policy.node.policy == "Never" \
            or before is None or before.cluster != cluster \
            or before.delivery != "Node" or not row.serving_commit \
            or before.node.get("commit") != row.serving_commit \
            or before.node.get("claimName") != tier.claim_name:
        return None
    digest = before.node.get("manifestDigest")
    if not shapes.is_sha256(digest):
        return None
    kept = node_delivery.node_cache_spec(tier, row.serving_commit, digest, policy.node,
                                         before.reverted_at)
    reason = reasons.PreviousCommitHydrationFailed if row.phase == "Failed" \
        else reasons.PreviousCommitWhileHydrating
    return Delivery("Node", reason, row.serving_commit,
                    f"the node copy (else the cluster volume) serves {row.serving_commit[:12]} "
                    "until the new commit is Ready on the cluster", kept)
