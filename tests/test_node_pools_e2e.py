"""Node pools a tenant is authorized for (issue 23 item 4, design/node-pools.md), end to end:
one cluster with two pools, `default` (spec.nodeCache) and `gpu-large` (spec.nodePools[],
its own nodeSelector, optInLabel and path), and two tenants. Tenant A's grant names no pool
(default only): its cache in gpu-large is refused with PoolNotGranted and nothing of it
reaches the cluster, while its cache in default warms the default pool's opted-in nodes.
Tenant B's grant names gpu-large: its cache warms exactly gpu-large's opted-in nodes.

Real function server over gRPC (every composer once through it), real agents against a test
hub, fleetcache.simulation for Crossplane and the cluster with its nodes. One story is played
(the fixture), observations are recorded as it goes, and each test reads one behaviour off
them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from fleetcache import reasons
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Cluster, ControlPlane, step
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read
from fleetcache.functions.node_tier.node_agent import KEEP_KEY
from fleetcache.functions.node_tier.warmer_names import SYSTEM_NAMESPACE
from tests.support.plane import control_plane

CLUSTER = "gpu-pools"
REPO = "fleetcache-e2e/pool-chat"
DEADLINE = 90.0
MODEL_BYTES = 2**20

DEFAULT_PATH, LARGE_PATH = "/mnt/nvme0", "/mnt/nvme1"
DEFAULT_SELECTOR = {"gpu.fleetcache.dev/class": "standard"}
LARGE_SELECTOR = {"gpu.fleetcache.dev/large": "true"}
DEFAULT_OPT_IN = {"fleetcache.dev/node-cache": "enabled"}  # the default optInLabel
LARGE_OPT_IN_KEY, LARGE_OPT_IN_VALUE = "fleetcache.dev/gpu-large-cache", "yes"
LARGE_OPT_IN = {LARGE_OPT_IN_KEY: LARGE_OPT_IN_VALUE}

# (node, labels, control plane). Every node has a disk at both pools' paths, so a warmer
# placed on the wrong node would succeed there: only placement keeps a node empty.
NODES = (
    ("std-1", {**DEFAULT_SELECTOR, **DEFAULT_OPT_IN}, False),
    ("std-2", {**DEFAULT_SELECTOR, **DEFAULT_OPT_IN}, False),
    ("std-3", dict(DEFAULT_SELECTOR), False),  # in default's selector, not opted in
    ("large-1", {**LARGE_SELECTOR, **LARGE_OPT_IN}, False),
    ("large-2", {**LARGE_SELECTOR, **LARGE_OPT_IN}, False),
    ("large-3", {**LARGE_SELECTOR, **DEFAULT_OPT_IN}, False),  # the other pool's opt-in only
    ("control-plane", {**DEFAULT_SELECTOR, **LARGE_SELECTOR, **DEFAULT_OPT_IN, **LARGE_OPT_IN},
     True),  # matches both pools, opted in to both: excluded from both
)
DEFAULT_WARM = {"std-1", "std-2"}
LARGE_WARM = {"large-1", "large-2"}

TENANT_A, TENANT_B = "tenant-a", "tenant-b"
REFUSED = (TENANT_A, "large-chat")  # tenant A's cache in gpu-large, which A's grant lacks
LARGE = (TENANT_B, "large-chat")  # tenant B's cache in gpu-large
DEFAULT = (TENANT_A, "std-chat")  # tenant A's cache in default
WARMED = {LARGE: (LARGE_PATH, LARGE_WARM), DEFAULT: (DEFAULT_PATH, DEFAULT_WARM)}


# --- what the platform team and the tenants apply -------------------------------------------


def fleet_cluster() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": CLUSTER, "labels": {"fleetcache.dev/tier": "pools"}},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{CLUSTER}-kubeconfig"},
                     "cache": {"storageClassName": "fast-rwx"},
                     "nodeCache": {"nodeSelector": {"matchLabels": dict(DEFAULT_SELECTOR)},
                                   "path": DEFAULT_PATH, "capacityPerNode": "100Gi",
                                   "maxConcurrentNodes": 2},
                     "nodePools": [{"name": "gpu-large",
                                    "nodeSelector": {"matchLabels": dict(LARGE_SELECTOR)},
                                    "optInLabel": {"key": LARGE_OPT_IN_KEY,
                                                   "value": LARGE_OPT_IN_VALUE},
                                    "path": LARGE_PATH, "capacityPerNode": "200Gi",
                                    "maxConcurrentNodes": 2}]}}


def grant(namespace: str, **spec) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": namespace, "namespace": namespace},
            "spec": {"clusters": {"clusterNames": [CLUSTER]}, "quota": {"bytes": "2Gi"},
                     **spec}}


def model_cache(cache: tuple[str, str], endpoint: str, **storage) -> dict:
    namespace, name = cache
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"grantRef": {"name": namespace},
                     "source": {"huggingFace": {"repo": REPO, "endpoint": endpoint}},
                     "storage": {"tier": "Node", **storage},
                     "placement": {"clusterNames": [CLUSTER]}}}


# --- the story ------------------------------------------------------------------------------


@dataclass
class Story:
    """What the fixture observed while the story played."""

    commit: str = ""
    model_bytes: int = 0
    digest: str = ""
    refused_row: dict = field(default_factory=dict)  # tenant A's grant row of REFUSED
    refused_condition: dict = field(default_factory=dict)  # REFUSED's Admitted condition
    refused_hydrations: int = 0  # REFUSED's ModelCacheHydrations, at the end
    refused_objects: list = field(default_factory=list)  # cluster objects naming REFUSED
    tiers: dict = field(default_factory=dict)  # cache -> its hydration's status.nodeTier
    warmer_nodes: dict = field(default_factory=dict)  # namespace -> nodes a warmer pod ran on
    copies: dict = field(default_factory=dict)  # cache -> node -> verified digest ("" none)
    agent_nodes: dict = field(default_factory=dict)  # node agent DaemonSet -> nodes it runs on
    keep_lists: dict = field(default_factory=dict)  # keep-list ConfigMap -> caches it keeps
    pool_demand: dict = field(default_factory=dict)  # status.nodePools[].name -> demandBytes


class Fleet:
    def __init__(self, control: ControlPlane, cluster: Cluster, story: Story):
        self.control, self.cluster, self.story = control, cluster, story

    def round(self) -> None:
        step(self.control, [self.cluster])
        for (kind, namespace, _), pods in self.cluster.pods.items():
            if kind == "DaemonSet" and namespace in (TENANT_A, TENANT_B):
                self.story.warmer_nodes.setdefault(namespace, set()).update(
                    pod.node for pod in pods if pod.node)
        time.sleep(0.05)

    def until(self, done, what: str) -> None:
        started = time.monotonic()
        while not done():
            assert time.monotonic() - started < DEADLINE, f"timed out waiting for {what}"
            self.round()

    def cache(self, cache: tuple[str, str]) -> dict:
        return next((c for c in self.control.of_kind("ModelCache")
                     if (c["metadata"]["namespace"], c["metadata"]["name"]) == cache), {})

    def hydrations(self, cache: tuple[str, str]) -> list[dict]:
        return [h for h in self.control.of_kind("ModelCacheHydration")
                if (h["metadata"].get("namespace"), h["spec"]["modelCacheName"]) == cache]

    def tier(self, cache: tuple[str, str]) -> dict:
        found = self.hydrations(cache)
        return (read.get_path(found[0], "status.nodeTier", {}) or {}) if found else {}

    def warm(self, cache: tuple[str, str], nodes: int) -> bool:
        tier = self.tier(cache)
        return tier.get("phase") == "Ready" and tier.get("desiredNodes") == nodes \
            == tier.get("readyNodes")

    def grant_row(self, cache: tuple[str, str]) -> dict:
        namespace, name = cache
        grant_xr = next((g for g in self.control.of_kind("ModelCacheGrant")
                         if g["metadata"]["namespace"] == namespace), {})
        return next((r for r in read.get_path(grant_xr, "status.caches", []) or []
                     if r.get("name") == name), {})

    def verified_digest(self, cache: tuple[str, str], path: str, node: str) -> str:
        """The manifest digest `fleetcache-agent verify` finds re-hashing the node's copy of
        `cache` under `path` ("" when the node holds none, or not the commit)."""
        namespace, name = cache
        dest = self.cluster.nodes[node].host(f"{path}/{namespace}/{name}")
        marker = dest / ".fleetcache" / "node-ready.json"
        if not marker.is_file() or json.loads(marker.read_text()).get("commit") != \
                self.story.commit:
            return ""
        result = subprocess.run(
            [sys.executable, "-c", "from fleetcache.agent.cli import main; main()", "verify",
             "--dest", str(dest), "--repo", REPO, "--revision", self.story.commit,
             "--termination-log", os.devnull], capture_output=True, text=True, timeout=60)
        return json.loads(result.stdout).get("manifestDigest", "") if result.returncode == 0 \
            else f"verify exited {result.returncode}"

    def anything_at(self, cache: tuple[str, str]) -> list[str]:
        """Every node path under either pool's directory of `cache` that exists."""
        namespace, name = cache
        return [f"{node}:{path}" for node in self.cluster.nodes for path in
                (DEFAULT_PATH, LARGE_PATH)
                if self.cluster.nodes[node].host(f"{path}/{namespace}/{name}").exists()]


