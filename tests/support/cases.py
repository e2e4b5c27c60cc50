"""Representative requests for every composer, shared by the gRPC and render tests.

Each case is one the table tests specify in detail; here they only have to come out of
every transport the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_cache, model_cache_hydration
from fleetcache.functions.decisions import sources
from fleetcache.functions.k8s import agent_job
from fleetcache.volume import flat_commit_path
from tests.support import builders
from tests.support.deployments import NO_CACHE, REPLICA_ENGINE, cache_required, cache_row, deployment, replica_xr
from tests.support.fleet import (
    GIB,
    fleet_cluster,
    grant,
    grant_admitting,
    model_cache_xr,
    observed_hydration,
    with_resolved,
)


@dataclass(frozen=True)
class Case:
    id: str
    composite: dict
    observed: dict = field(default_factory=dict)
    required: dict = field(default_factory=dict)


FLEET = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2"), fleet_cluster("gpu-west-1")]


def _case_of(case_id: str, request: protocol.Request) -> Case:
    return Case(case_id, request.composite, request.observed, request.required)


def _hydrating() -> Case:
    first = protocol.Request(composite=builders.hydration_xr(),
                        required={"fleet-cluster": [fleet_cluster("gpu-east-1")]})
    observed = builders.observe(model_cache_hydration.compose(first))
    return _case_of("hydration-prerequisites-observed",
                    builders.hydration_request(observed=observed))


def _node_tier_warming() -> Case:
    """A tier-Node hydration whose volume is Ready on a cluster with spec.nodeCache: the
    node objects composed, the warmer DaemonSet reporting 3 nodes, whose records say one
    Ready, one copying and one failed."""
    cluster = fleet_cluster("gpu-east-1")
    cluster["spec"]["nodeCache"] = {"nodeSelector": {"matchLabels": {"gpu": "h100"}},
                                    "path": "/mnt/nvme0", "capacityPerNode": "2Ti"}
    cluster["status"]["nodeCache"] = {"admitted": ["ml/qwen"], "evicted": [], "waiting": []}
    xr = builders.with_status(builders.hydration_xr(tier="Node"), phase="Ready", resolved={
        "commit": builders.COMMIT, "manifestDigest": builders.DIGEST},
        readyTime="2026-12-01T00:00:00Z")  # latched: a process answers at its own clock
    required = {"fleet-cluster": [cluster], "model-replicas": []}
    first = protocol.Request(composite=xr, required=required)

    def record(phase: str, reason: str | None = None) -> str:
        return json.dumps({"phase": phase, "commit": builders.COMMIT, "bytesDone": GIB,
                           "bytesTotal": 3 * GIB, "freeBytes": 900 * GIB, "reason": reason,
                           "message": None})

    observed = builders.observe(model_cache_hydration.compose(first), states={
        "volume": builders.pvc("Bound"),
        "node-warmer": {"desiredNumberScheduled": 3, "numberReady": 1}},
        data={"node-status": {"gpu-a": record("Ready"), "gpu-b": record("Copying"),
                              "gpu-c": record("Failed", "NodeCacheNotDedicated")}})
    return Case("hydration-node-tier-warming", xr, observed, required)


def _granted(xr: dict, **required: list[dict]) -> dict:
    """What a ModelCache requires, with the grant that admitted it (or `required`'s own)."""
    return {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)], **required}


def _three_phase_cache() -> Case:
    xr = with_resolved(model_cache_xr())
    desired = model_cache.compose(protocol.Request(composite=xr, required=_granted(xr))).desired
    observed = {
        "hydration-gpu-east-1": observed_hydration(desired["hydration-gpu-east-1"][0], "Ready",
                                                   done=3 * GIB),
        "hydration-gpu-east-2": observed_hydration(desired["hydration-gpu-east-2"][0],
                                                   "Hydrating", done=GIB),
        "hydration-gpu-west-1": observed_hydration(desired["hydration-gpu-west-1"][0], "Failed",
                                                   reason="DigestMismatch", message="bad bytes"),
    }
    return Case("model-cache-three-phases", xr, observed, _granted(xr))


