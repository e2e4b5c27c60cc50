"""The control plane: the API server and Crossplane in the simulation. It stores composites,
defaults them from their XRDs, runs each one's Composition pipeline (composite reconcile,
required resources answered from its XRs and Secrets), applies what comes back, deletes what
no longer does (garbage collection) and refuses deletions a Usage protects; `step` is one
round of it and of the clusters behind it."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fleetcache.apis import xrds
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation.api import Key, key_of
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.provider import Provider
from fleetcache.functions import read

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
    composed: dict[Key, dict[str, dict]] = field(default_factory=dict)
    others: dict[Key, dict] = field(default_factory=dict)  # Secrets, ProviderConfigs
    events: list[Event] = field(default_factory=list)
    deleting: set[Key] = field(default_factory=set)  # refused by a Usage, replayed later

    def apply(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] in XR_KINDS:
            current = self.xrs.get(key)
            admitted = xrds.admit(copy.deepcopy(resource), self.schemas)
            if current is not None:
                admitted["status"] = current.get("status", {})
            self.xrs[key] = admitted
        else:
            self.others[key] = copy.deepcopy(resource)

    def secrets(self) -> list[dict]:
        return [r for r in self.others.values() if r.get("kind") == "Secret"]

    def required_pool(self) -> list[dict]:
        return list(self.xrs.values()) + self.secrets()

    def delete(self, key: Key) -> str:
        """`kubectl delete` of a composite. As Crossplane's Usage webhook does, it is
        refused while a Usage is `of` it (the refusal is returned, "" when deleted); with
        replayDeletion the refused deletion is retried at every reconcile until it goes."""
        holders = sorted(k[2] for k, usage in self.others.items() if k[0] == "Usage"
                         and read.get_path(usage, "spec.of.kind") == key[0]
                         and read.get_path(usage, "spec.of.resourceRef.name") == key[2]
                         and k[1] == key[1])
        if holders:
            self.deleting.add(key)
            return (f"This resource is in-use by {len(holders)} usage(s), including the Usage "
                    f"{holders[0]!r}")
        self.deleting.discard(key)
        self.xrs.pop(key, None)
        for child in self.composed.pop(key, {}).values():
            self.delete_composed(child)
        return ""

    def reconcile_all(self) -> None:
        """One pass, parents before children, so a composite created in this pass (a
        hydration, a replica) is reconciled in it too, as Crossplane's watch would."""
        for key in sorted(self.deleting):
            self.delete(key)
        for kind in XR_KINDS:
            for key in sorted(k for k in self.xrs if k[0] == kind):
                if key in self.xrs:
                    self.reconcile(key)

    def observed_for(self, key: Key) -> list[dict]:
        observed = []
        for resource_name, resource in self.composed.get(key, {}).items():
            if resource["kind"] in XR_KINDS:
                current = self.xrs.get(key_of(resource), resource)
            elif resource["kind"] == "Object":
                current = self.provider.observe(resource)
            else:
                current = self.others.get(key_of(resource), resource)
            current = copy.deepcopy(current)
            current.setdefault("metadata", {}).setdefault("annotations", {})[
                rendering.RESOURCE_NAME_ANNOTATION] = resource_name
            observed.append(current)
        return observed

    def reconcile(self, key: Key) -> None:
        xr = self.xrs[key]
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
                self.delete_composed(gone)
        self.composed[key] = desired

    def apply_composed(self, resource: dict) -> None:
        if resource["kind"] == "Object":
            self.provider.apply(resource)
        else:
            self.apply(resource)

    def delete_composed(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] == "Object":
            self.provider.delete(resource)
        elif resource["kind"] in XR_KINDS:
            self.xrs.pop(key, None)  # a composed composite: deleted with its parent
            for child in self.composed.pop(key, {}).values():
                self.delete_composed(child)
        else:
            self.others.pop(key, None)

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
