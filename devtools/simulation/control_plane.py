"""The control plane: the API server and Crossplane in the simulation. It stores composites,
defaults them from their XRDs, runs each one's Composition pipeline (composite reconcile,
required resources answered from its XRs and Secrets), applies what comes back and deletes
what no longer does, in the foreground as Crossplane v2.2+ does, and sets the conditions
Crossplane's composite reconciler sets (Synced; on a failed compose, every condition the
pipeline did not report Unknown); deletion itself (finalizers, the garbage collector,
Usages) is deletion.py's. With realistic timing a composite is reconciled when Crossplane's
watches or its requeue would (`Watched`, timing.py). `step` is one round of it and of the
clusters behind it."""

from __future__ import annotations

import copy
import datetime
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fleetcache.apis import xrds
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation.api import Key, key_of
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.deletion import (
    BACKGROUND,
    COMPOSITE_FINALIZER,
    FOREGROUND,
    MANAGED_FINALIZER,
    ApiServer,
    collect_garbage,
    controller_uid,
    deleting,
    finalizers,
    reconcile_usages,
)
from fleetcache.devtools.simulation.provider import SYNCED, Provider, reconcile_error

# Reconciled in this order in each pass: a grant decides before the caches that obey it.
XR_KINDS = ("FleetCluster", "ModelCacheGrant", "ModelCache", "ModelCacheHydration",
            "ModelDeployment", "ModelReplica")


# internal/controller/apiextensions/composite/reconciler.go: errCompose, reasonFatalError.
COMPOSE_FAILED = "cannot compose resources"
FATAL_ERROR = "FatalError"
FATAL_ERROR_MESSAGE = "A fatal error occurred before the status of this condition could be determined."


@dataclass
class Event:
    kind: str
    name: str
    message: str


@dataclass
class Watched:
    """What Crossplane's composite controller knows of one composite between reconciles:
    what its watches saw at its last reconcile (itself and what it composed; on v2.4 also
    what its functions required, by `requirements`), the delayed requeue pending in its
    workqueue (client-go's delaying queue keeps the sooner of two), and its failures in a row."""

    own: str = ""
    required: str = ""
    requirements: dict[str, dict] = field(default_factory=dict)
    requeue_at: float | None = None
    failures: int = 0