def _retained_cache() -> Case:
    """A cache with retention whose gpu-west-1 left the placement (latched before any clock
    the cases run at) while a replica mounts its copy: kept with spec.removal, listed in
    status.retained."""
    xr = with_resolved(model_cache_xr(retention={"pinned": True, "ttlAfterLastUse": "72h",
                                                 "afterRemoval": "30m"}))
    xr["status"]["retained"] = [{"cluster": "gpu-west-1", "since": "2026-12-01T10:00:00Z",
                                 "until": "2026-12-01T11:30:00Z", "reason": "Mounted"}]
    desired = model_cache.compose(protocol.Request(composite=xr, required=_granted(xr))).desired
    observed = {}
    for key, (hydration, _) in desired.items():
        observed[key] = observed_hydration(hydration, "Ready", done=3 * GIB)
        observed[key]["status"].update(mountedBy=1 if key.endswith("west-1") else 0,
                                       pinned=True, lapsed=False,
                                       lastUsedTime="2026-12-01T11:00:00Z")
    fleet = FLEET[:2] + [fleet_cluster("gpu-west-1", labels={"gpu": "a10"})]
    return Case("model-cache-retains-a-departed-cluster", xr, observed,
                _granted(xr, **{"fleet-clusters": fleet}))


def _fleet_cluster_deciding_capacity() -> Case:
    """A FleetCluster with a budget over hydrations in two namespaces: one evicted (least
    recently used, above the high watermark), one mounted and kept, one admitted, one
    waiting."""
    def hydration(namespace: str, name: str, size: str, hour: int, **status) -> dict:
        return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
                "metadata": {"name": name, "namespace": namespace,
                             "creationTimestamp": f"2026-12-01T{hour:02}:00:00Z",
                             "labels": {naming.LABEL_CLUSTER: "gpu-east-1"}},
                "spec": {"clusterName": "gpu-east-1", "storage": {"size": size}},
                "status": status}

    def ready(used: int, last_used: str, mounted: int) -> dict:
        return {"phase": "Ready", "servingCommit": "a" * 40, "usedBytes": used * GIB,
                "pinned": False, "mountedBy": mounted, "placedReplicas": mounted,
                "lastUsedTime": last_used}

    hydrations = [
        hydration("team-a", "llama", "50Gi", 1, **ready(50, "2026-12-01T05:00:00Z", 0)),
        hydration("team-b", "qwen", "40Gi", 2, **ready(40, "2026-12-01T06:00:00Z", 2)),
        hydration("team-a", "mistral", "20Gi", 3, phase="Pending"),
        hydration("team-b", "deepseek-r1", "90Gi", 4, phase="Pending"),
    ]
    return Case("fleet-cluster-decides-capacity",
                builders.fleet_cluster_xr(providerConfigRef={"name": "gpu-east-1"},
                                          cache={"capacity": "100Gi"}),
                required={"model-cache-hydrations": hydrations})


def _fleet_cluster_node_tier() -> Case:
    """A FleetCluster with spec.nodeCache over three tier-Node caches: one warm on its
    nodes and mounted, one admitted, one waiting for room per node; the node agent
    DaemonSet reporting two of three pool nodes ready."""
    def hydration(cache: str, gib: int, hour: int, **status) -> dict:
        return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
                "metadata": {"name": f"{cache}-gpu-east-1", "namespace": "ml",
                             "creationTimestamp": f"2026-12-01T{hour:02}:00:00Z",
                             "labels": {naming.LABEL_CLUSTER: "gpu-east-1"}},
                "spec": {"clusterName": "gpu-east-1", "modelCacheName": cache, "tier": "Node",
                         "commit": builders.COMMIT, "bytes": gib * GIB,
                         "storage": {"size": f"{gib + 1}Gi"}},
                "status": status}

    xr = builders.fleet_cluster_xr(providerConfigRef={"name": "gpu-east-1"}, nodeCache={
        "nodeSelector": {"matchLabels": {"gpu": "h100"}}, "path": "/mnt/nvme0",
        "capacityPerNode": "100Gi", "maxConcurrentNodes": 2})
    hydrations = [
        hydration("qwen", 50, 1, nodeTier={"phase": "Ready", "readyNodes": 3,
                                           "minFreeBytes": 60 * GIB},
                  servingCommit=builders.COMMIT, mountedBy=1, placedReplicas=1, pinned=False),
        hydration("mistral", 20, 2),
        hydration("llama", 40, 3),
    ]
    daemonset = {"status": {"atProvider": {"manifest": {
        "status": {"desiredNumberScheduled": 3, "numberReady": 2}}}}}
    return Case("fleet-cluster-decides-node-capacity", xr, {"node-agent": daemonset},
                required={"model-cache-hydrations": hydrations})


