"""Builders for ModelDeployment-level state: deployments, the caches they reference (the
ModelCache and its ModelCacheHydrations), and replicas."""

from __future__ import annotations

import copy
from typing import Any

from fleetcache.functions import naming
from fleetcache.functions.composers import model_deployment
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.views import model_replica as model_replica_view
from tests.support.fleet import COMMIT, DIGEST, GIB

NAMESPACE = "ml"
CACHE = "qwen"
CLUSTER = "gpu-east-1"
SNAPSHOT = f"{agent_job.CACHE_MOUNT_PATH}/hub/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}"
ENGINE = {"image": "vllm/vllm-openai:v0.11.0",
          "args": ["--model=$(FLEETCACHE_MODEL)", "--served-model-name=qwen"]}


def deployment(**spec: Any) -> dict:
    base: dict = {"modelCacheRef": {"name": CACHE}, "replicas": 1,
                  "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                  "engine": copy.deepcopy(ENGINE)}
    base.update(spec)
    base = {k: v for k, v in base.items() if v is not None}
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE, "uid": "42"}, "spec": base}


def cache_row(name: str, phase: str, **extra: Any) -> dict:
    """One cluster's standing: what its ModelCacheHydration's status says."""
    row = {"name": name, "phase": phase, "bytesDone": 3 * GIB if phase == "Ready" else 0,
           "bytesTotal": 3 * GIB, "reason": "", "message": ""}
    row.update(extra)
    return row


def model_cache(*rows: dict, commit: str | None = COMMIT, name: str = CACHE) -> dict:
    """The ModelCache: its placement names every row's cluster; status.resolved the commit."""
    status: dict = {}
    if commit:
        status["resolved"] = {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": commit,
                              "bytes": 3 * GIB, "files": 5, "manifestDigest": DIGEST}
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": "team-a"},
                     "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"}},
                     "placement": {"clusterNames": [r["name"] for r in rows] or ["x"]}},
            "status": status}


def hydration(row: dict, commit: str | None = COMMIT, cache: str = CACHE) -> dict:
    """The row's cluster's ModelCacheHydration of `cache`, pinned to `commit`, as its
    composer reports it (servingCommit, when the row has one, of the same repo)."""
    status = {"phase": row["phase"], "reason": row["reason"], "message": row["message"],
              "progress": {"bytesDone": row["bytesDone"], "bytesTotal": row["bytesTotal"]}}
    if "servingCommit" in row:
        status.update(servingCommit=row["servingCommit"], servingRepo="Qwen/Qwen3-0.6B")
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": naming.child_name(cache, row["name"]), "namespace": NAMESPACE,
                         "labels": {naming.LABEL_MODEL_CACHE: naming.label_value(cache),
                                    naming.LABEL_CLUSTER: naming.label_value(row["name"])}},
            "spec": {"clusterName": row["name"], "modelCacheName": cache,
                     "commit": commit or "", "manifestDigest": DIGEST if commit else ""},
            "status": status}


def cache_required(*rows: dict, commit: str | None = COMMIT, name: str = CACHE
                   ) -> dict[str, list[dict]]:
    """What compose-model-deployment requires of its cache: the ModelCache and one
    ModelCacheHydration per row."""
    return {model_deployment.MODEL_CACHE_KEY: [model_cache(*rows, commit=commit, name=name)],
            model_deployment.HYDRATIONS_KEY: [hydration(r, commit, name) for r in rows]}


NO_CACHE = {model_deployment.MODEL_CACHE_KEY: [], model_deployment.HYDRATIONS_KEY: []}


REPLICA_ENGINE = {"image": "vllm/vllm-openai:v0.11.0", "args": ["--model=$(FLEETCACHE_MODEL)"]}


def engine_digest(engine: dict) -> str:
    return model_replica_view.Engine.of(engine).digest


def replica_xr(delivery: str = "Cache", **spec: Any) -> dict:
    """A ModelReplica as `deployment(engine=REPLICA_ENGINE)` composes it."""
    base: dict = {"deploymentName": "chat", "replica": 0, "clusterName": CLUSTER,
                  "delivery": delivery}
    if delivery in ("Cache", "Source"):
        base["model"] = {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": COMMIT}
        base["engineDigest"] = engine_digest(REPLICA_ENGINE)
    if delivery == "Cache":
        base["cache"] = {"modelCacheName": CACHE, "volumeName": naming.cache_volume_name(CACHE),
                         "mountPath": agent_job.CACHE_MOUNT_PATH, "snapshotPath": SNAPSHOT,
                         "commit": COMMIT}
    if delivery in ("Wait", "Fail"):
        base["hydration"] = {"phase": "Hydrating", "bytesDone": GIB, "bytesTotal": 4 * GIB,
                             "reason": "", "message": ""}
    base.update(spec)
    return {"apiVersion": naming.API_VERSION, "kind": "ModelReplica",
            "metadata": {"name": naming.child_name("chat", "0"), "namespace": NAMESPACE},
            "spec": base}
