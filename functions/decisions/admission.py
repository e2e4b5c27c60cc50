"""Budget admission: which ModelCaches a ModelCacheGrant admits, and what its namespace holds.

One writer (DESIGN §7): compose-model-cache-grant reads every ModelCache of its namespace
that names it, turns each into a `Cache`, asks `decide` and publishes the rows in
status.caches; compose-model-cache fans out only when its row is admitted at its current
`admission_digest`. `decide` is pure and deterministic: the same caches in any order, with
the same previous rows, give the same rows.

- order: creation time, then name; caches admitted before at their current digest
  (incumbents) are decided first, so an earlier cache's edit never displaces them;
- a cache is refused when a target cluster is outside the grant (OutsideGrant), when it
  pins without the grant's allowPinned (PinningNotAllowed), when its tier is Node and its
  spec.storage.nodePool is not one the grant's spec.nodePools names (PoolNotGranted), or
  when the projection with it passes the budget (OverQuota);
- an existing volume (spec.source.volume) is the tenant's own claim: it takes nothing from
  the budget, projected or used (capacity.allocates, as on the FleetCluster);
- projection: per distinct content (manifest digest), the bytes a target's volume holds
  times the widest target-cluster count asked of it among what is admitted; a cache not
  resolved yet adds nothing (it is admitted to resolve; `unresolved` counts what the
  projection cannot see). A volume holds the resolved bytes; with spec.rollout.waves it
  holds at the rollout's peak the previous commit too (`previous_commit_bytes`); a target
  that mounts the cache's OCI artifact as an image volume holds none (`image_delivery`);
- latch: a refused cache that was admitted before keeps its admittedDigest and the
  footprint admitted with it, which stays counted (that footprint keeps serving).

`used_bytes` is the measured figure: each content at its full size for every cluster
holding a hydration of it, whatever its state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.apis import specs
from fleetcache.functions import quantities, read
from fleetcache.functions.decisions import capacity, image_delivery
from fleetcache.functions.k8s import selectors
from fleetcache.functions.views import grant as grant_view
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.grant import CacheRow, Footprint, admission_digest
from fleetcache.functions.views.model_cache import read_resolved, volume_bytes
from fleetcache.functions.views.served_model import mountable_artifact

LISTED = 500  # status.caches rows: the XRD's maxItems (about 350 kB of status at most)
NAMED = 5  # clusters a message spells out
ADMITTED = "Admitted"


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Previous:
    """The row the grant published for a cache last time."""

    admitted: bool
    digest: str  # admittedDigest ("" when never admitted)
    footprint: Footprint | None

    @classmethod
    def rows(cls, caches: Any) -> dict[str, Previous]:
        """The rows of the grant's status.caches as it published them last time."""
        return {name: cls(row.admitted and bool(row.admitted_digest), row.admitted_digest, row.footprint)
                for name, row in grant_view.cache_rows(caches).items()}


@dataclass(frozen=True)
class Grant:
    name: str
    clusters: frozenset[str]  # the FleetClusters it covers
    quota: int
    allow_pinned: bool
    pools: frozenset[str] = frozenset({grant_view.DEFAULT_POOL})  # spec.nodePools as granted


@dataclass(frozen=True)
class Cache:
    """One ModelCache naming the grant, as the decision sees it."""

    name: str
    created: str  # metadata.creationTimestamp as written ("" if absent)
    digest: str  # admission_digest
    targets: frozenset[str] | None  # None: the placement cannot be evaluated
    pinned: bool
    content: str  # status.resolved.manifestDigest; "" until resolved
    commit: str
    bytes: int
    previous_bytes: int = 0  # of the previous commit, held beside it at a rollout's peak
    image_targets: frozenset[str] = frozenset()  # targets that mount its OCI artifact: no volume
    pool: str = ""  # the node pool it fills (grant_view.node_pool); "": a Volume-tier cache

    @property
    def volume_targets(self) -> int:
        """The targets whose volume holds the cache (the others mount its artifact)."""
        return len((self.targets or frozenset()) - self.image_targets)

    @property
    def peak_bytes(self) -> int:
        """What each target's volume holds at most: the footprint's bytes."""
        return self.bytes + self.previous_bytes


