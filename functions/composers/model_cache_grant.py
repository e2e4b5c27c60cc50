"""compose-model-cache-grant: a namespace's byte budget, and the one admission decision for
the ModelCaches that name it.

Lifecycle, top to bottom:
1. read the spec through its model (the clusters it covers, the budget, allowPinned);
   require every ModelCache and every ModelCacheHydration of its namespace and every
   FleetCluster (label selectors with no labels: "all of a kind", in one namespace when
   one is given; design/grants.md);
2. decide (functions/decisions/admission.py): in creation order, which caches naming the grant
   are admitted while the projection fits (a cache with rollout waves at its rollout's peak,
   both commits on every target); a refused edit keeps what was admitted before;
3. count what the namespace holds (usedBytes), absent while any cache has not resolved;
4. report status.caches (bounded), the figures, and the OverQuota condition. It composes
   nothing; it is Ready once it has decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import messages, reasons
from fleetcache.apis import specs
from fleetcache.apis.models.model_cache_grant import ModelCacheGrant
from fleetcache.functions import protocol, quantities, read
from fleetcache.functions.decisions import admission
from fleetcache.functions.naming import API_VERSION
from fleetcache.functions.views import grant as grant_view
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS, FleetClusterView

MODEL_CACHES_KEY = "model-caches"
FLEET_CLUSTERS_KEY = "fleet-clusters"
HYDRATIONS_KEY = "model-cache-hydrations"



# --- 1. inputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrantSpec:
    clusters: dict  # spec.clusters: {clusterSelector} or {clusterNames}
    quota: int
    allow_pinned: bool
    pools: frozenset[str]  # spec.nodePools; absent: default only


def read_spec(request: protocol.Request) -> GrantSpec:
    """The grant read through its model; every error names the field and the fix."""
    spec = specs.read_spec(ModelCacheGrant, request.composite.get("spec"))
    return GrantSpec(clusters=spec["clusters"],
                     quota=quantities.quantity_bytes(spec["quota"]["bytes"], "spec.quota.bytes"),
                     allow_pinned=spec["allowPinned"], pools=grant_view.granted_pools(spec))


def requirements(request: protocol.Request) -> dict[str, protocol.Requirement]:
    """Every ModelCache and hydration of the grant's namespace, every FleetCluster."""
    every = ()  # no labels: Crossplane lists every object of the kind (design/grants.md)
    return {
        MODEL_CACHES_KEY: protocol.Requirement(API_VERSION, "ModelCache",
                                          namespace=request.namespace, match_labels=every),
        HYDRATIONS_KEY: protocol.Requirement(API_VERSION, "ModelCacheHydration",
                                        namespace=request.namespace, match_labels=every),
        FLEET_CLUSTERS_KEY: FLEET_CLUSTERS,
    }


def naming(request: protocol.Request, caches: list[dict]) -> list[dict]:
    """The ModelCaches of this namespace whose spec.grantRef names this grant."""
    return [c for c in caches if read.get_path(c, "spec.grantRef.name") == request.name
            and read.get_path(c, "metadata.namespace") in (None, request.namespace)]


# --- 2. decide ------------------------------------------------------------------------------


def decide(request: protocol.Request, spec: GrantSpec, caches: list[dict], fleet: list[dict]
           ) -> admission.Decision:
    placements = admission.Placements(FleetClusterView.of(resource) for resource in fleet)
    grant = admission.Grant(request.name, placements.clusters(spec.clusters, "spec.clusters"),
                            spec.quota, spec.allow_pinned, spec.pools)
    return admission.decide(grant, [admission.cache_of(c, placements) for c in caches],
                            admission.Previous.rows(request.status.get("caches")))


# --- 4. report ------------------------------------------------------------------------------


def figures(spec: GrantSpec, decision: admission.Decision, used: int | None) -> dict:
    """The status fields; a sum past int64 (what the API server stores) is published at
    its largest value."""
    rows, omitted = admission.limited(decision)
    status = {
        "quotaBytes": min(spec.quota, read.INT64_MAX),
        "budgetHuman": quantities.human_bytes(spec.quota),
        "projectedBytes": min(decision.projected, read.INT64_MAX),
        "projectedHuman": quantities.human_bytes(decision.projected),
        "unresolvedCaches": decision.unresolved,
        "cacheCount": len(decision.rows),
        "admittedCount": decision.admitted,
        "cachesSummary": f"{decision.admitted}/{len(decision.rows)}",
        "caches": rows,
        "cachesOmitted": omitted,
    }
    if used is not None:
        status.update(usedBytes=min(used, read.INT64_MAX), usedHuman=quantities.human_bytes(used))
    return status


def quota_condition(request: protocol.Request, spec: GrantSpec, decision: admission.Decision,
                    used: int | None, outcome: protocol.Outcome) -> None:
    if used is None:
        why = f"{messages.counted(decision.unresolved, 'unresolved ModelCache')} naming the grant" \
            if decision.unresolved else "the namespace's ModelCacheHydrations are not listed yet"
        outcome.condition("OverQuota", "Unknown", reasons.UsageUnknown,
                          reasons.with_remedy(f"usage cannot be counted: {why}", reasons.UsageUnknown))
    elif used > spec.quota:
        outcome.condition("OverQuota", True, reasons.OverQuota, reasons.with_remedy(
            f"the caches naming ModelCacheGrant {request.name} hold {quantities.human_bytes(used)} "
            f"({used} bytes), over the budget of {quantities.human_bytes(spec.quota)} "
            f"({spec.quota} bytes)", reasons.OverQuota))
    else:
        outcome.condition("OverQuota", False, reasons.WithinQuota,
                          f"{quantities.human_bytes(used)} used of {quantities.human_bytes(spec.quota)}")


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request)
    for key, requirement in requirements(request).items():
        outcome.require(key, requirement)
    caches = request.required.get(MODEL_CACHES_KEY)
    fleet = request.required.get(FLEET_CLUSTERS_KEY)
    if caches is None or fleet is None:
        # Not fetched yet: nothing is decided anew and the published decision stands.
        outcome.status = {"quotaBytes": spec.quota, "budgetHuman": quantities.human_bytes(spec.quota)}
        outcome.composite_ready = False
        return outcome
    named = naming(request, caches)
    decision = decide(request, spec, named, fleet)
    hydrations = request.required.get(HYDRATIONS_KEY)
    used = admission.used_bytes(hydrations, (row.cache.name for row in decision.rows)) \
        if hydrations is not None and not decision.unresolved else None
    outcome.status = figures(spec, decision, used)
    quota_condition(request, spec, decision, used, outcome)
    outcome.composite_ready = True
    return outcome