def play(fleet: Fleet, endpoint: str) -> None:
    story, control = fleet.story, fleet.control
    control.apply(fleet_cluster())
    control.apply(grant(TENANT_A))  # no spec.nodePools: default only
    control.apply(grant(TENANT_B, nodePools=["gpu-large"]))
    control.apply(model_cache(REFUSED, endpoint, nodePool="gpu-large"))
    control.apply(model_cache(LARGE, endpoint, nodePool="gpu-large"))
    control.apply(model_cache(DEFAULT, endpoint))
    fleet.until(lambda: fleet.warm(LARGE, len(LARGE_WARM)) and
                fleet.warm(DEFAULT, len(DEFAULT_WARM)),
                "both admitted caches to be warm on their pools' opted-in nodes")
    for _ in range(3):  # a warmer that strayed would have had rounds to land and copy
        fleet.round()
    story.commit = fleet.hydrations(LARGE)[0]["spec"]["commit"]
    story.digest = fleet.hydrations(LARGE)[0]["spec"]["manifestDigest"]
    story.tiers = {cache: dict(fleet.tier(cache)) for cache in WARMED}
    story.copies = {cache: {node: fleet.verified_digest(cache, path, node)
                            for node in fleet.cluster.nodes}
                    for cache, (path, _) in WARMED.items()}
    story.agent_nodes = {name: {pod.node for pod in pods}
                         for (kind, namespace, name), pods in fleet.cluster.pods.items()
                         if kind == "DaemonSet" and namespace == SYSTEM_NAMESPACE}
    story.keep_lists = {name: set(json.loads(obj["data"][KEEP_KEY]))
                        for (kind, namespace, name), obj in fleet.cluster.objects.items()
                        if kind == "ConfigMap" and namespace == SYSTEM_NAMESPACE
                        and KEEP_KEY in obj.get("data", {})}
    story.pool_demand = {row["name"]: row["demandBytes"] for row in read.get_path(
        control.of_kind("FleetCluster")[0], "status.nodePools", [])}
    story.refused_row = dict(fleet.grant_row(REFUSED))
    story.refused_condition = next(
        (c for c in read.get_path(fleet.cache(REFUSED), "status.conditions", []) or []
         if c["type"] == "Admitted"), {})
    story.refused_hydrations = len(fleet.hydrations(REFUSED))
    story.refused_objects = sorted(
        {f"{kind} {ns}/{name}" for kind, ns, name in fleet.cluster.objects
         if ns == REFUSED[0] and REFUSED[1] in name} |
        {f"node path {where}" for where in fleet.anything_at(REFUSED)})


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    root = tmp_path_factory.mktemp("node-pools")
    model = make_model(MODEL_BYTES, shards=2, seed=5)
    recorded = Story(model_bytes=sum(content.size for content in model.values()))
    with TestHub() as hub, rendering.function_process() as address, \
            rendering.channel_to(address) as channel:
        hub.add_repo(REPO, dict(model))
        cluster = Cluster(CLUSTER, root / CLUSTER, hub.endpoint)
        for node, labels, runs_control_plane in NODES:
            cluster.add_node(node, labels, control_plane=runs_control_plane,
                             filesystems=(DEFAULT_PATH, LARGE_PATH))
        control = control_plane(channel, {CLUSTER: cluster})
        try:
            play(Fleet(control, cluster, recorded), hub.endpoint)
        finally:
            cluster.stop()
    return recorded


