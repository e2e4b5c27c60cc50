"""What the node tier of one hydration composes on its cluster (node_tier/warmers.py, step
4), as Kubernetes manifests: the pool's hostPath PV pre-bound to the node PVC, the status
ConfigMap the warmers write, the warmers' ServiceAccount, Role and RoleBindings (their own,
and the one to the slot Role in fleetcache-system), and the restricted warmer DaemonSet, one
pod per pool node (design/node-tier.md §3)."""

from __future__ import annotations

from fleetcache.functions import naming, read
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.node_tier.warmer_inputs import Hydration, NodeCache
from fleetcache.functions.node_tier.warmer_names import (
    CLAIM_LABEL,
    NODE_MOUNT,
    SLOTS_ROLE,
    STORAGE_CLASS,
    SYSTEM_NAMESPACE,
    VOLUME_MOUNT,
    Names,
)


def pv_manifest(h: Hydration, names: Names, node_cache: NodeCache) -> dict:
    """The pool's one hostPath PV: every pool node's own directory, pre-bound to the node PVC
    (claimRef), so no other claim can take it. Type Directory, never DirectoryOrCreate: the
    node agent creates it owned by the warmer's uid; the kubelet would create it root-owned."""
    path = f"{node_cache.path.rstrip('/')}/{h.namespace}/{h.cache}"
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": names.volume, "labels": dict(h.labels)},
            "spec": {"capacity": {"storage": node_cache.capacity},
                     "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "storageClassName": STORAGE_CLASS,
                     "volumeMode": "Filesystem",
                     "hostPath": {"path": path, "type": "Directory"},
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                  "namespace": h.namespace, "name": names.claim},
                     "nodeAffinity": {"required": node_cache.pool}}}


def claim_manifest(h: Hydration, names: Names, node_cache: NodeCache, existing: dict) -> dict:
    """The node PVC, bound by volumeName. Its request is kept once it exists (a claim on a
    class without expansion cannot be resized)."""
    size = read.get_path(existing, "spec.resources.requests.storage")
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": names.claim, "namespace": h.namespace,
                         "labels": {**h.labels, CLAIM_LABEL: "true"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "volumeName": names.volume, "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": size if isinstance(size, str)
                                                and size else node_cache.capacity}}}}


def status_manifest(h: Hydration, names: Names) -> dict:
    """The warmers' records, one key per node; created empty, then only the warmers write."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": names.status, "namespace": h.namespace,
                         "labels": dict(h.labels)}}


def access_manifests(h: Hydration, names: Names) -> list[dict]:
    """The warmer's ServiceAccount, its Role (its records, listing pods to prune records of
    nodes without a warmer, one pruner Lease) and both bindings; the slot Role itself is
    composed once per cluster by compose-fleet-cluster."""
    meta = {"name": names.warmer, "namespace": h.namespace, "labels": dict(h.labels)}
    subject = {"kind": "ServiceAccount", "name": names.warmer, "namespace": h.namespace}
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": False},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": dict(meta), "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [names.status],
             "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": [names.pruner], "verbs": ["get", "update"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["create"]},
        ]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": names.warmer},
         "subjects": [subject]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
         "metadata": {"name": names.slots_binding, "namespace": SYSTEM_NAMESPACE,
                      "labels": dict(h.labels)},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": SLOTS_ROLE},
         "subjects": [subject]},
    ]


def warmer_manifest(h: Hydration, names: Names, node_cache: NodeCache, image: str,
                    volume_claim: str, keep: frozenset[str]) -> dict:
    """One restricted warmer pod per pool node. Its service account token is mounted only
    because it patches its own record, takes a copy slot (a Lease in fleetcache-system) and
    prunes records of departed nodes; the engine pods never get one."""
    selector = {naming.LABEL_COMPONENT: "node-warmer",
                naming.LABEL_MODEL_CACHE: naming.label_value(h.cache)}
    pods = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    args = ["node-warm", "--source", VOLUME_MOUNT, "--dest", NODE_MOUNT,
            "--repo", h.repo, "--commit", h.commit, "--manifest-digest", h.manifest_digest,
            "--node", "$(NODE_NAME)",
            "--status-configmap", f"{h.namespace}/{names.status}",
            "--slots-namespace", SYSTEM_NAMESPACE,
            "--holder", f"{h.namespace}/{h.cache}/$(NODE_NAME)",
            "--prune-selector", pods, "--pruner-lease", names.pruner]
    for commit in sorted(keep):
        args += ["--keep", commit]
    container = {
        "name": "warmer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["fleetcache-agent"],
        "args": args,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                 "fieldPath": "spec.nodeName"}}},
                {"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "readinessProbe": {"exec": {"command": [
            "fleetcache-agent", "node-ready", "--dest", NODE_MOUNT, "--commit", h.commit,
            "--manifest-digest", h.manifest_digest]},
                           "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": dict(agent_job.RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "volume", "mountPath": VOLUME_MOUNT, "readOnly": True},
                         {"name": "node", "mountPath": NODE_MOUNT},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = {
        "serviceAccountName": names.warmer,
        "automountServiceAccountToken": True,
        "securityContext": {"runAsNonRoot": True, "runAsUser": agent_job.AGENT_UID,
                            "runAsGroup": agent_job.AGENT_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": node_cache.pool}},
        "containers": [container],
        "volumes": [{"name": "volume", "persistentVolumeClaim": {"claimName": volume_claim,
                                                                  "readOnly": True}},
                    {"name": "node", "persistentVolumeClaim": {"claimName": names.claim}},
                    {"name": "tmp", "emptyDir": {}}],
    }
    if node_cache.tolerations:
        pod["tolerations"] = [dict(t) for t in node_cache.tolerations]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": names.warmer, "namespace": h.namespace,
                         "labels": dict(h.labels)},
            "spec": {"selector": {"matchLabels": selector},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "100%"}},
                     "template": {"metadata": {"labels": {**h.labels, **selector}},
                                  "spec": pod}}}
