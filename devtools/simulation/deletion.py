"""Deletion on the simulated control plane, after upstream (design/simulation.md cites the
files): what the API server does with a DELETE (a deletionTimestamp, the `foregroundDeletion`
finalizer of a foreground one, the object gone once its last finalizer is), Crossplane's
Usage webhook that refuses one, Kubernetes' garbage collector (owner references,
`blockOwnerDeletion`, foreground and background propagation) and Crossplane's Usage
controller (its finalizer, the in-use label, waiting for `by`, replaying a refused
deletion). `ApiServer` works on the control plane's own tables, so a composite is gone
from `ControlPlane.xrs` exactly when the API server would have removed it."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from fleetcache.devtools.render import COMPOSITE_LABEL
from fleetcache.devtools.simulation.api import Key, key_of

FOREGROUND, BACKGROUND = "Foreground", "Background"
DELETE_DEPENDENTS = "foregroundDeletion"  # metav1.FinalizerDeleteDependents
COMPOSITE_FINALIZER = "composite.apiextensions.crossplane.io"
USAGE_FINALIZER = "usage.apiextensions.crossplane.io"
MANAGED_FINALIZER = "finalizer.managedresource.crossplane.io"
IN_USE_LABEL = "crossplane.io/in-use"
DELETION_ATTEMPT = "usage.crossplane.io/deletion-attempt-with-policy"


def meta(obj: dict) -> dict:
    return obj.setdefault("metadata", {})


def deleting(obj: dict) -> bool:
    return "deletionTimestamp" in meta(obj)


def finalizers(obj: dict) -> list[str]:
    return list(meta(obj).get("finalizers") or [])


def owner_references(obj: dict) -> list[dict]:
    return list(meta(obj).get("ownerReferences") or [])


def controller_uid(obj: dict) -> str:
    return next((ref.get("uid", "") for ref in owner_references(obj) if ref.get("controller")), "")


@dataclass
class ApiServer:
    """The control plane's API server over its tables (composites, everything else): uids,
    finalizers, deletions and the Usage webhook. `replays` are the deletions the Usage
    controller replays at its next pass (upstream: two seconds later, in a goroutine)."""

    tables: tuple[dict[Key, dict], ...]
    replays: list[tuple[Key, str]] = field(default_factory=list)
    uids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    by_uid: dict[str, Key] = field(default_factory=dict)

    def get(self, key: Key) -> dict | None:
        return next((table[key] for table in self.tables if key in table), None)

    def keys(self) -> list[Key]:
        return sorted(key for table in self.tables for key in table)

    def owner(self, ref: dict) -> dict | None:
        """The object an owner reference names, by uid (a recreated namesake is not it)."""
        key = self.by_uid.get(ref.get("uid", ""))
        return self.get(key) if key else None

    def dependents(self, obj: dict) -> list[Key]:
        uid = meta(obj).get("uid")
        return [key for key in self.keys() if any(
            ref.get("uid") == uid for ref in owner_references(self.get(key) or {}))]

    def admit(self, obj: dict, current: dict | None) -> dict:
        """`obj` as stored: a new object gets a uid; one applied again keeps what the API
        server and other controllers own in its metadata (server-side apply keeps other
        managers' fields): uid, finalizers, deletionTimestamp, owner references added by
        others, the Usage controller's in-use label and the webhook's annotation."""
        new = meta(obj)
        if current is None:
            new["uid"] = f"uid-{next(self.uids)}"
            self.by_uid[new["uid"]] = key_of(obj)
            return obj
        old = meta(current)
        for name in ("uid", "finalizers", "deletionTimestamp"):
            if name in old:
                new[name] = old[name]
        ours = {ref.get("uid") for ref in owner_references(obj)}
        refs = owner_references(obj) + [r for r in owner_references(current) if r.get("uid") not in ours]
        if refs:
            new["ownerReferences"] = refs
        if IN_USE_LABEL in (old.get("labels") or {}):
            new.setdefault("labels", {})[IN_USE_LABEL] = old["labels"][IN_USE_LABEL]
        if DELETION_ATTEMPT in (old.get("annotations") or {}):
            new.setdefault("annotations", {})[DELETION_ATTEMPT] = old["annotations"][DELETION_ATTEMPT]
        return obj

    def add_finalizer(self, obj: dict, name: str) -> None:
        if name not in finalizers(obj):
            meta(obj)["finalizers"] = [*finalizers(obj), name]

    def remove_finalizer(self, key: Key, name: str) -> None:
        obj = self.get(key)
        if obj is None or name not in finalizers(obj):
            return
        meta(obj)["finalizers"] = [f for f in finalizers(obj) if f != name]
        self.release(key)

    def release(self, key: Key) -> None:
        """A deleted object goes once it has no finalizer left."""
        obj = self.get(key)
        if obj is not None and deleting(obj) and not finalizers(obj):
            for table in self.tables:
                table.pop(key, None)
            self.by_uid.pop(meta(obj).get("uid", ""), None)

    def delete(self, key: Key, propagation: str = BACKGROUND) -> str:
        """A DELETE request: refused by the Usage webhook ("" when accepted), else the object
        is marked deleted, with `foregroundDeletion` when the propagation is Foreground and
        without it when Background (a second DELETE switches), and goes when no finalizer
        holds it (store.go, deletionFinalizersForGarbageCollection)."""
        obj = self.get(key)
        if obj is None:
            return ""
        refusal = self.in_use(obj, propagation)
        if refusal:
            return refusal
        meta(obj).setdefault("deletionTimestamp",
                             datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        if propagation == FOREGROUND:
            self.add_finalizer(obj, DELETE_DEPENDENTS)
        else:
            meta(obj)["finalizers"] = [f for f in finalizers(obj) if f != DELETE_DEPENDENTS]
        self.release(key)
        return ""

    def usages_of(self, key: Key) -> list[dict]:
        """The Usages whose `of` is the object at `key` (the webhook's and the controller's
        index: apiVersion aside, kind, namespace and name)."""
        kind, namespace, name = key
        return [usage for usage_key in self.keys() if usage_key[0] == "Usage"
                and (usage := self.get(usage_key)) is not None
                and used_key(usage) == (kind, namespace, name)]

    def in_use(self, obj: dict, propagation: str) -> str:
        """Crossplane's Usage webhook (internal/webhook/protection/usage/handler.go): only
        for objects labelled in use; refuses while a Usage is `of` the object, recording the
        propagation of the refused attempt for a replay."""
        if (meta(obj).get("labels") or {}).get(IN_USE_LABEL) != "true":
            return ""
        usages = self.usages_of(key_of(obj))
        if not usages:
            return ""
        meta(obj).setdefault("annotations", {})[DELETION_ATTEMPT] = propagation
        first = usages[0]
        named = f'"{meta(first)["name"]}"'
        if meta(first).get("namespace"):
            named += f' (in namespace "{meta(first)["namespace"]}")'
        by = first["spec"].get("by")
        reason = first["spec"].get("reason")
        detail = (f" by resource {by['kind']}/{by['resourceRef']['name']}" if by
                  else f' with reason: "{reason}"' if reason else "")
        return f"This resource is in-use by {len(usages)} usage(s), including the *v1beta1.Usage {named}{detail}."


def used_key(usage: dict) -> Key:
    of = usage["spec"]["of"]
    ref = of.get("resourceRef") or {}
    return of["kind"], ref.get("namespace") or meta(usage).get("namespace", ""), ref.get("name", "")


def using_key(usage: dict) -> Key | None:
    by = usage["spec"].get("by")
    if not by:
        return None
    return by["kind"], meta(usage).get("namespace", ""), (by.get("resourceRef") or {}).get("name", "")


# --- Kubernetes' garbage collector ------------------------------------------------------------


def collect_garbage(api: ApiServer) -> None:
    """One pass of the garbage collector (pkg/controller/garbagecollector/garbagecollector.go):
    an object deleted in the foreground has its dependents deleted and loses
    `foregroundDeletion` once none blocks it (`blockOwnerDeletion`); an object whose owners
    are gone, or wait for their dependents, is deleted (attemptToDeleteItem)."""
    for key in api.keys():
        obj = api.get(key)
        if obj is None:
            continue
        if deleting(obj):
            if DELETE_DEPENDENTS in finalizers(obj):
                delete_dependents(api, key, obj)
        elif owner_references(obj):
            attempt_to_delete(api, key)


def delete_dependents(api: ApiServer, key: Key, obj: dict) -> None:
    """processDeletingDependentsItem, and the attempt on every dependent that an owner's
    turning to foreground deletion queues."""
    uid = meta(obj)["uid"]
    dependents = api.dependents(obj)
    blocking = [dep for dep in dependents if any(
        ref.get("uid") == uid and ref.get("blockOwnerDeletion")
        for ref in owner_references(api.get(dep) or {}))]
    if not blocking:
        api.remove_finalizer(key, DELETE_DEPENDENTS)
    for dependent in dependents:
        attempt_to_delete(api, dependent)


def attempt_to_delete(api: ApiServer, key: Key) -> None:
    """attemptToDeleteItem: an object with an owner still standing only loses its references
    to the others; else it is deleted, in the foreground when an owner waits for it and it
    has dependents of its own. (The cycle check that unblocks such an object's references
    when a dependent of it also deletes its dependents is not modelled.)"""
    obj = api.get(key)
    if obj is None or deleting(obj):
        return
    solid, dangling, waiting = [], [], []
    for ref in owner_references(obj):
        owner = api.owner(ref)
        if owner is None:
            dangling.append(ref)
        elif deleting(owner) and DELETE_DEPENDENTS in finalizers(owner):
            waiting.append(ref)
        else:
            solid.append(ref)
    if solid:
        if dangling or waiting:
            meta(obj)["ownerReferences"] = solid
    elif waiting and api.dependents(obj):
        api.delete(key, FOREGROUND)
    elif dangling or waiting:
        api.delete(key, BACKGROUND)


# --- Crossplane's Usage controller ------------------------------------------------------------


def reconcile_usages(api: ApiServer) -> None:
    """One pass of the Usage controller (internal/controller/protection/usage/reconciler.go),
    after the deletions it replays from its previous pass."""
    replays, api.replays = api.replays, []
    for used, propagation in replays:
        api.delete(used, propagation)
    for key in api.keys():
        if key[0] == "Usage":
            reconcile_usage(api, key)


def reconcile_usage(api: ApiServer, key: Key) -> None:
    """A live Usage takes its finalizer, labels what it is `of` in use and, with `by`, gets
    an owner reference (not a controller one, not blocking) to the user. A deleted one
    composed by an XR (the `crossplane.io/composite` label; Crossplane removes it from a
    resource it deletes as no longer desired) waits while its `by` exists; then it drops the
    in-use label if it was the last Usage, replays a refused deletion when `replayDeletion`
    says so, and lets go."""
    usage = api.get(key)
    if usage is None:
        return
    used = api.get(used_key(usage))
    using = using_key(usage)
    if deleting(usage):
        composed = bool((meta(usage).get("labels") or {}).get(COMPOSITE_LABEL))
        if using is not None and composed and api.get(using) is not None:
            return  # WaitingUsingDeleted, polled again
        if used is not None and len(api.usages_of(used_key(usage))) < 2:
            (meta(used).get("labels") or {}).pop(IN_USE_LABEL, None)
        attempt = (meta(used).get("annotations") or {}).get(DELETION_ATTEMPT) if used else None
        if usage["spec"].get("replayDeletion") and attempt:
            api.replays.append((used_key(usage), attempt))
        api.remove_finalizer(key, USAGE_FINALIZER)
        return
    api.add_finalizer(usage, USAGE_FINALIZER)
    if used is None:
        return  # "cannot get used", retried
    meta(used).setdefault("labels", {})[IN_USE_LABEL] = "true"
    user = api.get(using) if using is not None else None
    if user is not None and meta(user)["uid"] not in {r.get("uid") for r in owner_references(usage)}:
        meta(usage)["ownerReferences"] = [*owner_references(usage), {
            "apiVersion": user.get("apiVersion", ""), "kind": user["kind"],
            "name": meta(user)["name"], "uid": meta(user)["uid"]}]