# --- a pool the grant does not name ---------------------------------------------------------


def test_a_grant_without_node_pools_refuses_a_cache_in_another_pool_naming_the_remedy(story):
    row = story.refused_row
    assert (row["admitted"], row["reason"]) == (False, reasons.PoolNotGranted)
    assert row["message"].startswith(
        f"spec.storage.nodePool gpu-large is not a pool ModelCacheGrant {TENANT_A} grants "
        "(spec.nodePools: default)")
    assert reasons.remedy(reasons.PoolNotGranted) in row["message"]


def test_the_refused_cache_says_why_on_its_admitted_condition(story):
    condition = story.refused_condition
    assert (condition["status"], condition["reason"]) == ("False", reasons.PoolNotGranted)
    assert "spec.nodePools: default" in condition["message"]
    assert reasons.remedy(reasons.PoolNotGranted).rstrip(".") in condition["message"]


def test_nothing_of_the_refused_cache_is_composed_on_the_cluster(story):
    assert story.refused_hydrations == 0
    assert story.refused_objects == []


# --- a pool the grant names -----------------------------------------------------------------


def test_a_cache_in_a_granted_pool_warms_exactly_that_pools_opted_in_nodes(story):
    copies = story.copies[LARGE]
    assert {node for node, digest in copies.items() if digest} == LARGE_WARM
    assert {copies[node] for node in LARGE_WARM} == {story.digest}
    assert (story.tiers[LARGE]["desiredNodes"], story.tiers[LARGE]["readyNodes"]) == (2, 2)


