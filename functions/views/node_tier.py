"""The node tier of one cluster as its ModelCacheHydration publishes it (status.nodeTier:
phase, commit, readyNodes/desiredNodes, the node PVC and the node label), written by the node
tier (node_tier/warmers.py `run`) and read by compose-model-deployment, which places replicas
on warm nodes and decides Node delivery from it; and the shapes of what the node tier names
(a warm-node label key, a manifest digest), which replicas carry in spec.nodeCache."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.functions import read

LABEL_KEY_SHAPE = re.compile(r"^node-cache\.fleetcache\.dev/[0-9a-f]{16}$")
# Node tier phases in which the node PVC exists and nodes are (or will be) warmed.
MOUNTABLE = ("Warming", "Ready", "Degraded")
# Reasons of a node tier that will not warm on its own (the platform or the nodes must act).
NOT_WARMING = (reasons.NodeTierNotConfigured, reasons.NodeCacheModeUnsupported, reasons.NoEligibleNodes)


@dataclass(frozen=True)
class NodeTier:
    """status.nodeTier of a hydration on tier Node, read as untrusted input."""

    phase: str
    commit: str
    claim_name: str
    label_key: str  # "" when the cluster sets no warm labels (nodeCache.labels: None)
    ready_nodes: int
    desired_nodes: int
    reason: str
    message: str

    @classmethod
    def of(cls, hydration: Any) -> NodeTier | None:
        """None when the hydration is not on tier Node. A claim name or label key that is
        not one reads as absent: both end up in a pod template."""
        if read.get_path(hydration, "spec.tier") != "Node":
            return None
        tier = read.mapping_at(hydration, "status.nodeTier")
        claim = tier.get("claimName")
        label = tier.get("labelKey")
        commit = tier.get("commit")
        return cls(
            phase=messages.clipped(tier.get("phase") or "Pending", 32),
            commit=commit if isinstance(commit, str) and shapes.is_label_value(commit) else "",
            claim_name=read.name_or_empty(claim),
            label_key=label if isinstance(label, str) and LABEL_KEY_SHAPE.match(label) else "",
            ready_nodes=max(0, read.as_int(tier.get("readyNodes"))),
            desired_nodes=max(0, read.as_int(tier.get("desiredNodes"))),
            reason=reasons.reason_or_empty(tier.get("reason")),
            message=messages.clipped(tier.get("message") or ""),
        )

    @property
    def mountable(self) -> bool:
        """The node PVC exists and nodes are being warmed: a pod may mount it (a node
        without the copy falls back to the volume inside the pod)."""
        return bool(self.claim_name) and self.phase in MOUNTABLE \
            and self.reason not in NOT_WARMING

    def serves(self, commit: str) -> bool:
        """At least one node holds `commit`, verified."""
        return self.mountable and self.commit == commit and self.ready_nodes >= 1

    def warm(self, commit: str) -> str:
        held = min(self.ready_nodes, self.desired_nodes) if self.commit == commit else 0
        return f"{held}/{self.desired_nodes} nodes warm on {commit[:12]}"