class Placements:
    """The clusters a placement names, over one list of FleetClusters; each distinct
    placement is evaluated once (a namespace's caches share few selectors)."""

    def __init__(self, fleet: Iterable[FleetClusterView]):
        self.fleet = [view for view in fleet if view.name]
        self.known: dict[str, frozenset[str] | specs.InputError] = {}
        self.image_clusters = frozenset(view.name for view in self.fleet if view.image_volumes)

    def clusters(self, placement: Any, field_path: str) -> frozenset[str]:
        """clusterNames as listed, or the FleetClusters a clusterSelector matches;
        InputError when it can be evaluated neither way."""
        key = f"{field_path}\x00" + json.dumps(placement, sort_keys=True, default=str)
        if key not in self.known:
            try:
                self.known[key] = self.evaluate(placement, field_path)
            except specs.InputError as err:
                self.known[key] = err
        found = self.known[key]
        if isinstance(found, specs.InputError):
            raise found
        return found

    def evaluate(self, placement: Any, field_path: str) -> frozenset[str]:
        if not isinstance(placement, Mapping):
            raise specs.InputError(f"{field_path}: must be an object")
        names = placement.get("clusterNames")
        if names is not None:
            if not isinstance(names, list) or not all(read.name_or_empty(n) for n in names):
                raise specs.InputError(f"{field_path}.clusterNames: must be a list of cluster "
                                     "names")
            return frozenset(names)
        selector = placement.get("clusterSelector")
        return frozenset(view.name for view in self.fleet if selectors.selector_matches(
            selector, view.labels, f"{field_path}.clusterSelector"))


def cache_of(resource: Mapping, placements: Placements) -> Cache:
    """A ModelCache as the decision sees it. Tolerant: a placement that cannot be evaluated
    is refused (InvalidSpec), an unreadable resolution reads as not resolved."""
    try:
        targets: frozenset[str] | None = placements.clusters(
            read.get_path(resource, "spec.placement"), "spec.placement")
    except specs.InputError:
        targets = None
    resolved = read.mapping_at(resource, "status.resolved")
    content, commit = resolved.get("manifestDigest"), resolved.get("commit")
    created = read.get_path(resource, "metadata.creationTimestamp")
    allocates = capacity.allocates(read.get_path(resource, "spec.source"))
    return Cache(
        name=read.name_or_empty(read.get_path(resource, "metadata.name")),
        created=created if isinstance(created, str) else "",
        digest=admission_digest(resource),
        targets=targets,
        pinned=read.get_path(resource, "spec.retention.pinned") is True,
        content=messages.clipped(content, 128) if isinstance(content, str) else "",
        commit=commit if shapes.is_resolved_commit(commit) else "",
        bytes=max(0, read.as_int(resolved.get("bytes"))) if allocates else 0,
        previous_bytes=previous_commit_bytes(resource) if allocates else 0,
        image_targets=(targets or frozenset()) & placements.image_clusters
        if mountable_artifact(resource) is not None else frozenset(),
        pool=grant_view.node_pool(resource),
    )


def previous_commit_bytes(resource: Mapping) -> int:
    """What a target's volume holds besides the resolved commit at the peak of a rollout in
    waves: the largest part of a commit the fleet serves (status.resolved.compared) that
    the resolved one does not share. Prune keeps the previous commit on every started wave
    until the rollout is Complete plus its grace (spec.keepCommits), so once the last wave
    starts every target holds both. 0 without waves (a cache without waves is projected as
    before), before the resolve, or with nothing compared (a first rollout)."""
    waves = read.get_path(resource, "spec.rollout.waves")
    if not (isinstance(waves, list) and waves):
        return 0
    latched = read.mapping_at(resource, "status.resolved")  # its pinned manifest left unread
    resolved = read_resolved({key: latched.get(key) for key in ("commit", "bytes", "compared")})
    if resolved is None:
        return 0
    return max((volume_bytes(resolved, row["commit"]) for row in resolved["compared"]),
               default=resolved["bytes"]) - resolved["bytes"]


