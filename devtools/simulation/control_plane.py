"""The control plane: the API server and Crossplane in the simulation. It stores composites,
defaults them from their XRDs, runs each one's Composition pipeline (composite reconcile,
required resources answered from its XRs and Secrets), applies what comes back and deletes
what no longer does, in the foreground as Crossplane v2.2+ does; deletion itself (finalizers,
the garbage collector, Usages) is deletion.py's. `step` is one round of it and of the
clusters behind it."""

from __future__ import annotations

import copy
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
from fleetcache.devtools.simulation.provider import Provider

# Reconciled in this order in each pass: a grant decides before the caches that obey it.
XR_KINDS = ("FleetCluster", "ModelCacheGrant", "ModelCache", "ModelCacheHydration",
            "ModelDeployment", "ModelReplica")


@dataclass
class Event:
    kind: str
    name: str
    message: str


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
        """One pass: the garbage collector, then every composite, parents before children,
        so a composite created in this pass (a hydration, a replica) is reconciled in it too,
        as Crossplane's watch would, then the Usage controller and provider-kubernetes'
        deleted Objects."""
        collect_garbage(self.api)
        for kind in XR_KINDS:
            for key in sorted(k for k in self.xrs if k[0] == kind):
                if key in self.xrs:
                    self.reconcile(key)
        reconcile_usages(self.api)
        self.finalize_objects()
        for key in [k for k in self.composed if k not in self.xrs]:
            del self.composed[key]

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

    def reconcile(self, key: Key) -> None:
        """Crossplane's composite reconciler: a deleted XR only loses its finalizer (the
        garbage collector deletes what it composed); a live one takes the finalizer, runs its
        pipeline, applies what it desires and deletes in the foreground what it composed and
        no longer desires."""
        xr = self.xrs[key]
        if deleting(xr):
            self.api.remove_finalizer(key, COMPOSITE_FINALIZER)
            return
        self.api.add_finalizer(xr, COMPOSITE_FINALIZER)
        rendered = self.pipeline(xr, self.compositions[key[0]], self.observed_for(key),
                                 self.required_pool())
        if rendered.fatal:
            self.events.append(Event(key[0], key[2], rendered.fatal[0]))
            return
        xr["status"] = rendered.composite.get("status", {})
        desired = {}
        for resource in rendered.resources:
            name = resource["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            desired[name] = resource
            self.apply_composed(resource)
        for name, gone in self.composed.get(key, {}).items():
            if name not in desired or key_of(desired[name]) != key_of(gone):
                self.delete_composed(xr, gone)
        self.composed[key] = desired

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


def step(control: ControlPlane, clusters: Iterable[Cluster]) -> float:
    """One round: every composite reconciles, then every cluster's controllers act.
    Returns the monotonic time the clusters acted at."""
    control.reconcile_all()
    now = time.monotonic()
    for cluster in clusters:
        cluster.tick(now)
    return now
