"""Builders for composer tests: composites, observed Objects, Jobs and PVCs in a given state.

The FleetCluster and observed-Object builders live in tests.support.fleet and are
re-exported here, so every composer's tests build the same shapes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fleetcache.functions import naming, protocol
from fleetcache.functions.k8s import agent_job
from tests.support.fleet import COMMIT, DIGEST, GIB, fleet_cluster, observed_object

__all__ = [
    "COMMIT", "DIGEST", "GIB", "fleet_cluster", "observed_object", "fleet_cluster_xr",
    "hydration_xr", "hydration_request", "cache_replica", "job_running", "job_complete", "job_failed",
    "job_failed_exit", "pvc", "observe", "with_status",
]

NAMESPACE = "ml"
CLUSTER = "gpu-east-1"
CACHE = "qwen"


def fleet_cluster_xr(name: str = CLUSTER, **spec: Any) -> dict:
    """A FleetCluster composite as compose-fleet-cluster sees it (no status yet)."""
    if not spec:
        spec = {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                        "name": f"{name}-kubeconfig", "key": "kubeconfig"}}
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": name}, "spec": spec}


def hydration_xr(*, token: bool = False, **spec_overrides: Any) -> dict:
    """A ModelCacheHydration as compose-model-cache writes it."""
    hf: dict = {"repo": "Qwen/Qwen3-0.6B", "revision": "main",
                "endpoint": "https://huggingface.co"}
    if token:
        hf["tokenSecretRef"] = {"name": "hf-token", "key": "HF_TOKEN"}
    spec = {
        "clusterName": CLUSTER,
        "modelCacheName": CACHE,
        "source": {"huggingFace": hf, "allowPatterns": ["*.safetensors", "*.json"],
                   "ignorePatterns": []},
        "commit": COMMIT,
        "manifestDigest": DIGEST,
        "bytes": 3 * GIB,
        "storage": {"size": "4Gi"},
    }
    spec.update(spec_overrides)
    name = naming.child_name(CACHE, CLUSTER)
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {naming.LABEL_MODEL_CACHE: CACHE, naming.LABEL_CLUSTER: CLUSTER}},
            "spec": spec}


def with_status(xr: dict, **status: Any) -> dict:
    out = copy.deepcopy(xr)
    out["status"] = status
    return out


def cache_replica(commit: str, index: int = 0, *, cluster: str = CLUSTER,
                  delivery: str = "Cache") -> dict:
    """A ModelReplica of CACHE as compose-model-deployment writes it, mounting `commit`."""
    spec: dict = {"deploymentName": "chat", "replica": index, "clusterName": cluster,
                  "delivery": delivery}
    if delivery == "Cache":
        spec["cache"] = {"modelCacheName": CACHE, "volumeName": naming.cache_volume_name(CACHE),
                         "mountPath": agent_job.CACHE_MOUNT_PATH, "commit": commit,
                         "snapshotPath": f"{agent_job.CACHE_MOUNT_PATH}/hub/snapshots/{commit}"}
    return {"apiVersion": naming.API_VERSION, "kind": "ModelReplica",
            "metadata": {"name": f"chat-{index}", "namespace": NAMESPACE,
                         "labels": {naming.LABEL_MODEL_CACHE: CACHE, naming.LABEL_CLUSTER: cluster}},
            "spec": spec}


def hydration_request(xr: dict | None = None, *, observed: dict | None = None,
                      cluster: dict | None | str = "ready",
                      replicas: list[dict] | None = None) -> protocol.Request:
    """cluster: "ready", "not-ready", "missing" (fetched, none found), "unfetched", or a dict;
    replicas: the ModelReplicas of the cache on the cluster (None: not fetched yet)."""
    xr = hydration_xr() if xr is None else xr
    required: dict[str, list[dict]] = {}
    if replicas is not None:
        required["model-replicas"] = replicas
    if cluster == "ready":
        required["fleet-cluster"] = [fleet_cluster(CLUSTER)]
    elif cluster == "not-ready":
        required["fleet-cluster"] = [fleet_cluster(CLUSTER, ready=False)]
    elif cluster == "missing":
        required["fleet-cluster"] = []
    elif isinstance(cluster, dict):
        required["fleet-cluster"] = [cluster]
    return protocol.Request(composite=xr, observed=observed or {}, required=required)


def composed_key(outcome: protocol.Outcome, prefix: str) -> str:
    """The key a composer gave its Job: a Job's key carries its template's digest
    (agent_job.template_digest), so tests find it by the prefix it starts with ("" if none)."""
    return next((k for k in outcome.desired if k.startswith(prefix)), "")


def by_key(values: Mapping[str, dict], key: str) -> dict | None:
    """`values[key]`, or the value given under a prefix of `key` ending in "-" (a Job's
    key without its template digest)."""
    if key in values:
        return values[key]
    return next((v for k, v in values.items() if k.endswith("-") and key.startswith(k)), None)


# --- remote states ------------------------------------------------------------------------


def job_running() -> dict:
    return {"startTime": "2026-01-01T00:00:00Z", "active": 1}


def job_complete() -> dict:
    return {"startTime": "2026-01-01T00:00:00Z", "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True"}]}


def job_failed(reason: str, message: str) -> dict:
    return {"startTime": "2026-01-01T00:00:00Z", "failed": 1,
            "conditions": [{"type": "Failed", "status": "True", "reason": reason,
                            "message": message}]}


def job_failed_exit(code: int) -> dict:
    """A Job failed by its podFailurePolicy, as the Job controller words it."""
    return job_failed("PodFailurePolicy",
                      f"Container agent for pod ml/hydrate-abc failed with exit code {code} "
                      "matching FailJob rule at index 0")


def pvc(phase: str) -> dict:
    return {"phase": phase}


def observe(outcome: protocol.Outcome, *, skip: tuple[str, ...] = (),
            states: Mapping[str, dict] | None = None,
            data: Mapping[str, dict] | None = None) -> dict:
    """Every desired resource of `outcome` as observed after applying it (but `skip`):
    `states[key]` becomes the remote object's status, `data[key]` its data."""
    states, data = states or {}, data or {}
    observed = {}
    for key, (resource, _) in outcome.desired.items():
        if key in skip:
            continue
        if resource.get("kind") == "Object":
            observed[key] = observed_object(resource, remote_status=by_key(states, key),
                                            data=by_key(data, key))
        else:
            observed[key] = copy.deepcopy(resource)
    return observed