def _grant_deciding_three_caches() -> Case:
    """A ModelCacheGrant of 100Gi over the gpu=h100 clusters deciding three caches in
    creation order: one admitted, one past the projection (OverQuota), one naming a cluster
    the grant does not cover (OutsideGrant)."""
    def cache(name: str, hour: int, size_gib: int, clusters: list[str]) -> dict:
        return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
                "metadata": {"name": name, "namespace": "ml",
                             "creationTimestamp": f"2026-12-01T{hour:02}:00:00Z"},
                "spec": {"grantRef": {"name": "team-a"},
                         "source": {"huggingFace": {"repo": f"org/{name}"}},
                         "placement": {"clusterNames": clusters}},
                "status": {"resolved": {"commit": "c" * 40, "bytes": size_gib * GIB,
                                        "manifestDigest": name * 8}}}

    grant = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
             "metadata": {"name": "team-a", "namespace": "ml"},
             "spec": {"clusters": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                      "quota": {"bytes": "100Gi"}}}
    fleet = FLEET[:2] + [fleet_cluster("gpu-west-1", labels={"gpu": "a10"})]
    caches = [cache("qwen", 1, 30, ["gpu-east-1", "gpu-east-2"]),
              cache("llama", 2, 50, ["gpu-east-1", "gpu-east-2"]),
              cache("mistral", 3, 10, ["gpu-west-1"])]
    hydrations = [{"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
                   "metadata": {"name": f"qwen-{cluster}", "namespace": "ml"},
                   "spec": {"modelCacheName": "qwen", "clusterName": cluster,
                            "manifestDigest": "qwen" * 8, "bytes": 30 * GIB}}
                  for cluster in ("gpu-east-1", "gpu-east-2")]
    return Case("model-cache-grant-admits-one-of-three", grant,
                required={"model-caches": caches, "fleet-clusters": fleet,
                          "model-cache-hydrations": hydrations})


def _s3_hydration_fetching() -> Case:
    """An S3 hydration whose ModelCache latched the pinned manifest: the manifest ConfigMap
    and the fetch Job pinned to it (functions/sources.py)."""
    manifest = [{"path": "config.json", "size": 10, "sha256": "1" * 64, "etag": '"e1"'}]
    digest = sources.digest_of_manifest(manifest)
    commit = "s3-" + "5" * 40
    xr = builders.hydration_xr(source={"s3": {"bucket": "models", "prefix": "llama"},
                                       "allowPatterns": [], "ignorePatterns": []},
                               commit=commit, manifestDigest=digest)
    cache = {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
             "metadata": {"name": "qwen", "namespace": "ml"},
             "status": {"resolved": {"commit": commit, "manifestDigest": digest,
                                     "manifest": manifest}}}
    required = {"fleet-cluster": [fleet_cluster("gpu-east-1")], "model-cache": [cache]}
    first = model_cache_hydration.compose(protocol.Request(composite=xr, required=required))
    return Case("hydration-s3-fetching-a-pinned-manifest", xr, builders.observe(first),
                required)


def _mirror_waiting_for_publisher() -> Case:
    xr = with_resolved(model_cache_xr(distribution={"mirror": {"s3": {"bucket": "mirror"}}}))
    return Case("model-cache-readers-wait-for-the-mirror", xr, required=_granted(xr))


