"""A ModelCache's node tier, summed over its target hydrations (compose-model-cache).

The ModelCache gets only sums (status.nodeTier) and, when nodes failed, the Degraded
condition with reason NodeTierDegraded naming up to NAMED clusters and the first remedy;
each cluster's detail stays on its ModelCacheHydration (DESIGN §7: a status stays small at
any fleet size). The volume tier's conditions are its own: a node failure never makes the
cache less Available, since replicas fall back to the cluster volume.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetcache import messages, reasons
from fleetcache.functions import protocol, read

NAMED = 5
COUNTS = ("desiredNodes", "readyNodes", "downloadingNodes", "failedNodes")


@dataclass(frozen=True)
class ClusterNodes:
    """One hydration's status.nodeTier, read tolerantly."""

    cluster: str
    phase: str
    counts: dict[str, int]
    first_reason: str

    @classmethod
    def of(cls, cluster: str, hydration: Any) -> ClusterNodes:
        tier = read.mapping_at(hydration, "status.nodeTier")
        return cls(cluster, reasons.reason_or_empty(tier.get("phase")),
                   {k: max(0, read.as_int(tier.get(k))) for k in COUNTS},
                   reasons.reason_or_empty(read.get_path(tier, "firstFailure.reason")))


def rollup(hydrations: Mapping[str, Any]) -> tuple[dict, list[ClusterNodes]]:
    """(status.nodeTier, the clusters with failed nodes in name order) over the target
    hydrations by cluster (None where none is observed yet)."""
    rows = [ClusterNodes.of(cluster, hydrations[cluster]) for cluster in sorted(hydrations)]
    status: dict[str, int | str] = {k: sum(r.counts[k] for r in rows) for k in COUNTS}
    status["readyClusters"] = sum(1 for r in rows if r.phase == "Ready")
    status["summary"] = f"{status['readyNodes']}/{status['desiredNodes']}"
    return status, [r for r in rows if r.counts["failedNodes"]]


def degraded_message(failing: list[ClusterNodes]) -> str:
    named = ", ".join(f"{r.cluster} ({r.counts['failedNodes']} of {r.counts['desiredNodes']} "
                      f"nodes{': ' + r.first_reason if r.first_reason else ''})"
                      for r in failing[:NAMED])
    more = f" and {messages.counted(len(failing) - NAMED, 'more cluster')}" if len(failing) > NAMED else ""
    first = failing[0].first_reason
    remedy = reasons.remedy(first) if first else ""
    message = f"node copies failed on {named}{more}. " + (remedy or reasons.remedy(reasons.NodeTierDegraded))
    return messages.clipped(message, messages.MESSAGE_LIMIT)


def apply(tier: str, hydrations: Mapping[str, Any], outcome: protocol.Outcome) -> None:
    """status.nodeTier and the Degraded condition of a tier-Node cache; a Degraded the volume
    tier already reports keeps its reason and names the nodes' failures too."""
    if tier != "Node":
        return
    status, failing = rollup(hydrations)
    outcome.status["nodeTier"] = status
    if not failing:
        return
    message = degraded_message(failing)
    for index, condition in enumerate(outcome.conditions):
        if condition.type != "Degraded":
            continue
        if condition.status == "True":
            outcome.conditions[index] = replace(condition, message=messages.clipped(
                f"{condition.message.rstrip('.')}; {message}", messages.MESSAGE_LIMIT))
        else:
            outcome.conditions[index] = protocol.Condition("Degraded", "True", reasons.NodeTierDegraded,
                                                      message)
        return
    outcome.condition("Degraded", True, reasons.NodeTierDegraded, message)
