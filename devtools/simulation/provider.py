"""provider-kubernetes in the simulation: Objects' manifests applied to a `Cluster` under
their management policies (Observe/Create: created once, never updated or deleted), patched
from control-plane Secrets (`references[].patchesFrom`), and observed back the way the real
provider reports them: the remote object redacted (`--sanitize-secrets`) and readiness by the
Object's policy, `DeriveFromCelQuery` evaluated with cel-python. A ClusterProviderConfig is
the cluster of the same name, usable at once."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fleetcache.devtools.simulation.api import key_of
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.functions import read

READY = {"type": "Ready", "status": "True", "reason": "Available"}
NOT_READY = {"type": "Ready", "status": "False", "reason": "Creating"}
SYNCED = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}


class Provider:
    """Objects to clusters and back, honouring management policies and references."""

    def __init__(self, clusters: dict[str, Cluster], control_plane_secrets: Callable[[], list]):
        self.clusters = clusters
        self.secrets = control_plane_secrets
        self._cel: dict[str, Any] = {}

    def cluster_of(self, obj: dict) -> Cluster | None:
        return self.clusters.get(read.get_path(obj, "spec.providerConfigRef.name", ""))

    def apply(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        if cluster is None:
            return
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        for ref in obj["spec"].get("references", []) or []:
            self.patch_from(ref, manifest)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        exists = cluster.get(key_of(manifest)) is not None
        if not exists and ({"*", "Create"} & policies):
            cluster.apply(manifest)
        elif exists and ({"*", "Update"} & policies):
            cluster.apply(manifest)

    def patch_from(self, ref: dict, manifest: dict) -> None:
        source = ref.get("patchesFrom") or {}
        for secret in self.secrets():
            meta = secret.get("metadata", {})
            if (secret.get("kind") == source.get("kind") and meta.get("name") == source.get("name")
                    and meta.get("namespace") == source.get("namespace")):
                value = read.get_path(secret, source.get("fieldPath", ""))
                if value is not None:
                    target = manifest
                    *parents, last = ref.get("toFieldPath", source["fieldPath"]).split(".")
                    for part in parents:
                        target = target.setdefault(part, {})
                    target[last] = value

    def delete(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        if cluster is not None and ({"*", "Delete"} & policies):
            cluster.delete(key_of(obj["spec"]["forProvider"]["manifest"]))

    def observe(self, obj: dict) -> dict:
        observed = copy.deepcopy(obj)
        cluster = self.cluster_of(obj)
        remote = cluster.get(key_of(obj["spec"]["forProvider"]["manifest"])) if cluster else None
        if remote is None:
            observed["status"] = {"conditions": [SYNCED, NOT_READY]}
            return observed
        remote = copy.deepcopy(remote)
        if remote.get("kind") == "Secret":
            remote.pop("data", None)  # provider-kubernetes --sanitize-secrets
        readiness = obj["spec"].get("readiness") or {}
        ready = True
        if readiness.get("policy") == "DeriveFromCelQuery":
            ready = self.cel(readiness["celQuery"], remote)
        observed["status"] = {"atProvider": {"manifest": remote},
                              "conditions": [SYNCED, READY if ready else NOT_READY]}
        return observed

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
