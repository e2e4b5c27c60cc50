"""What a simulated cluster's API server refuses when provider-kubernetes creates or updates
an object, in the API server's words (design/simulation.md cites the code):

- an object in a namespace that does not exist (the NamespaceLifecycle admission plugin):
  `namespaces "NS" not found`;
- a changed Job template, podFailurePolicy, completions or completionMode
  (pkg/apis/batch/validation, ValidateJobSpecUpdate): `Job.batch "NAME" is invalid:
  spec.template: Invalid value: ...: field is immutable` (the real message prints the whole
  new template; here it is elided to `core.PodTemplateSpec{...}`);
- a create, or a PersistentVolumeClaim's growth, past a ResourceQuota of its namespace (the
  ResourceQuota admission plugin, object counts, `persistentvolumeclaims`, `configmaps`,
  `secrets`, `services` and `requests.storage`): `persistentvolumeclaims "NAME" is forbidden:
  exceeded quota: QUOTA, requested: ..., used: ..., limited: ...`.

Pods are not created through the API here, so their quotas (pods, cpu, memory) are not
checked."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetcache.devtools.simulation.api import Objects, key_of
from fleetcache.quantity import to_bytes

# Namespaces every cluster has (kube-apiserver creates them), and kinds that live in none.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
    "PriorityClass", "CustomResourceDefinition", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration"})
IMMUTABLE_JOB_FIELDS = (("template", "core.PodTemplateSpec{...}"),
                        ("podFailurePolicy", "&batch.PodFailurePolicy{...}"),
                        ("completions", ""), ("completionMode", ""))
# kind -> (resource, group) as a quota's count/<resource>.<group> and a refusal name them
RESOURCES = {
    "ConfigMap": ("configmaps", ""), "Secret": ("secrets", ""), "Service": ("services", ""),
    "PersistentVolumeClaim": ("persistentvolumeclaims", ""),
    "ServiceAccount": ("serviceaccounts", ""), "Job": ("jobs", "batch"),
    "Deployment": ("deployments", "apps"), "DaemonSet": ("daemonsets", "apps"),
    "Role": ("roles", "rbac.authorization.k8s.io"),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io"),
    "Lease": ("leases", "coordination.k8s.io"),
}
CORE_COUNTS = frozenset({"configmaps", "secrets", "services", "persistentvolumeclaims"})


def refusal(objects: Objects, manifest: Mapping) -> str:
    """Why the API server refuses to create or update `manifest` ("" when it admits it)."""
    current = objects.get(key_of(dict(manifest)))
    if current is None:
        problem = missing_namespace(objects, manifest)
        if problem:
            return problem
    elif manifest.get("kind") == "Job":
        problem = immutable_job_fields(current, manifest)
        if problem:
            return problem
    return exceeded_quota(objects, manifest, current)


def missing_namespace(objects: Objects, manifest: Mapping) -> str:
    namespace = (manifest.get("metadata") or {}).get("namespace", "")
    if not namespace or manifest.get("kind") in CLUSTER_SCOPED or namespace in SYSTEM_NAMESPACES \
            or ("Namespace", "", namespace) in objects:
        return ""
    return f'namespaces "{namespace}" not found'


def immutable_job_fields(current: Mapping, manifest: Mapping) -> str:
    old, new = current.get("spec") or {}, manifest.get("spec") or {}
    if old.get("suspend"):
        return ""  # a suspended Job's scheduling directives may change; fleetcache never suspends
    errors = [f"spec.{name}: Invalid value: {shown or new.get(name)}: field is immutable"
              for name, shown in IMMUTABLE_JOB_FIELDS if old.get(name) != new.get(name)]
    if not errors:
        return ""
    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'Job.batch "{manifest["metadata"]["name"]}" is invalid: {listed}'


def usage(manifest: Mapping) -> dict[str, int]:
    """What one object counts against a quota: itself, and a claim's storage."""
    resource, group = RESOURCES.get(str(manifest.get("kind")),
                                    (f"{str(manifest.get('kind')).lower()}s", ""))
    counted = {f"count/{resource}" + (f".{group}" if group else ""): 1}
    if resource in CORE_COUNTS:
        counted[resource] = 1
    if manifest.get("kind") == "PersistentVolumeClaim":
        storage = ((manifest.get("spec") or {}).get("resources") or {}).get("requests", {})
        counted["requests.storage"] = to_bytes(str(storage.get("storage", "0")))
    return counted


def exceeded_quota(objects: Objects, manifest: Mapping, current: Mapping | None) -> str:
    namespace = (manifest.get("metadata") or {}).get("namespace", "")
    quotas = sorted((key, quota) for key, quota in objects.items()
                    if key[0] == "ResourceQuota" and key[1] == namespace)
    if not quotas:
        return ""
    delta = {k: v - (usage(current).get(k, 0) if current is not None else 0)
             for k, v in usage(manifest).items()}
    delta = {k: v for k, v in delta.items() if v > 0}
    used: dict[str, int] = {}
    for key, other in objects.items():
        if key[1] == namespace and key[0] not in ("ResourceQuota", "Namespace"):
            for name, value in usage(other).items():
                used[name] = used.get(name, 0) + value
    for (_, _, quota_name), quota in quotas:
        hard = {k: to_bytes(str(v))
                for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()}
        over = sorted(k for k in delta if k in hard and used.get(k, 0) + delta[k] > hard[k])
        if over:
            resource, group = RESOURCES.get(str(manifest.get("kind")),
                                            (f"{str(manifest.get('kind')).lower()}s", ""))
            return (f'{resource}{"." + group if group else ""} "{manifest["metadata"]["name"]}" '
                    f"is forbidden: exceeded quota: {quota_name}, "
                    f"requested: {listed(over, delta)}, used: {listed(over, used)}, "
                    f"limited: {listed(over, hard)}")
    return ""


def listed(names: Iterable[str], values: Mapping[str, int]) -> str:
    """The quota plugin's prettyPrint: name=value, sorted, comma separated."""
    return ",".join(f"{name}={shown(name, values.get(name, 0))}" for name in names)


def shown(name: str, value: int) -> str:
    if name != "requests.storage":
        return str(value)
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)