def _deployment_of_an_existing_volume() -> Case:
    """Replicas of an existing-volume cache: one Ready on the user's claim (flat files at
    its subPath), one waiting while its cluster verifies (no source an engine loads)."""
    required = cache_required(cache_row("gpu-east-1", "Ready"),
                              cache_row("gpu-east-2", "Hydrating"), commit="vol-" + "3" * 40)
    required["model-cache"][0]["spec"]["source"] = {
        "volume": {"claimName": "preloaded", "subPath": "chat"}}
    required["model-cache"][0]["status"]["resolved"].update(repo="", revision="")
    for hydration in required["model-cache-hydrations"]:
        hydration["status"]["volumeName"] = "preloaded"
    return Case("model-deployment-existing-volume",
                deployment(replicas=2, maxReplicasPerCluster=1),
                required={"fleet-clusters": FLEET, **required})


def _flat_replica() -> Case:
    xr = replica_xr("Cache", cache={
        "modelCacheName": "qwen", "volumeName": "qwen-cache", "layout": "Flat",
        "mountPath": agent_job.CACHE_MOUNT_PATH,
        "snapshotPath": flat_commit_path(agent_job.CACHE_MOUNT_PATH, "s3-" + "5" * 40),
        "commit": "s3-" + "5" * 40})
    return Case("model-replica-flat-s3", xr,
                required={"fleet-cluster": [fleet_cluster("gpu-east-1")],
                          "model-deployment": [deployment(engine=REPLICA_ENGINE)]})


CASES: list[Case] = [
    Case("model-cache-asks-for-fleet-clusters", model_cache_xr()),
    Case("model-cache-resolving", model_cache_xr(), required=_granted(model_cache_xr())),
    Case("model-cache-grant-not-found", model_cache_xr(),
         required={"fleet-clusters": FLEET, "model-cache-grant": []}),
    Case("model-cache-token-secret-missing",
         model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}}),
         required={"fleet-clusters": FLEET, "model-cache-grant": [grant()],
                   "token-secret": []}),
    _three_phase_cache(),
    _retained_cache(),
    Case("model-cache-bad-spec-is-fatal", {**model_cache_xr(), "spec": {"placement": 3}}),
    Case("model-cache-named-cluster-not-found",
         with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]})),
         required=_granted(with_resolved(
             model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]})))),
    Case("model-cache-malformed-status-resolved",
         {**model_cache_xr(), "status": {"resolved": ["not", "an", "object"]}},
         required=_granted(model_cache_xr())),
    Case("fleet-cluster-from-kubeconfig", builders.fleet_cluster_xr()),
    Case("fleet-cluster-adopts-provider-config",
         builders.fleet_cluster_xr(providerConfigRef={"name": "existing"})),
    _fleet_cluster_deciding_capacity(),
    _fleet_cluster_node_tier(),
    _grant_deciding_three_caches(),
    _case_of("hydration-first-call", builders.hydration_request()),
    _hydrating(),
    _node_tier_warming(),
    _s3_hydration_fetching(),
    _mirror_waiting_for_publisher(),
    Case("model-deployment-cache-ready-hydrating-absent",
         deployment(replicas=3, maxReplicasPerCluster=1),
         required={"fleet-clusters": FLEET,
                   **cache_required(cache_row("gpu-east-1", "Ready"),
                                    cache_row("gpu-east-2", "Hydrating"))}),
    Case("model-deployment-cache-not-found", deployment(replicas=2),
         required={"fleet-clusters": FLEET, **NO_CACHE}),
    Case("model-replica-cache", replica_xr("Cache"),
         required={"fleet-cluster": [fleet_cluster("gpu-east-1")]}),
    Case("model-replica-wait", replica_xr("Wait"),
         required={"fleet-cluster": [fleet_cluster("gpu-east-1")]}),
    _deployment_of_an_existing_volume(),
    _flat_replica(),
]