# --- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    cache: Cache
    admitted: bool
    reason: str
    message: str
    admitted_digest: str
    footprint: Footprint | None

    def as_status(self) -> dict:
        return CacheRow(self.cache.name, self.cache.commit, self.cache.content, self.cache.bytes,
                        len(self.cache.targets or ()), self.admitted, self.reason, self.message,
                        self.admitted_digest, self.footprint).as_status()


@dataclass(frozen=True)
class Decision:
    rows: tuple[Row, ...]  # in admission order (creation time, then name)
    projected: int
    unresolved: int  # caches naming the grant that have not resolved

    @property
    def admitted(self) -> int:
        return sum(1 for row in self.rows if row.admitted)


class Ledger:
    """The footprints holding room, by cache name, and their projection (per distinct
    content, its bytes times the widest cluster count asked of it); kept per content, so
    trying a footprint costs only the caches that share its content."""

    def __init__(self, footprints: Mapping[str, Footprint]):
        self.by_name: dict[str, Footprint] = {}
        self.by_content: dict[str, dict[str, Footprint]] = {}
        self.total = 0
        for name, footprint in footprints.items():
            self.put(name, footprint)

    @staticmethod
    def cost(members: Mapping[str, Footprint]) -> int:
        return max((f.bytes for f in members.values()), default=0) * \
            max((f.clusters for f in members.values()), default=0)

    def members_with(self, content: str, name: str, footprint: Footprint | None
                     ) -> dict[str, Footprint]:
        members = {k: v for k, v in self.by_content.get(content, {}).items() if k != name}
        if footprint is not None and footprint.content == content:
            members[name] = footprint
        return members

    def trial(self, name: str, footprint: Footprint | None) -> int:
        """The projection if `name` held `footprint` instead of what it holds."""
        held = self.by_name.get(name)
        contents = {f.content for f in (held, footprint) if f is not None}
        return self.total + sum(self.cost(self.members_with(c, name, footprint))
                                - self.cost(self.by_content.get(c, {})) for c in contents)

    def put(self, name: str, footprint: Footprint | None) -> None:
        self.total = self.trial(name, footprint)
        held = self.by_name.pop(name, None)
        for content in {f.content for f in (held, footprint) if f is not None}:
            self.by_content[content] = self.members_with(content, name, footprint)
        if footprint is not None:
            self.by_name[name] = footprint


def decide(grant: Grant, caches: Iterable[Cache], previous: Mapping[str, Previous]
           ) -> Decision:
    ordered = sorted({c.name: c for c in caches if c.name}.values(),
                     key=lambda c: (c.created, c.name))
    # What already holds room: every footprint admitted before, whatever happens to its edit.
    held = [(c.name, previous[c.name].footprint) for c in ordered
            if c.name in previous and previous[c.name].digest]
    ledger = Ledger({name: footprint for name, footprint in held if footprint is not None})
    incumbents = {c.name for c in ordered if c.name in previous and previous[c.name].admitted
                  and previous[c.name].digest == c.digest}
    rows: dict[str, Row] = {}
    for cache in sorted(ordered, key=lambda c: c.name not in incumbents):  # stable: in order
        before = previous.get(cache.name, Previous(False, "", None))
        reason, message = refusal(grant, cache)
        if not reason:
            footprint = Footprint(cache.content, cache.peak_bytes, cache.volume_targets) \
                if cache.content else before.footprint
            needed = ledger.trial(cache.name, footprint)
            if needed <= grant.quota:
                ledger.put(cache.name, footprint)
                rows[cache.name] = Row(cache, True, ADMITTED, admitted_message(
                    grant, cache, needed), cache.digest, footprint)
                continue
            reason, message = reasons.OverQuota, over_quota_message(grant, cache, needed,
                                                              ledger.total)
        if before.digest and before.footprint is not None:  # it fanned out: copies exist
            message += f"; the spec admitted earlier ({before.digest}) keeps serving"
        rows[cache.name] = Row(cache, False, reason, reasons.with_remedy(message, reason),
                               before.digest, before.footprint if before.digest else None)
    return Decision(rows=tuple(rows[c.name] for c in ordered), projected=ledger.total,
                    unresolved=sum(1 for c in ordered if not c.content))


