"""provider-kubernetes in the simulation, after its Object controller
(internal/controller/namespaced/object/object.go, v1.2.1) as crossplane-runtime's managed
reconciler runs it (pkg/reconciler/managed/reconciler.go):

- an Object's manifest is applied to a `Cluster` under its management policies
  (Observe/Create: created once, never updated or deleted), patched from control-plane
  Secrets (`references[].patchesFrom`);
- what the cluster's API server refuses (admission.py: a missing namespace, a changed Job
  template, a ResourceQuota) leaves the Object Synced=False with the provider's message, and
  is retried;
- the remote object is reported as the real provider reports it: redacted
  (`--sanitize-secrets`), the last one seen kept while it is gone and not recreated, Ready by
  the Object's readiness policy (`DeriveFromCelQuery` evaluated with cel-python;
  SuccessfulCreate once the remote object is up to date).

Without timing every Object is reconciled every round; with a timing.RealisticTiming, only
when the provider would (at once on a new spec, after a backoff on errors, every 30 s while
not Ready, every `--poll` once Ready, at once on a watched change). A ClusterProviderConfig
is the cluster of the same name, usable at once, unless the cluster is in `unreachable`
(every reconcile fails); a deleted Object's finalizer goes once its remote object is gone."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetcache.devtools.simulation.admission import refusal
from fleetcache.devtools.simulation.api import Key, key_of
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.fieldpath import FieldPathError, get_value, set_value
from fleetcache.devtools.simulation.timing import RealisticTiming
from fleetcache.functions import read

READY = {"type": "Ready", "status": "True", "reason": "Available"}
UNAVAILABLE = {"type": "Ready", "status": "False", "reason": "Unavailable"}
CREATING = {"type": "Ready", "status": "False", "reason": "Creating"}
SYNCED = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
CREATE, UPDATE, DELETE = {"*", "Create"}, {"*", "Update"}, {"*", "Delete"}


REFERENCES_UNRESOLVED = "cannot resolve resource references"  # object.go's errResolveResourceReferences


def reconcile_error(message: str) -> dict:
    return {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message}


@dataclass
class Managed:
    """What the provider keeps of one Object: the spec it reconciled last, the status it
    wrote, when it reconciles next, how many requeues in a row backed off, and the remote
    object as it last saw it (a watch fires when it differs)."""

    spec: dict
    status: dict = field(default_factory=dict)
    due: float = 0.0
    failures: int = 0
    seen: str = ""


class Provider:
    """Objects to clusters and back, honouring management policies and references."""

    def __init__(self, clusters: dict[str, Cluster], control_plane_secrets: Callable[[], list],
                 timing: RealisticTiming | None = None):
        self.clusters = clusters
        self.secrets = control_plane_secrets
        self.timing = timing
        self.managed: dict[Key, Managed] = {}
        self.unreachable: set[str] = set()  # clusters whose API server cannot be reached now
        self._cel: dict[str, Any] = {}

    def cluster_of(self, obj: dict) -> Cluster | None:
        name = read.get_path(obj, "spec.providerConfigRef.name", "")
        return None if name in self.unreachable else self.clusters.get(name)

    # -- what Crossplane does to an Object --------------------------------------------------------
    def apply(self, obj: dict) -> None:
        """Crossplane applied the Object: a new one, or a changed spec, is reconciled at once."""
        state = self.managed.get(key_of(obj))
        if state is None or state.spec != obj["spec"]:
            self.managed[key_of(obj)] = state = Managed(copy.deepcopy(obj["spec"]),
                                                        state.status if state else {})
            self.reconcile(obj, state)

    def observe(self, obj: dict) -> dict:
        """The Object as Crossplane reads it: its status as of the provider's last reconcile,
        which runs first when it is due."""
        state = self.managed.get(key_of(obj))
        if state is None:
            self.managed[key_of(obj)] = state = Managed(copy.deepcopy(obj["spec"]))
            self.reconcile(obj, state)
        elif self.due(obj, state):
            self.reconcile(obj, state)
        observed = copy.deepcopy(obj)
        observed["status"] = copy.deepcopy(state.status)
        return observed

    def delete(self, obj: dict) -> bool:
        """The managed reconciler on a deleted Object: whether its finalizer may go. Without
        Delete in its policies at once; else once the remote object is gone, which takes a
        reachable cluster (crossplane-runtime pkg/reconciler/managed/reconciler.go: connect,
        observe, delete, requeue until it no longer exists; a PVC a pod uses stays)."""
        self.managed.pop(key_of(obj), None)
        if not DELETE & set(obj["spec"].get("managementPolicies") or ["*"]):
            return True
        if read.get_path(obj, "spec.providerConfigRef.name", "") in self.unreachable:
            return False
        cluster = self.cluster_of(obj)
        if cluster is None:  # no such cluster: nothing to delete there (not modelled further)
            return True
        remote = key_of(obj["spec"]["forProvider"]["manifest"])
        cluster.delete(remote)
        return cluster.get(remote) is None

    def due(self, obj: dict, state: Managed) -> bool:
        if self.timing is None or self.timing.now() >= state.due:
            return True
        return self.timing.flags.enable_watches and bool(obj["spec"].get("watch")) \
            and self.fingerprint(obj) != state.seen

    def fingerprint(self, obj: dict) -> str:
        cluster = self.cluster_of(obj)
        remote = cluster.get(key_of(obj["spec"]["forProvider"]["manifest"])) if cluster else None
        return json.dumps(remote, sort_keys=True, default=str)

    # -- one reconcile of the managed reconciler ---------------------------------------------------
    def reconcile(self, obj: dict, state: Managed) -> None:
        cluster = self.cluster_of(obj)
        name = read.get_path(obj, "spec.providerConfigRef.name", "")
        if cluster is None:
            self.finish(state, reconcile_error(
                f"observe failed: cannot get object: dial tcp: connect: {name} is unreachable"
                if name in self.unreachable else
                f"connect failed: cannot get provider config: ClusterProviderConfig {name!r} not found"),
                requeue=True)
            return
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        unresolved = self.resolve_references(obj, manifest)
        if unresolved:
            self.finish(state, reconcile_error(f"observe failed: {unresolved}"), requeue=True)
            return
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        readiness = obj["spec"].get("readiness") or {}
        successful_create = readiness.get("policy", "SuccessfulCreate") == "SuccessfulCreate"
        key = key_of(manifest)
        remote = cluster.get(key)
        state.seen = self.fingerprint(obj)
        if remote is None:
            self.create(cluster, manifest, policies, state)
            return
        self.at_provider(state, remote, readiness)
        refused = refusal(cluster.objects, manifest)  # GetDesiredState's dry run
        if refused:
            self.finish(state, reconcile_error(
                f"observe failed: cannot get desired state: cannot dry run SSA: {refused}"),
                requeue=True)
            return
        if not (CREATE | UPDATE) & policies or applied(manifest, remote):
            self.finish(state, SYNCED, READY if successful_create else None)
        elif UPDATE & policies:
            cluster.apply(manifest)
            self.at_provider(state, cluster.get(key) or {}, readiness)
            self.finish(state, SYNCED)
        else:  # "Skipping update due to managementPolicies"
            self.finish(state, SYNCED)

    def create(self, cluster: Cluster, manifest: dict, policies: set[str], state: Managed) -> None:
        """The remote object does not exist (yet, or any more): created when the policies
        allow, else left alone with the last one seen still in status.atProvider."""
        if policies == {"Observe"}:
            self.finish(state, reconcile_error(
                "observe failed: external resource does not exist"), requeue=True)
        elif not CREATE & policies:
            self.finish(state, SYNCED)
        elif refused := refusal(cluster.objects, manifest):
            self.finish(state, reconcile_error(
                f"create failed: cannot create object: cannot create object: {refused}"),
                CREATING, requeue=True)
        else:
            cluster.apply(manifest)
            state.status["atProvider"] = {"manifest": sanitized(cluster.get(key_of(manifest)))}
            self.finish(state, SYNCED, CREATING, requeue=True)

    def at_provider(self, state: Managed, remote: dict, readiness: Mapping) -> None:
        """setAtProvider: the remote object, and Ready for every policy but SuccessfulCreate."""
        remote = sanitized(remote)
        state.status["atProvider"] = {"manifest": remote}
        policy = readiness.get("policy", "SuccessfulCreate")
        if policy == "SuccessfulCreate":
            return
        if policy == "DeriveFromCelQuery":
            ready = self.cel(readiness.get("celQuery", ""), remote)
        elif policy == "DeriveFromObject":
            ready = read.condition_of(remote, "Ready").get("status") == "True"
        else:  # AllTrue
            conditions = read.get_path(remote, "status.conditions", [])
            ready = bool(conditions) and all(c.get("status") == "True" for c in conditions)
        self.set_condition(state, READY if ready else UNAVAILABLE)

    def finish(self, state: Managed, synced: dict, ready: dict | None = None, *,
               requeue: bool = False) -> None:
        """The conditions, and the next reconcile: `Requeue: true` backs off, `RequeueAfter`
        is the poll interval hook's."""
        if ready is not None:
            self.set_condition(state, ready)
        self.set_condition(state, synced)
        if self.timing is None:
            return
        if requeue:
            state.failures += 1
            state.due = self.timing.now() + self.timing.backoff(state.failures)
        else:
            state.failures = 0
            is_ready = read.is_true({"status": state.status}, "Ready")
            state.due = self.timing.now() + self.timing.poll_after(is_ready)

    @staticmethod
    def set_condition(state: Managed, condition: dict) -> None:
        kept = [c for c in state.status.get("conditions", []) if c["type"] != condition["type"]]
        state.status["conditions"] = sorted([*kept, condition], key=lambda c: c["type"])

    def resolve_references(self, obj: dict, manifest: dict) -> str:
        """resolveReferencies (object.go): each patchesFrom copies a field of a control-plane
        Secret into the manifest; a missing Secret or field, or a field path that does not
        parse, is the error the provider's Observe returns ("" when all resolved)."""
        for ref in obj["spec"].get("references", []) or []:
            source = ref.get("patchesFrom") or {}
            if not source:
                continue
            secret = next((s for s in self.secrets()
                           if s.get("kind") == source.get("kind")
                           and read.get_path(s, "metadata.name") == source.get("name")
                           and read.get_path(s, "metadata.namespace") == source.get("namespace")),
                          None)
            if secret is None:
                return (f"{REFERENCES_UNRESOLVED}: cannot get referenced resource: "
                        f'secrets "{source.get("name")}" not found')
            try:
                value = get_value(secret, source.get("fieldPath", ""))
                set_value(manifest, ref.get("toFieldPath") or source["fieldPath"], value)
            except FieldPathError as error:
                return f"{REFERENCES_UNRESOLVED}: cannot patch from referenced resource: {error}"
        return ""

    def cel(self, query: str, remote: dict) -> bool:
        import celpy

        program = self._cel.get(query)
        if program is None:
            env = celpy.Environment()
            program = self._cel[query] = env.program(env.compile(query))
        try:
            return bool(program.evaluate({"object": celpy.json_to_cel(remote)}))
        except Exception:  # noqa: BLE001 - CEL errors (missing fields) mean not ready, as in the provider
            return False


def sanitized(remote: dict | None) -> dict:
    """The remote object as status.atProvider.manifest carries it: Secret data redacted
    (provider-kubernetes --sanitize-secrets)."""
    remote = copy.deepcopy(remote or {})
    if remote.get("kind") == "Secret":
        remote.pop("data", None)
    return remote


def applied(manifest: Any, remote: Any) -> bool:
    """Whether the remote object holds every field of the manifest as the manifest sets it
    (what server-side apply's extracted state compares)."""
    if isinstance(manifest, dict):
        return isinstance(remote, dict) and all(applied(v, remote.get(k)) for k, v in manifest.items())
    return manifest == remote
