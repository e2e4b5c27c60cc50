"""provider-kubernetes Objects: wrapping a manifest for another cluster, reading what the
provider saw there, and carrying an observed Object over unchanged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetcache.functions.k8s.agent_job import TOKEN_SECRET_KEY
from fleetcache.functions.protocol import Outcome, Request
from fleetcache.functions.read import get_path, mapping_at

OBJECT_API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"
PROVIDER_CONFIG_KIND = "ClusterProviderConfig"


CREATE_ONLY = ("Observe", "Create")
OBSERVE_CREATE_DELETE = ("Observe", "Create", "Delete")


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
) -> dict:
    """Wrap a manifest for another cluster in a namespaced provider-kubernetes Object."""
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
    metadata: dict = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": OBJECT_API_VERSION, "kind": "Object", "metadata": metadata, "spec": spec}


def namespace_manifest(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


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
            "fieldPath": f"data.{token_ref.get('key', 'HF_TOKEN')}",
        },
        "toFieldPath": f"data.{TOKEN_SECRET_KEY}",
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