def refusal(grant: Grant, cache: Cache) -> tuple[str, str]:
    """("", "") when the cache has the shape the grant allows, else (reason, message)."""
    if cache.targets is None:
        return reasons.InvalidSpec, "spec.placement cannot be evaluated over the FleetClusters"
    outside = sorted(cache.targets - grant.clusters)
    if outside:
        return reasons.OutsideGrant, f"{messages.counted(len(outside), 'target cluster')} outside " \
                               f"ModelCacheGrant {grant.name}: {messages.named(outside, NAMED, each=None)}"
    if cache.pinned and not grant.allow_pinned:
        return reasons.PinningNotAllowed, f"spec.retention.pinned is true but ModelCacheGrant " \
                                    f"{grant.name} does not set spec.allowPinned"
    if cache.pool and cache.pool not in grant.pools:
        granted = ", ".join(sorted(grant.pools)) or "none"
        return reasons.PoolNotGranted, f"spec.storage.nodePool {cache.pool} is not a pool " \
                                 f"ModelCacheGrant {grant.name} grants (spec.nodePools: {granted})"
    return "", ""


def admitted_message(grant: Grant, cache: Cache, needed: int) -> str:
    if not cache.content:
        return f"admitted to resolve; its size is not known yet, so the projection " \
               f"({quantities.human_bytes(needed)} of {quantities.human_bytes(grant.quota)}) does not count it"
    return f"{per_cluster(cache)} on {messages.counted(cache.volume_targets, 'cluster')} fits: " \
           f"the projection is {quantities.human_bytes(needed)} of {quantities.human_bytes(grant.quota)}"


def per_cluster(cache: Cache) -> str:
    """The bytes a target's volume holds, and at a rollout's peak when that holds more."""
    if not cache.previous_bytes:
        return quantities.human_bytes(cache.bytes)
    return f"{quantities.human_bytes(cache.bytes)} ({quantities.human_bytes(cache.peak_bytes)} " \
           f"with the previous commit, at the peak of its rollout in waves)"


def over_quota_message(grant: Grant, cache: Cache, needed: int, current: int) -> str:
    return f"{per_cluster(cache)} on {messages.counted(cache.volume_targets, 'cluster')} would " \
           f"make the projection {quantities.human_bytes(needed)} ({needed} bytes), over the " \
           f"budget of {quantities.human_bytes(grant.quota)} ({grant.quota} bytes) of " \
           f"ModelCacheGrant {grant.name}; {quantities.human_bytes(max(0, grant.quota - current))} " \
           f"is left"


def limited(decision: Decision) -> tuple[list[dict], int]:
    """The rows to publish (at most LISTED, in admission order) and how many are left out."""
    rows = [row.as_status() for row in decision.rows]
    return rows[:LISTED], max(0, len(rows) - LISTED)


# --- usage ----------------------------------------------------------------------------------


def used_bytes(hydrations: Iterable[Mapping], caches: Iterable[str]) -> int:
    """Each distinct content at its full size for every cluster holding a hydration of it,
    over the hydrations of the named caches (one namespace), whatever their state, but for
    those that warm nothing (their cluster mounts the cache's artifact)."""
    names = set(caches)
    held: dict[tuple[str, str], int] = {}
    for hydration in hydrations:
        spec = read.mapping_at(hydration, "spec")
        if not isinstance(spec.get("modelCacheName"), str) or spec["modelCacheName"] not in names \
                or not capacity.allocates(spec.get("source")) or image_delivery.served_by_image(hydration):
            continue
        content = spec.get("manifestDigest")
        key = content if isinstance(content, str) and content else \
            f"hydration:{read.get_path(hydration, 'metadata.name')}"
        cluster = str(spec.get("clusterName"))
        size = max(0, read.as_int(spec.get("bytes")))
        held[(key, cluster)] = max(held.get((key, cluster), 0), size)
    return sum(held.values())
