"""provider-kubernetes Objects: wrapping a manifest for another cluster, reading what the
provider saw there, and carrying an observed Object over unchanged.

provider-kubernetes re-reads an Object every `--poll` (10 minutes) once it is Ready and every
30 s while it is not (design/provider-timing.md), so an Object whose remote state a composer
waits on carries a readiness query that stays false until that state is final, and asks to
be watched (honoured with the provider's `--enable-watches`, ignored without)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetcache import shapes
from fleetcache.functions.k8s.agent_job import TOKEN_SECRET_KEY
from fleetcache.functions.protocol import Outcome, Request
from fleetcache.functions.read import get_path, mapping_at

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
PROVIDER_CONFIG_KIND = "ClusterProviderConfig"


CREATE_ONLY = ("Observe", "Create")
OBSERVE_CREATE_DELETE = ("Observe", "Create", "Delete")
OBSERVE_DELETE = ("Observe", "Delete")  # a finished Job's: never recreated once TTL collects it

JOB_FINISHED_QUERY = ("has(object.status) && has(object.status.conditions) && "
                      "object.status.conditions.exists(c, (c.type == 'Complete' || "
                      "c.type == 'Failed') && c.status == 'True')")
ROLLED_OUT_QUERY = (
    "has(object.status) && has(object.status.desiredNumberScheduled) && "
    "has(object.status.numberReady) && "
    "object.status.numberReady == object.status.desiredNumberScheduled && "
    "(!has(object.status.updatedNumberScheduled) || "
    "object.status.updatedNumberScheduled == object.status.desiredNumberScheduled) && "
    "(!has(object.metadata.generation) || (has(object.status.observedGeneration) && "
    "object.status.observedGeneration == object.metadata.generation))")


def record_final_query(phases: Iterable[str], commit: str = "") -> str:
    """A record ConfigMap is final once the agent wrote one of `phases` (for `commit`, when
    given): until then provider-kubernetes re-reads it every 30 s, not every 10 minutes."""
    query = ("has(object.data) && has(object.data.phase) && object.data.phase in ["
             + ", ".join(f"'{phase}'" for phase in phases) + "]")
    return query + (f" && has(object.data.commit) && object.data.commit == '{commit}'"
                    if shapes.is_resolved_commit(commit) else "")


def awaited_query(awaited: bool) -> str:
    """For an Object whose state no query can judge (a record per node): not Ready while its
    composer still waits on it, so the provider re-reads it every 30 s until then."""
    return "false" if awaited else "true"


def remote_object(
    name: str,
    namespace: str,
    manifest: dict,
    provider_config: str,
    *,
    management_policies: Iterable[str] | None = None,
    readiness_query: str | None = None,
    references: list[dict] | None = None,
    labels: Mapping[str, str] | None = None,
    watch: bool = False,
) -> dict:
    """Wrap a manifest for another cluster in a namespaced provider-kubernetes Object;
    `watch` for one whose remote changes a composer waits on."""
    spec: dict = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": {"kind": PROVIDER_CONFIG_KIND, "name": provider_config},
    }
    if management_policies is not None:
        spec["managementPolicies"] = list(management_policies)
    if readiness_query:
        spec["readiness"] = {"policy": "DeriveFromCelQuery", "celQuery": readiness_query}
    if references:
        spec["references"] = references
    if watch:
        spec["watch"] = True
    metadata: dict = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": OBJECT_API_VERSION, "kind": "Object", "metadata": metadata, "spec": spec}


def namespace_manifest(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


def secret_data_path(key: str) -> str:
    """A Secret key as a crossplane-runtime field path (pkg/fieldpath/fieldpath.go): a key
    with a period (.dockerconfigjson, config.json) goes in brackets, or it would read as
    nested fields and `data..dockerconfigjson` does not parse at all."""
    return f"data[{key}]" if "." in key else f"data.{key}"


def token_secret_object(
    name: str, remote_name: str, namespace: str, provider_config: str,
    token_ref: Mapping, labels: Mapping[str, str],
) -> dict:
    """The token Secret on a remote cluster, its value patched in by provider-kubernetes
    from the XR's own Secret (spec.references.patchesFrom), so the token never appears in
    any composed spec, status or function response."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": remote_name, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
    }
    reference = {
        "patchesFrom": {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": str(token_ref.get("name", "")),
            "namespace": namespace,
            "fieldPath": secret_data_path(str(token_ref.get("key", "HF_TOKEN"))),
        },
        "toFieldPath": secret_data_path(TOKEN_SECRET_KEY),
    }
    return remote_object(name, namespace, manifest, provider_config, references=[reference],
                         labels=labels)



def remote_manifest(observed_object: dict | None) -> dict:
    """The remote object as provider-kubernetes last saw it (status.atProvider.manifest)."""
    manifest = get_path(observed_object, "status.atProvider.manifest", {})
    return manifest if isinstance(manifest, dict) else {}



def carry_over(request: Request, outcome: Outcome, keys: Iterable[str]) -> None:
    """Keep already-composed resources as observed, so a blocked step deletes nothing."""
    for key in keys:
        observed = request.observed.get(key)
        if observed is not None and key not in outcome.desired:
            outcome.compose(key, strip_observed(observed), None)


def strip_observed(resource: dict) -> dict:
    """The desired form of an observed resource: identity and spec, no server fields.

    A remote Secret's data is dropped too: provider-kubernetes writes the values it patched
    in (spec.references) back into the Object's forProvider manifest, and a carried-over
    Object must not copy a token into the function's response. The references patch it
    in again on the cluster.
    """
    meta = mapping_at(resource, "metadata")
    kept_meta = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
    out = {k: v for k, v in resource.items() if k not in ("metadata", "status")}
    out["metadata"] = kept_meta
    manifest = get_path(out, "spec.forProvider.manifest")
    if isinstance(manifest, Mapping) and manifest.get("kind") == "Secret":
        out["spec"] = {**out["spec"], "forProvider": {**out["spec"]["forProvider"], "manifest": {
            k: v for k, v in manifest.items() if k not in ("data", "stringData")}}}
    return out
