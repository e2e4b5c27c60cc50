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

PROVIDER_CONFIG_KEY = "provider-config"
DEFAULT_KUBECONFIG_KEY = "kubeconfig"  # the XRD's defaults, for requests that skip them
DEFAULT_SECRET_NAMESPACE = "crossplane-system"


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    secret_ref: dict | None  # {namespace, name, key} when composing
    adopted: str | None  # providerConfigRef.name when adopting


def read_spec(request: kit.Request) -> ClusterSpec:
    """Validate the FleetCluster; every error names the field and the fix."""
    name = kit.object_name(request.name, "metadata.name")
    if not isinstance(request.composite.get("spec"), dict):
        raise kit.InputError("spec is required: set spec.kubeconfigSecretRef {namespace, name, "
                             "key} or spec.providerConfigRef {name}")
    spec = request.spec
    secret_ref, config_ref = spec.get("kubeconfigSecretRef"), spec.get("providerConfigRef")
    if (secret_ref is None) == (config_ref is None):
        raise kit.InputError("set exactly one of spec.kubeconfigSecretRef (fleetcache composes a "
                             "ClusterProviderConfig from that kubeconfig Secret) and "
                             "spec.providerConfigRef (adopt an existing ClusterProviderConfig)")
    read_cache(spec.get("cache"))
    image = kit.get_path(spec, "agent.image")
    if spec.get("agent") is not None and not isinstance(spec.get("agent"), dict):
        raise kit.InputError("spec.agent must be an object, e.g. {image: registry/agent:tag}")
    if image is not None and (not isinstance(image, str) or not image.strip()
                              or any(c.isspace() for c in image)):
        raise kit.InputError(f"spec.agent.image: {image!r} is not an image reference; write "
                             "it like registry.example.com/fleetcache/fleetcache-agent:v0.1.0")
    if config_ref is not None:
        if not isinstance(config_ref, dict):
            raise kit.InputError("spec.providerConfigRef must be an object {name: <existing "
                                 "ClusterProviderConfig>}")
        adopted = kit.object_name(config_ref.get("name"), "spec.providerConfigRef.name")
        return ClusterSpec(name, None, adopted)
    if not isinstance(secret_ref, dict):
        raise kit.InputError("spec.kubeconfigSecretRef must be an object {namespace, name, key}")
    ref = {
        "namespace": kit.object_name(secret_ref.get("namespace", DEFAULT_SECRET_NAMESPACE),
                                     "spec.kubeconfigSecretRef.namespace"),
        "name": kit.object_name(secret_ref.get("name"), "spec.kubeconfigSecretRef.name"),
        "key": secret_ref.get("key", DEFAULT_KUBECONFIG_KEY),
    }
    if not isinstance(ref["key"], str) or not ref["key"]:
        raise kit.InputError("spec.kubeconfigSecretRef.key must name the Secret's key holding "
                             f"the kubeconfig (default {DEFAULT_KUBECONFIG_KEY!r})")
    return ClusterSpec(name, ref, None)


def read_cache(cache: object) -> None:
    """spec.cache holds the defaults hydrations on this cluster use; check them here so a
    mistake shows on the FleetCluster instead of as a PVC that never binds."""
    if cache is None:
        return
    if not isinstance(cache, dict):
        raise kit.InputError("spec.cache must be an object {storageClassName, accessMode, "
                             "capacity}")
    mode = cache.get("accessMode")
    if mode is not None and mode not in kit.ACCESS_MODES:
        raise kit.InputError(f"spec.cache.accessMode: {mode!r} is not one of "
                             f"{', '.join(kit.ACCESS_MODES)} (default ReadWriteMany)")
    if cache.get("capacity") is not None:
        kit.quantity_bytes(cache["capacity"], "spec.cache.capacity")
    storage_class = cache.get("storageClassName")
    if storage_class is not None:
        kit.object_name(storage_class, "spec.cache.storageClassName")


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