def test_no_warmer_of_a_granted_pool_runs_outside_its_pools_opted_in_nodes(story):
    assert story.warmer_nodes[TENANT_B] == LARGE_WARM


# --- the default pool -----------------------------------------------------------------------


def test_a_cache_in_the_default_pool_warms_only_the_default_pools_opted_in_nodes(story):
    copies = story.copies[DEFAULT]
    assert {node for node, digest in copies.items() if digest} == DEFAULT_WARM
    assert {copies[node] for node in DEFAULT_WARM} == {story.digest}
    assert story.warmer_nodes[TENANT_A] == DEFAULT_WARM


# --- one node agent, one keep-list, one capacity row per pool -------------------------------


def test_each_pools_node_agent_runs_on_that_pools_opted_in_nodes_only(story):
    assert story.agent_nodes == {"fleetcache-node-agent": DEFAULT_WARM,
                                 "fleetcache-node-agent-gpu-large": LARGE_WARM}


def test_each_pools_keep_list_names_only_its_own_caches(story):
    assert story.keep_lists == {"fleetcache-node-dirs": {"/".join(DEFAULT)},
                                "fleetcache-node-dirs-gpu-large": {"/".join(LARGE)}}


def test_each_pools_capacity_row_counts_only_its_own_cache(story):
    assert story.pool_demand["default"] == story.pool_demand["gpu-large"] == story.model_bytes, \
        story.pool_demand
