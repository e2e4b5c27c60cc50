"""How a ModelCache's clusters roll up: the counts of its per-cluster reports, the rows
status.clusters and status.retained list (`fleet_status`), the Progressing, Available,
Lapsed and Degraded conditions the reports add up to, with the cache's readiness
(`fleet_conditions`), and the one reason the REASON column shows (`headline`). Pure: the
reports (views/hydration.py report_of) in, status and conditions out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetcache import messages, reasons
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.decisions import retention
from fleetcache.functions.decisions.obey_grant import Admission
from fleetcache.functions.decisions.resolution import Resolution, not_found_message
from fleetcache.functions.views.hydration import PHASES, ClusterReport

LISTED_CLUSTERS = 100  # status.clusters and status.retained rows; the rest are in the hydrations


@dataclass
class Rollup:
    reports: list[ClusterReport] = field(default_factory=list)

    def count(self, phase: str) -> int:
        return sum(1 for r in self.reports if r.phase == phase)

    @property
    def percent(self) -> int:
        total = sum(r.bytes_total for r in self.reports)
        done = sum(min(r.bytes_done, r.bytes_total) for r in self.reports)
        return int(done * 100 // total) if total else 0


def listed(reports: list[ClusterReport]) -> list[ClusterReport]:
    """The rows status.clusters shows: those that need attention first (Failed, Hydrating,
    Pending, then Ready), each phase in name order, at most LISTED_CLUSTERS, so the
    ModelCache stays far below etcd's object limit at any fleet size."""
    return sorted(reports, key=lambda r: (PHASES.index(r.phase), r.name))[:LISTED_CLUSTERS]


def fleet_status(request: protocol.Request, reports: list[ClusterReport], kept: list[retention.Kept] | None,
                 mounted: int) -> dict[str, Any]:
    """The counts, the rows status.clusters lists, and status.retained: kept is None when
    retention did not run (the grant has not admitted this spec)."""
    rollup = Rollup(reports)
    desired = len(reports)
    ready = rollup.count("Ready")
    rows = listed(reports)
    return {
        "desiredClusters": desired,
        "readyClusters": ready,
        "hydratingClusters": rollup.count("Hydrating"),
        "failedClusters": rollup.count("Failed"),
        "pendingClusters": rollup.count("Pending"),
        "lapsedClusters": sum(1 for r in reports if r.lapsed),
        "evictedClusters": rollup.count("Evicted"),
        "retainedClusters": len(kept) if kept is not None
        else max(0, read.as_int(request.status.get("retainedClusters"))),
        "mountedReplicas": mounted,
        "summary": f"{ready}/{desired}",
        "progressPercent": rollup.percent,
        "clusters": [r.as_status() for r in rows],
        "clustersOmitted": desired - len(rows),
        "everyCluster": every_cluster_command(request),
        "retained": [k.as_status() for k in kept[:LISTED_CLUSTERS]] if kept is not None
        else previously_retained(request),
    }


def every_cluster_command(request: protocol.Request) -> str:
    return (f"kubectl get modelcachehydrations -n {request.namespace} "
            f"-l {naming.LABEL_MODEL_CACHE}={naming.label_value(request.name)}")


def previously_retained(request: protocol.Request) -> list:
    """status.retained as it was: while the grant has not admitted the current spec,
    retention decides nothing, so what it latched (each cluster's `since`) stays."""
    rows = request.status.get("retained")
    return [r for r in rows if isinstance(r, dict)][:LISTED_CLUSTERS] \
        if isinstance(rows, list) else []


