"""Node delivery, decided (design/node-tier.md §3.6, design/deployments.md "Node delivery"): on
a cluster whose volume is Ready, whether a replica gets its GPU node's own copy of the model
(Node) or stays on the cluster volume (Cache), and why; and the spec.nodeCache a Node replica
then carries (node_tier/delivery.py composes its pod from it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleetcache import reasons
from fleetcache.functions.views.node_tier import NOT_WARMING, NodeTier


@dataclass(frozen=True)
class NodePolicy:
    """spec.delivery.node of a ModelDeployment."""

    policy: str  # Prefer | Require | Never
    require_timeout: str

    @classmethod
    def of(cls, node: Mapping) -> NodePolicy:
        return cls(node.get("policy") or "Prefer", node.get("requireTimeout") or "15m")


@dataclass(frozen=True)
class Choice:
    delivery: str  # Node | Cache
    reason: str
    detail: str  # what the reason means on this cluster (ModelReplica spec.deliveryReason)


def choose(tier: NodeTier, commit: str, policy: NodePolicy, switch_to_cache: str,
           before: str) -> Choice:
    """Node or the cluster volume for a replica of `commit` on a cluster whose volume is
    Ready on it; `before` is the replica's delivery on this cluster at the last compose
    ("" when new there). A running Node replica stays Node while the tier warms a new
    commit: its pod reads the volume on nodes without the copy, so it rolls once, not twice."""
    if policy.policy == "Never":
        return Choice("Cache", reasons.NodeDeliveryNever,
                      "spec.delivery.node.policy is Never; using the cluster volume")
    if tier.serves(commit):
        if switch_to_cache == "Never" and before == "Cache":
            return Choice("Cache", reasons.SwitchToNodeNever, (
                f"{tier.warm(commit)}, but spec.delivery.switchToCache is Never: the running "
                "replica stays on the cluster volume"))
        return Choice("Node", reasons.NodeReady, tier.warm(commit))
    if before == "Node" and tier.mountable:
        return Choice("Node", reasons.NodeTierWarming,
                      f"{tier.warm(commit)}; nodes without the copy read the cluster volume")
    if tier.mountable or (tier.phase == "Pending" and tier.reason not in NOT_WARMING):
        return Choice("Cache", reasons.NodeTierWarming,
                      f"{tier.warm(commit)}; using the cluster volume")
    why = f" ({tier.reason})" if tier.reason else ""
    said = f": {tier.message}" if tier.message else ""
    return Choice("Cache", reasons.NodeTierUnavailable,
                  f"node tier {tier.phase}{why}{said}; using the cluster volume")


def node_cache_spec(tier: NodeTier, commit: str, manifest_digest: str, policy: NodePolicy,
                    reverted_at: str) -> dict:
    """A Node replica's spec.nodeCache."""
    spec = {"claimName": tier.claim_name, "labelKey": tier.label_key, "commit": commit,
            "manifestDigest": manifest_digest, "policy": policy.policy,
            "requireTimeout": policy.require_timeout}
    if reverted_at and policy.policy == "Require":
        spec["revertedAt"] = reverted_at
    return spec