@dataclass
class ControlPlane:
    """The API server and Crossplane: XRs, their composed resources, and reconciles."""

    pipeline: Callable[..., rendering.Rendered]
    compositions: dict[str, dict]
    schemas: dict
    provider: Provider
    xrs: dict[Key, dict] = field(default_factory=dict)
    composed: dict[Key, dict[str, dict]] = field(default_factory=dict)  # an XR's resourceRefs
    others: dict[Key, dict] = field(default_factory=dict)  # Secrets, ProviderConfigs, Usages, Objects
    events: list[Event] = field(default_factory=list)
    watched: dict[Key, Watched] = field(default_factory=dict)
    api: ApiServer = field(init=False)

    def __post_init__(self) -> None:
        self.api = ApiServer((self.xrs, self.others))

    def apply(self, resource: dict) -> None:
        """Create or update: the object as admitted, its status (the controllers') kept."""
        key = key_of(resource)
        table = self.xrs if resource["kind"] in XR_KINDS else self.others
        admitted = copy.deepcopy(resource)
        if table is self.xrs:
            admitted = xrds.admit(admitted, self.schemas)
        current = table.get(key)
        admitted = self.api.admit(admitted, current)
        if current is not None and "status" in current:
            admitted["status"] = current["status"]
        table[key] = admitted

    def secrets(self) -> list[dict]:
        return [r for r in self.others.values() if r.get("kind") == "Secret"]

    def required_pool(self) -> list[dict]:
        return list(self.xrs.values()) + self.secrets()

    def delete(self, key: Key, propagation: str = BACKGROUND) -> str:
        """`kubectl delete` (`--cascade=foreground` for Foreground): the Usage webhook's
        refusal, or "" when the API server accepted it (deletion.py takes it from there)."""
        return self.api.delete(key, propagation)

    def reconcile_all(self) -> None:
        """One pass: the garbage collector, then every composite that is due, parents before
        children, so a composite created in this pass (a hydration, a replica) is reconciled
        in it too, as Crossplane's watch would, then the Usage controller and
        provider-kubernetes' deleted Objects."""
        collect_garbage(self.api)
        for kind in XR_KINDS:
            for key in sorted(k for k in self.xrs if k[0] == kind):
                if key in self.xrs:
                    observed = self.observed_for(key)
                    if self.due(key, observed):
                        self.reconcile(key, observed)
        reconcile_usages(self.api)
        self.finalize_objects()
        for key in [k for k in self.composed if k not in self.xrs]:
            del self.composed[key]
        for key in [k for k in self.watched if k not in self.xrs]:
            del self.watched[key]

    def due(self, key: Key, observed: list[dict]) -> bool:
        """Without realistic timing, every round. With it, when Crossplane would reconcile:
        the composite or what it composed changed since its last reconcile (its own writes
        included: their watch event reconciles it once more), on v2.4 what it required
        changed, or its requeue (TTL, backoff) came."""
        timing = self.provider.timing
        watched = self.watched.get(key)
        if timing is None or watched is None:
            return True
        if self.own_view(key, observed) != watched.own:
            return True
        if timing.watches_required and self.required_view(watched) != watched.required:
            return True
        return watched.requeue_at is not None and timing.now() >= watched.requeue_at

    def own_view(self, key: Key, observed: list[dict]) -> str:
        """The composite and its composed resources as the watches see them."""
        return json.dumps([self.xrs[key], observed], sort_keys=True, default=str)

    def required_view(self, watched: Watched) -> str:
        """What the composite's last requirements select now."""
        return json.dumps(rendering.answer_selectors(watched.requirements, self.required_pool()),
                          sort_keys=True, default=str)

    def requeue(self, key: Key, seen: str, rendered: rendering.Rendered | None) -> None:
        """What the reconcile left in the workqueue: nothing without realistic timing; after a
        success `RequeueAfter` the TTL (none without one: realtime compositions disable
        polling), after a failure the rate limiter's backoff; the sooner pending one stays."""
        timing = self.provider.timing
        if timing is None:
            return
        watched = self.watched.setdefault(key, Watched())
        now = timing.now()
        pending = watched.requeue_at if watched.requeue_at is not None and watched.requeue_at > now \
            else None
        watched.own = seen
        if rendered is None or rendered.fatal:
            watched.failures += 1
            after: float | None = timing.composite_backoff(watched.failures)
        else:
            watched.failures = 0
            watched.requirements = rendered.requirements
            after = timing.ttl_after(rendered.ttl) if rendered.ttl > 0 else None
        if timing.watches_required:
            watched.required = self.required_view(watched)
        candidates = [t for t in (pending, None if after is None else now + after) if t is not None]
        watched.requeue_at = min(candidates) if candidates else None

    def observed_for(self, key: Key) -> list[dict]:
        """The composed resources that exist, as the XR's resourceRefs find them."""
        observed = []
        for resource_name, resource in self.composed.get(key, {}).items():
            stored = self.api.get(key_of(resource))
            if stored is None:
                continue
            if stored["kind"] == "Object" and not deleting(stored):
                stored["status"] = self.provider.observe(stored)["status"]
            current = copy.deepcopy(stored)
            current.setdefault("metadata", {}).setdefault("annotations", {})[
                rendering.RESOURCE_NAME_ANNOTATION] = resource_name
            observed.append(current)
        return observed

    def reconcile(self, key: Key, observed: list[dict] | None = None) -> None:
        """Crossplane's composite reconciler: a deleted XR only loses its finalizer (the
        garbage collector deletes what it composed); a live one takes the finalizer, runs its
        pipeline, applies what it desires, deletes in the foreground what it composed and no
        longer desires, and is Synced. A fatal result or a step that fails leaves everything
        composed as it is and the XR as `compose_failed` says."""
        xr = self.xrs[key]
        observed = self.observed_for(key) if observed is None else observed
        seen = self.own_view(key, observed) if self.provider.timing else ""
        if deleting(xr):
            self.api.remove_finalizer(key, COMPOSITE_FINALIZER)
            if key in self.watched:
                self.watched[key].own = seen
            return
        self.api.add_finalizer(xr, COMPOSITE_FINALIZER)
        try:
            rendered = self.pipeline(xr, self.compositions[key[0]], observed, self.required_pool())
        except rendering.PipelineError as err:
            self.compose_failed(xr, str(err), [])
            self.requeue(key, seen, None)
            return
        self.requeue(key, seen, rendered)
        if rendered.fatal:
            self.compose_failed(xr, rendered.failure, rendered.conditions)
            return
        xr["status"] = with_condition(rendered.composite.get("status", {}), SYNCED)
        desired = {}
        for resource in rendered.resources:
            name = resource["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            desired[name] = resource
            self.apply_composed(resource)
        for name, gone in self.composed.get(key, {}).items():
            if name not in desired or key_of(desired[name]) != key_of(gone):
                self.delete_composed(xr, gone)
        self.composed[key] = desired

    def compose_failed(self, xr: dict, error: str, reported: list[dict]) -> None:
        """The reconciler when Compose fails (reconciler.go; the same from v2.0 to v2.4):
        Synced=False with the error, the conditions the pipeline reported before it stopped
        set, every other condition but Crossplane's own Unknown with reason FatalError, and
        nothing else: Ready and the status fields stay as they were. A Warning event says it."""
        error = f"{COMPOSE_FAILED}: {error}"
        status = xr.setdefault("status", {})
        now = self.provider.timing.clock.now() if self.provider.timing else datetime.datetime.now(datetime.UTC)
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        conditions.update({c["type"]: rendering.stamped(c, conditions.get(c["type"]), now) for c in reported})
        told = {c["type"] for c in reported}
        for kind in sorted(set(conditions) - told - rendering.SYSTEM_CONDITION_TYPES):
            conditions[kind] = rendering.stamped({"type": kind, "status": "Unknown", "reason": FATAL_ERROR,
                                                  "message": FATAL_ERROR_MESSAGE}, conditions[kind], now)
        status["conditions"] = list(conditions.values())
        xr["status"] = with_condition(status, reconcile_error(error))
        self.events.append(Event(xr["kind"], xr["metadata"]["name"], error))

    def apply_composed(self, resource: dict) -> None:
        """An Object is provider-kubernetes': it takes the managed finalizer when created and
        is applied to its cluster while it is not being deleted."""
        self.apply(resource)
        stored = self.others.get(key_of(resource), {})
        if resource["kind"] == "Object" and not deleting(stored):
            self.api.add_finalizer(stored, MANAGED_FINALIZER)
            self.provider.apply(resource)

    def delete_composed(self, xr: dict, resource: dict) -> None:
        """GarbageCollectComposedResources: only what this XR controls, its composite label
        removed first, deleted in the foreground."""
        key = key_of(resource)
        current = self.api.get(key)
        if current is None or controller_uid(current) != xr["metadata"]["uid"]:
            return
        (current["metadata"].get("labels") or {}).pop(rendering.COMPOSITE_LABEL, None)
        self.api.delete(key, FOREGROUND)

    def finalize_objects(self) -> None:
        """provider-kubernetes' managed reconciler on a deleted Object: once its finalizer is
        the only one left (crossplane-runtime waits for the others), the remote object is
        deleted under the management policies, and the finalizer removed once it is gone
        (`Provider.delete`: not while its cluster is unreachable or a pod holds its PVC)."""
        for key in [k for k in sorted(self.others) if k[0] == "Object"]:
            obj = self.others[key]
            if deleting(obj) and finalizers(obj) == [MANAGED_FINALIZER] and self.provider.delete(obj):
                self.api.remove_finalizer(key, MANAGED_FINALIZER)

    def of_kind(self, kind: str) -> list[dict]:
        return [xr for (k, _, _), xr in sorted(self.xrs.items()) if k == kind]


def with_condition(status: dict, condition: dict) -> dict:
    """`status` with `condition` set in place of the one of its type, conditions by type."""
    kept = [c for c in status.get("conditions", []) if c["type"] != condition["type"]]
    return {**status, "conditions": sorted([*kept, condition], key=lambda c: c["type"])}


def step(control: ControlPlane, clusters: Iterable[Cluster]) -> float:
    """One round: every composite reconciles, then every cluster's controllers act.
    Returns the monotonic time the clusters acted at."""
    control.reconcile_all()
    now = time.monotonic()
    for cluster in clusters:
        cluster.tick(now)
    return now