def fleet_conditions(reports: list[ClusterReport], resolution: Resolution, admitted: Admission,
                     min_ready: int, ttl_after_last_use: str | None, outcome: protocol.Outcome,
                     missing_secrets: list[str] | None = None,
                     rollout_hold: tuple[str, str] | None = None) -> None:
    """Progressing, Available, Lapsed and Degraded, and whether the cache is Ready.
    missing_secrets: why mirror credentials Secrets cannot be used (the cache is not Ready
    until they can); rollout_hold: the reason and message of a rollout in waves that is
    paused, halted or rolled back (Progressing is False with them)."""
    rollup = Rollup(reports)
    desired = len(reports)
    ready, failed = rollup.count("Ready"), rollup.count("Failed")
    hydrating, pending = rollup.count("Hydrating"), rollup.count("Pending")
    evicted = [r for r in reports if r.phase == "Evicted"]
    missing = [r.name for r in reports if r.reason == reasons.ClusterNotFound]
    # A cluster serving the previous commit while the new one hydrates (or failed) still
    # serves this model warm: a model update is not an outage of the cache.
    serving = sum(1 for r in reports if r.serving_previous)
    needed = min_ready or desired
    available = desired > 0 and ready + serving >= needed
    resolved = resolution.resolved

    evicted_on = ""
    if evicted:
        evicted_on = (f"evicted on {messages.named([r.name for r in evicted])} to free room (re-warmed "
                      "when a replica is placed there)")
    if not admitted.admitted and (resolved or admitted.reason == reasons.GrantNotFound):
        outcome.condition("Progressing", admitted.reason == reasons.AwaitingGrant, admitted.reason,
                          admitted.message)
    elif desired == 0:
        outcome.condition("Progressing", False, reasons.NoClusters,
                          reasons.with_remedy("no FleetCluster matches spec.placement", reasons.NoClusters))
    elif missing_secrets:
        outcome.condition("Progressing", False, reasons.CredentialsSecretMissing,
                          messages.clipped("; ".join(missing_secrets), messages.MESSAGE_LIMIT))
    elif rollout_hold:
        outcome.condition("Progressing", False, *rollout_hold)
    elif ready == desired:
        outcome.condition("Progressing", False, reasons.Complete,
                          f"every target is Ready ({messages.counted(desired, 'cluster')})")
    elif missing and ready + len(missing) == desired:
        outcome.condition("Progressing", False, reasons.ClusterNotFound, not_found_message(missing))
    elif evicted and ready + len(missing) + len(evicted) == desired:
        outcome.condition("Progressing", False, reasons.Evicted,
                          f"{ready}/{desired} Ready; nothing hydrates: {evicted_on}")
    elif resolved:
        outcome.condition("Progressing", True, reasons.Hydrating,
                          f"{ready}/{desired} Ready, {hydrating} hydrating, {pending} pending, "
                          f"{failed} failed" + (f", {len(evicted)} evicted" if evicted else "")
                          + f" ({rollup.percent}% of the fleet's bytes)")
    else:
        outcome.condition("Progressing", True, resolution.reason, resolution.message)

    lapsed = lapsed_shortfall(reports, available)
    counted = f"{ready} of {messages.counted(desired, 'cluster')} Ready"
    if serving:
        counted += f", {serving} serving the previous commit until the new one is Ready"
    counted += f" (needs {needed})"
    if evicted_on:
        counted += f"; {evicted_on}"
    if available:
        outcome.condition("Available", True, reasons.MinimumClustersReady, counted)
    else:
        outcome.condition("Available", False, reasons.Lapsed if lapsed else reasons.TooFewClustersReady,
                          counted)
    report_lapsed(reports, available, lapsed, ttl_after_last_use, outcome)

    failures = [r for r in reports if r.phase == "Failed"]
    failed_on = ""
    if failures:
        failed_on = f"hydration failed on {messages.named([f'{r.name} ({r.reason})' for r in failures])}"
    if missing:
        message = not_found_message(missing)
        outcome.condition("Degraded", True, reasons.ClusterNotFound,
                          f"{message.rstrip('.')}; {failed_on}" if failed_on else message)
    elif failures:
        first = reasons.remedy(failures[0].reason) or failures[0].message
        outcome.condition("Degraded", True, reasons.HydrationFailed, f"{failed_on}. {first}".strip())
    else:
        outcome.condition("Degraded", False, reasons.NoFailures, "no cluster has failed")
    outcome.composite_ready = available and not missing_secrets


def headline(reports: list[ClusterReport], outcome: protocol.Outcome) -> str:
    """status.reason, the REASON column, once every condition is set: one word for where the
    cache stands, beside Crossplane's READY. What needs a human comes first: the first failed
    cluster's own reason (e.g. AuthFailed, not the HydrationFailed every failure shares),
    then why it is Degraded (the node tier's included), then where it is going (Progressing)."""
    failures = [r for r in reports if r.phase == "Failed"]
    if failures:
        return failures[0].reason or reasons.HydrationFailed
    said = {c.type: c for c in outcome.conditions}
    return said["Degraded"].reason if said["Degraded"].status == "True" else said["Progressing"].reason


def short_of(reports: list[ClusterReport]) -> list[ClusterReport]:
    """The targets that serve nothing warm: not Ready, and no previous commit to serve."""
    return [r for r in reports if r.phase != "Ready" and not r.serving_previous]


def lapsed_shortfall(reports: list[ClusterReport], available: bool) -> bool:
    """The shortfall below minReady is the TTL's doing: every target short of a copy is one
    whose copy lapsed and was evicted. Any other cause (hydrating, pending, failed, evicted
    without lapsing) keeps it False, so a lapse never masks one of those."""
    short = short_of(reports)
    return not available and bool(short) and all(r.lapsed and r.phase == "Evicted"
                                                  for r in short)


def report_lapsed(reports: list[ClusterReport], available: bool, lapsed: bool,
                  ttl_after_last_use: str | None, outcome: protocol.Outcome) -> None:
    ttl = ttl_after_last_use or "unset"
    gone = [r.name for r in short_of(reports) if r.lapsed and r.phase == "Evicted"]
    if lapsed:
        outcome.condition("Lapsed", True, reasons.Lapsed,
                          f"{messages.counted(len(gone), 'copy', 'copies')} lapsed (no replica mounted it for "
                          f"spec.retention.ttlAfterLastUse {ttl}) and evicted, on {messages.named(gone)}; "
                          "a replica placed on such a cluster warms it again")
        return
    if available:
        message = "no shortfall below spec.minReady"
    elif gone:
        message = (f"{len(gone)} lapsed and evicted, but the shortfall below spec.minReady has "
                   "other causes too (clusters hydrating, pending, failed or evicted without "
                   "lapsing)")
    else:
        message = "the shortfall below spec.minReady is not the TTL's doing"
    lapsed_count = sum(1 for r in reports if r.lapsed)
    if lapsed_count and not gone:
        message += f"; {lapsed_count} lapsed (unpinned) but still on their clusters"
    outcome.condition("Lapsed", False, reasons.NotLapsed, message)
