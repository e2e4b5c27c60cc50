"""Builders for ModelDeployment-level state: deployments, the caches they reference,
and replicas."""

from __future__ import annotations

import copy
from typing import Any

from fleetcache.functions import kit
from tests.support.fleet import COMMIT, GIB

NAMESPACE = "ml"
CACHE = "qwen"
CLUSTER = "gpu-east-1"
SNAPSHOT = f"{kit.CACHE_MOUNT_PATH}/hub/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}"
ENGINE = {"image": "vllm/vllm-openai:v0.11.0",
          "args": ["--model=$(FLEETCACHE_MODEL)", "--served-model-name=qwen"]}


def deployment(**spec: Any) -> dict:
    base: dict = {"modelCacheRef": {"name": CACHE}, "replicas": 1,
                  "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                  "engine": copy.deepcopy(ENGINE)}
    base.update(spec)
    base = {k: v for k, v in base.items() if v is not None}
    return {"apiVersion": kit.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE, "uid": "42"}, "spec": base}


def cache_row(name: str, phase: str, **extra: Any) -> dict:
    row = {"name": name, "phase": phase, "bytesDone": 3 * GIB if phase == "Ready" else 0,
           "bytesTotal": 3 * GIB, "reason": "", "message": ""}
    row.update(extra)
    return row


def model_cache(*rows: dict, commit: str | None = COMMIT) -> dict:
    status: dict = {"clusters": list(rows)}
    if commit:
        status["resolved"] = {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": commit,
                              "bytes": 3 * GIB, "files": 5}
    return {"apiVersion": kit.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"}},
                     "placement": {"clusterNames": [r["name"] for r in rows] or ["x"]}},
            "status": status}


def replica_xr(delivery: str = "Cache", **spec: Any) -> dict:
    base: dict = {
        "deploymentName": "chat", "replica": 0, "clusterName": CLUSTER, "delivery": delivery,
        "model": {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": COMMIT},
        "engine": {"image": "vllm/vllm-openai:v0.11.0",
                   "args": ["--model=$(FLEETCACHE_MODEL)"], "env": [], "port": 8000,
                   "readinessPath": "/health"},
    }
    if delivery == "Cache":
        base["cache"] = {"modelCacheName": CACHE, "volumeName": kit.cache_volume_name(CACHE),
                         "mountPath": kit.CACHE_MOUNT_PATH, "snapshotPath": SNAPSHOT,
                         "commit": COMMIT}
    if delivery in ("Wait", "Fail"):
        base["hydration"] = {"phase": "Hydrating", "bytesDone": GIB, "bytesTotal": 4 * GIB,
                             "reason": "", "message": ""}
    base.update(spec)
    return {"apiVersion": kit.API_VERSION, "kind": "ModelReplica",
            "metadata": {"name": kit.child_name("chat", "0"), "namespace": NAMESPACE},
            "spec": base}
