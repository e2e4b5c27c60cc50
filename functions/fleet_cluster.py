"""compose-fleet-cluster: one provider-kubernetes ClusterProviderConfig per FleetCluster.

Lifecycle, top to bottom:
1. read and validate the spec: exactly one of kubeconfigSecretRef / providerConfigRef,
   and the cache defaults other composers read (accessMode, capacity, storageClassName);
2. compose a ClusterProviderConfig named after the FleetCluster from the kubeconfig
   Secret, or adopt the named one (compose nothing);
3. report status.providerConfigName; the FleetCluster is Ready once its ProviderConfig
   exists (observed), or at once when adopted.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcache.functions import kit
from fleetcache.functions.models.fleet_cluster import FleetCluster

PROVIDER_CONFIG_KEY = "provider-config"


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    secret_ref: dict | None  # {namespace, name, key} when composing
    adopted: str | None  # providerConfigRef.name when adopting


def read_spec(request: kit.Request) -> ClusterSpec:
    """The FleetCluster read through its model; every error names the field and the fix."""
    name = kit.object_name(request.name, "metadata.name")
    spec = kit.read_spec(FleetCluster, request.composite.get("spec"))
    capacity = kit.get_path(spec, "cache.capacity")
    if capacity is not None:
        kit.quantity_bytes(capacity, "spec.cache.capacity")
    if "providerConfigRef" in spec:
        return ClusterSpec(name, None, spec["providerConfigRef"]["name"])
    return ClusterSpec(name, spec["kubeconfigSecretRef"], None)


# --- 2. compose ---------------------------------------------------------------------------


def provider_config(spec: ClusterSpec) -> dict:
    return {
        "apiVersion": kit.OBJECT_API_VERSION,
        "kind": kit.PROVIDER_CONFIG_KIND,
        "metadata": {
            "name": spec.name,
            "labels": {kit.LABEL_MANAGED_BY: "fleetcache",
                       kit.LABEL_CLUSTER: kit.label_value(spec.name)},
        },
        "spec": {"credentials": {"source": "Secret", "secretRef": dict(spec.secret_ref or {})}},
    }


# --- 3. report ----------------------------------------------------------------------------


def compose(request: kit.Request) -> kit.Outcome:
    outcome = kit.Outcome()
    spec = read_spec(request)
    if spec.adopted:
        outcome.status = {"providerConfigName": spec.adopted}
        outcome.composite_ready = True
        return outcome
    exists = PROVIDER_CONFIG_KEY in request.observed
    outcome.compose(PROVIDER_CONFIG_KEY, provider_config(spec), ready=exists)
    outcome.status = {"providerConfigName": spec.name}
    outcome.composite_ready = exists
    return outcome
