"""Builders for ModelCache-level state: FleetClusters, ModelCaches and what they observe."""

from __future__ import annotations

import copy
from typing import Any

from fleetcache.functions import kit, model_cache

COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
DIGEST = "ab" * 32
GIB = 1024**3


def fleet_cluster(name: str, *, ready: bool = True, labels: dict | None = None,
                  cache: dict | None = None) -> dict:
    return {
        "apiVersion": kit.API_VERSION, "kind": "FleetCluster",
        "metadata": {"name": name, "labels": {"gpu": "h100"} if labels is None else labels},
        "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                         "name": f"{name}-kubeconfig", "key": "kubeconfig"},
                 **({"cache": cache} if cache else {})},
        "status": {"providerConfigName": name if ready else "",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": "Available" if ready else "Creating"}]},
    }


def model_cache_xr(**spec_overrides: Any) -> dict:
    spec = {
        "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"},
                   "allowPatterns": ["*.safetensors", "*.json"]},
        "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
        "rollout": {"maxConcurrent": 10},
        "minReady": 0,
    }
    spec.update(spec_overrides)
    return {"apiVersion": kit.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml", "uid": "1234"}, "spec": spec}


def resolved_status(xr: dict, *, commit: str = COMMIT, size: int = 3 * GIB) -> dict:
    """status.resolved as the composer latches it for this XR's current source."""
    return {"repo": xr["spec"]["source"]["huggingFace"]["repo"],
            "revision": xr["spec"]["source"]["huggingFace"].get("revision", "main"),
            "commit": commit, "bytes": size, "files": 5, "manifestDigest": DIGEST,
            "sourceDigest": model_cache.read_spec(xr["spec"]).source_digest,
            "compared": []}


def with_resolved(xr: dict, **kwargs: Any) -> dict:
    out = copy.deepcopy(xr)
    out.setdefault("status", {})["resolved"] = resolved_status(xr, **kwargs)
    return out


def observed_object(desired: dict, *, remote_status: dict | None = None,
                    data: dict | None = None) -> dict:
    """A composed provider-kubernetes Object as observed after it was applied."""
    out = copy.deepcopy(desired)
    remote = copy.deepcopy(kit.get_path(desired, "spec.forProvider.manifest") or {})
    if remote_status is not None:
        remote["status"] = remote_status
    if data is not None:
        remote["data"] = data
    out["status"] = {"atProvider": {"manifest": remote},
                     "conditions": [{"type": "Ready", "status": "True"}]}
    return out


def observed_hydration(desired: dict, phase: str, *, done: int = 0, total: int = 3 * GIB,
                       reason: str = "", message: str = "") -> dict:
    out = copy.deepcopy(desired)
    out["status"] = {"phase": phase,
                     "progress": {"bytesDone": done, "bytesTotal": total},
                     "reason": reason, "message": message}
    return out
