"""The rollout order of a ModelCache's hydrations: which targets get a hydration on the
resolved content now, at most spec.rollout.maxConcurrent not Ready at once, taken in
cluster-name order; which keep what they have (queued for a slot, waiting for their
mirror, held by a missing mirror credentials Secret, or by the rollout's waves); and what their report says about
it. Pure: the targets and their observed hydrations in, a Plan out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleetcache import messages, reasons
from fleetcache.functions import read
from fleetcache.functions.decisions import mirror
from fleetcache.functions.views.hydration import ClusterReport, pinned_to
from fleetcache.functions.views.placement import Target


@dataclass(frozen=True)
class Plan:
    composed: dict[str, bool]  # cluster -> Ready: its hydration composed on the resolved content
    carried: tuple[str, ...]  # clusters whose hydration is kept as observed
    queued: frozenset[str]  # Ready clusters waiting for a rollout slot
    for_mirror: frozenset[str]  # Ready clusters waiting for their mirror to hold the commit
    held: Mapping[str, str]  # cluster -> why its mirror's credentials Secret cannot be used

    def explain(self, report: ClusterReport, target: Target, max_concurrent: int,
                fleet: mirror.Mirror | None) -> None:
        """Why a target that got nothing new waits, on its report."""
        if target.name in self.queued:
            report.reason = reasons.RolloutQueued
            report.message = (f"waiting for a rollout slot: spec.rollout.maxConcurrent lets "
                              f"{messages.counted(max_concurrent, 'cluster')} hydrate at once")
            if report.serving_commit:
                report.message += f"; serving {report.serving_commit[:10]} until then"
        if fleet is not None and target.name in self.for_mirror:
            report.reason = reasons.WaitingForMirror
            report.message = fleet.waiting_message(target.name)
        if target.name in self.held and target.ready and report.phase == "Pending":
            report.reason, report.message = reasons.CredentialsSecretMissing, self.held[target.name]


def plan(targets: list[Target], observed: Mapping[str, dict | None], resolved: dict, max_concurrent: int,
         fleet: mirror.Mirror | None = None, missing_secrets: Mapping[str, str] | None = None,
         carry: frozenset[str] = frozenset()) -> Plan:
    """One hydration per target; at most max_concurrent not Ready, taken in name order.

    observed: each target's hydration by cluster name. A hydration already pinned to the
    resolved commit keeps its slot; a cluster still on an older commit keeps its old
    hydration (and cache) until a slot frees up. Failed hydrations hold their slot, so a bad
    source stops the rollout instead of failing the whole fleet; evicted ones do not (they
    fetch nothing until a replica returns). With a fleet mirror, a cluster other than its
    mirror's publisher is not composed on the resolved commit before that mirror holds it
    (it waits as Pending, WaitingForMirror). A cluster whose mirror's credentials Secret is
    missing (missing_secrets, by region) gets nothing new: what it has is kept as observed,
    and it is Pending CredentialsSecretMissing. A cluster in `carry` (the waves do not let it
    start yet: decisions/waves.py) keeps what it has as observed and takes no slot.
    """
    composed: dict[str, bool] = {}
    carried: list[str] = []
    in_flight = 0
    waiting: list[tuple[Target, dict | None]] = []
    missing = missing_secrets or {}
    held = {t.name: missing[group.region] for t in targets if fleet is not None
            for group in [fleet.group_of(t.name)] if group and group.region in missing}
    for target in targets:
        hydration = observed.get(target.name)
        if target.name in carry:
            if hydration is not None:
                carried.append(target.name)
        elif target.name in held:
            carried.append(target.name)
            if pinned_to(hydration, resolved) and \
                    read.get_path(hydration, "status.phase") not in ("Ready", "Evicted"):
                in_flight += 1
        elif hydration is not None and pinned_to(hydration, resolved):
            composed[target.name] = read.get_path(hydration, "status.phase") == "Ready"
            if read.get_path(hydration, "status.phase") not in ("Ready", "Evicted"):
                in_flight += 1
        else:
            waiting.append((target, hydration))
    queued, for_mirror = set(), set()
    for target, hydration in waiting:
        if fleet is not None and target.ready and fleet.waits(target.name):
            for_mirror.add(target.name)
        elif target.ready and in_flight < max_concurrent:
            composed[target.name] = False
            in_flight += 1
            continue
        if hydration is not None:
            carried.append(target.name)
        if target.ready:
            queued.add(target.name)
    return Plan(composed, tuple(carried), frozenset(queued), frozenset(for_mirror), held)
