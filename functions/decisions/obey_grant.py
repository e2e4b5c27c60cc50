"""How a ModelCache obeys its ModelCacheGrant. The grant's composer is the one writer of
admission (decisions/admission.py decides); the cache reads its row in the grant's
status.caches and fans out only what that row admitted at this very spec and resolved
content (`admission_of`). Anything else composes nothing new and keeps what the grant
admitted before."""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache import messages, reasons
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol, quantities, read
from fleetcache.functions.decisions import admission
from fleetcache.functions.views import grant as grant_view
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.model_cache import read_resolved
from fleetcache.functions.views.placement import Target

ADMITTED = reasons.GrantAdmitted
REFUSALS = (reasons.OutsideGrant, reasons.PinningNotAllowed, reasons.PoolNotGranted,
            reasons.OverQuota)  # the grant's, with its message


@dataclass(frozen=True)
class Admission:
    """What the grant decided about this cache, as this composer obeys it: fan out only
    when `admitted`; otherwise compose nothing new and keep what exists."""

    reason: str  # ADMITTED, GrantNotFound, AwaitingGrant, or one of REFUSALS
    message: str

    @property
    def admitted(self) -> bool:
        return self.reason == ADMITTED


def grant_requirement(namespace: str, grant: str) -> protocol.Requirement:
    return protocol.Requirement(naming.API_VERSION, "ModelCacheGrant", match_name=grant,
                                namespace=namespace)


def grant_not_found(namespace: str, grant: str) -> Admission:
    return Admission(reasons.GrantNotFound, reasons.with_remedy(
        f"ModelCacheGrant {messages.clipped(grant, 253)} (spec.grantRef.name) does not exist in "
        f"namespace {namespace}", reasons.GrantNotFound))


def as_admitted(request: protocol.Request, resolved: dict | None) -> dict:
    """The cache as the grant weighs it: its spec, and the content it would fan out (the
    resolution of this call, else the latched one), so content the grant never counted
    is never fanned out under an admission of other content."""
    shown = resolved or read_resolved(request.status.get("resolved")) or {}
    return {**request.composite,
            "status": {**request.status,
                       "resolved": {"manifestDigest": shown.get("manifestDigest", "")}}}


def outside_grant(grant: dict, targets: list[Target], fleet: list[dict]) -> list[str]:
    """Existing targets outside the grant's spec.clusters now (all of them when those
    cannot be read): the grant decided over the fleet as it was, and a cluster that has since
    come to match the placement waits for its next decision instead of being reached at
    once. A named cluster that does not exist cannot be reached, so it is not counted."""
    views = (FleetClusterView.of(r) for r in fleet if isinstance(r, dict))
    try:
        covered = admission.Placements(views).clusters(read.get_path(grant, "spec.clusters"),
                                                        "spec.clusters")
    except specs.InputError:
        covered = frozenset()
    return [t.name for t in targets if t.cluster is not None and t.name not in covered]


def admission_of(request: protocol.Request, grant_name: str, grant: dict, resolved: dict | None,
                 targets: list[Target], fleet: list[dict], has_copies: bool) -> Admission:
    """Admitted when the grant's row for this cache says admitted at its digest. A refused
    row shows the grant's reason and message, also when it still carries this digest (a
    latch: the grant refused the same spec again, e.g. its selector now matches clusters
    outside the grant, so what exists keeps serving and nothing new is composed); no row,
    or an admission at another digest, waits for the grant's next decision. has_copies: the
    cache has hydrations (the copies an earlier admission let it compose)."""
    name = messages.clipped(grant_name, 253)
    row = grant_view.cache_rows(read.get_path(grant, "status.caches")).get(request.name)
    digest = grant_view.admission_digest(as_admitted(request, resolved))
    if row is None:
        return Admission(reasons.AwaitingGrant, f"ModelCacheGrant {name} has not decided on this "
                                                "cache yet; nothing new is composed until it does")
    admitted_here = row.admitted and row.admitted_digest == digest
    outside = outside_grant(grant, targets, fleet)
    if admitted_here and outside:
        return Admission(reasons.AwaitingGrant, f"{messages.named(outside)} came to match spec.placement "
                                                f"outside ModelCacheGrant {name}'s clusters since it "
                                                "decided; nothing new is composed until it decides "
                                                "again")
    if admitted_here and len(targets) > row.clusters:
        return Admission(reasons.AwaitingGrant, f"spec.placement matches {messages.counted(len(targets), 'cluster')}, "
                                                f"more than the {row.clusters} ModelCacheGrant {name} "
                                                "counted when it decided; nothing new is composed "
                                                "until it decides again")
    if admitted_here:
        each = " each" if row.clusters != 1 else ""  # a row's bytes are one copy's
        return Admission(ADMITTED, f"ModelCacheGrant {name} admits this cache on "
                                   f"{messages.counted(row.clusters, 'cluster')} "
                                   f"({quantities.human_bytes(row.bytes)}{each})")
    holds = bool(row.admitted_digest) and has_copies
    kept = "; the copies it admitted before keep serving" if holds else ""
    if not row.admitted and row.reason in REFUSALS:
        said = messages.clipped(row.message, messages.MESSAGE_LIMIT // 2).rstrip(".")
        return Admission(row.reason, reasons.with_remedy(
            f"ModelCacheGrant {name} refuses this spec: {said or row.reason}{kept}", row.reason))
    return Admission(reasons.AwaitingGrant, f"ModelCacheGrant {name} has not decided on this spec "
                                            f"(or its resolved content) yet{kept}")
