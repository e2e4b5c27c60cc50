"""Issue 11's "Done when", end to end: a ModelCache on storage tier Node ends with every
opted-in pool node holding the verified commit, fetched from the Hub once per cluster; a
node that joins is warmed without the Hub; a removed node leaves the counts; replicas land
on warm nodes and mount the node copy; every composed pod but the node agent stays within
Pod Security `restricted`; a corrupt cluster volume never reaches a node.

Real function server, real agents (fetch, node-prepare, node-label, node-warm, select, the
node-ready probe) against a test hub per cluster, fleetcache.simulation for Crossplane and
the clusters with their nodes. One story is played (the fixture), observations are
recorded as it goes, and each test reads one behaviour off them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import node_tier as act
from fleetcache.devtools.simulation import Cluster, ControlPlane, step
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read
from tests.support.k8s import restricted_violations
from tests.support.plane import control_plane

EAST, WEST = act.CLUSTERS
OPTED_IN = ("gpu-1", "gpu-2")
NOT_IN_POOL = ("gpu-3", "control-plane")  # gpu-3 has not opted in; control-plane is excluded
DEADLINE = 90.0
MODEL_BYTES = 3 * 2**20
NODE_AGENT = ("DaemonSet", "fleetcache-system", "fleetcache-node-agent")


@dataclass
class Story:
    """What the fixture observed while the story played."""

    commit: str = ""
    digest: str = ""
    label_key: str = ""
    model_bytes: int = 0
    hub_bytes: dict[str, int] = field(default_factory=dict)  # after the first convergence
    warm: dict[str, dict[str, str]] = field(default_factory=dict)  # cluster -> node -> digest ("" none)
    join: dict = field(default_factory=dict)
    removal: list[dict] = field(default_factory=list)  # east's node tier, rounds after removal
    cache_sums: dict = field(default_factory=dict)
    replicas: list[dict] = field(default_factory=list)
    not_ready: dict = field(default_factory=dict)  # east's node tier with a node NotReady
    pod_specs: dict[tuple, dict] = field(default_factory=dict)  # every composed pod template
    corrupt: dict = field(default_factory=dict)


class Fleet:
    def __init__(self, control: ControlPlane, clusters: dict[str, Cluster],
                 hubs: dict[str, TestHub], story: Story):
        self.control, self.clusters, self.hubs, self.story = control, clusters, hubs, story

    def round(self) -> None:
        step(self.control, self.clusters.values())
        for name, cluster in self.clusters.items():
            for (kind, namespace, obj_name), obj in cluster.objects.items():
                template = read.get_path(obj, "spec.template.spec")
                if kind in ("Job", "Deployment", "DaemonSet") and template:
                    self.story.pod_specs[(name, kind, namespace, obj_name)] = template
        time.sleep(0.05)

    def until(self, done, what: str) -> None:
        started = time.monotonic()
        while not done():
            assert time.monotonic() - started < DEADLINE, f"timed out waiting for {what}"
            self.round()

    def hydration(self, cluster: str) -> dict:
        return next((h for h in self.control.of_kind("ModelCacheHydration")
                     if h["spec"]["clusterName"] == cluster), {})

    def tier(self, cluster: str) -> dict:
        return read.get_path(self.hydration(cluster), "status.nodeTier", {}) or {}

    def warm(self, cluster: str, nodes: int) -> bool:
        tier = self.tier(cluster)
        return tier.get("phase") == "Ready" and tier.get("desiredNodes") == nodes \
            == tier.get("readyNodes")

    def node_copy(self, cluster: str, node: str) -> Path:
        return self.clusters[cluster].nodes[node].host(
            f"{act.CACHE_PATH}/{act.NAMESPACE}/{act.CACHE}")

    def verified_digest(self, cluster: str, node: str) -> str:
        """The manifest digest `fleetcache-agent verify` finds re-hashing the node's copy
        ("" when the node holds none, or not the commit)."""
        dest = self.node_copy(cluster, node)
        marker = dest / ".fleetcache" / "node-ready.json"
        if not marker.is_file() or json.loads(marker.read_text()).get("commit") != \
                self.story.commit:
            return ""
        result = subprocess.run(
            [sys.executable, "-c", "from fleetcache.agent.cli import main; main()", "verify",
             "--dest", str(dest), "--repo", act.REPO, "--revision", self.story.commit,
             "--termination-log", os.devnull], capture_output=True, text=True, timeout=60)
        return json.loads(result.stdout).get("manifestDigest", "") if result.returncode == 0 \
            else f"verify exited {result.returncode}"

    def hub_traffic(self, cluster: str) -> tuple[int, int]:
        hub = self.hubs[cluster]
        return hub.bytes_sent(), len(hub.requests())


def story_labelled(fleet: Fleet, cluster: str) -> set[str]:
    """Nodes carrying the warm label of the story's commit."""
    return {name for name, node in fleet.clusters[cluster].nodes.items()
            if node.labels.get(fleet.story.label_key) == fleet.story.commit}


def play(fleet: Fleet) -> None:
    story = fleet.story
    control = fleet.control
    for cluster in act.CLUSTERS:
        control.apply(act.fleet_cluster(cluster))
    control.apply(act.grant())
    control.apply(act.model_cache(fleet.hubs[EAST].endpoint))
    fleet.until(lambda: all(fleet.warm(c, len(OPTED_IN)) for c in act.CLUSTERS),
                "every opted-in node to hold the commit")
    story.commit = fleet.hydration(EAST)["spec"]["commit"]
    story.digest = fleet.hydration(EAST)["spec"]["manifestDigest"]
    story.label_key = fleet.tier(EAST)["labelKey"]
    story.hub_bytes = {c: fleet.hub_traffic(c)[0] for c in act.CLUSTERS}
    story.warm = {c: {n: fleet.verified_digest(c, n) for n in fleet.clusters[c].nodes}
                  for c in act.CLUSTERS}

    # a node joins east's pool; mid-way another is removed
    east = fleet.clusters[EAST]
    before = fleet.hub_traffic(EAST)
    east.label_node(act.JOINING, dict(act.OPT_IN))
    fleet.until(lambda: fleet.tier(EAST).get("desiredNodes") == 3, "the joining node to count")
    east.remove_node(act.LEAVING)
    for _ in range(3):
        fleet.round()
        story.removal.append(dict(fleet.tier(EAST)))
    fleet.until(lambda: fleet.warm(EAST, 2) and act.JOINING in story_labelled(fleet, EAST),
                "the joining node to be warm and labelled")
    story.join = {"before": before, "after": fleet.hub_traffic(EAST),
                  "digest": fleet.verified_digest(EAST, act.JOINING),
                  "label": east.nodes[act.JOINING].labels.get(story.label_key)}
    fleet.until(lambda: read.get_path(control.of_kind("ModelCache")[0],
                                     "status.nodeTier.readyClusters") == 2,
                "the ModelCache to count both clusters Ready again")
    story.cache_sums = dict(control.of_kind("ModelCache")[0]["status"]["nodeTier"])

    # replicas with delivery node Prefer
    control.apply(act.model_deployment())
    fleet.until(lambda: len(act.replica_pods(fleet.clusters)) == 2 and all(
        pod.ready for _, pod in act.replica_pods(fleet.clusters)), "the replicas to run")
    for cluster, pod in act.replica_pods(fleet.clusters):
        replica = next(r for r in control.of_kind("ModelReplica")
                       if r["spec"]["clusterName"] == cluster)
        story.replicas.append({
            "cluster": cluster, "node": pod.node,
            "node_label": fleet.clusters[cluster].nodes[pod.node].labels.get(story.label_key),
            "select": act.selected(pod),
            "model": os.path.realpath(pod.containers[0].env["FLEETCACHE_MODEL"]),
            "node_copy": os.path.realpath(fleet.node_copy(cluster, pod.node)),
            "delivery": (replica["spec"]["delivery"], read.get_path(replica, "status.delivery"))})

    # a node turns NotReady: its warmer pod is not Ready, so its copy stops counting
    east.set_node_ready(act.JOINING, False)
    fleet.until(lambda: fleet.tier(EAST).get("readyNodes") == 1,
                "the NotReady node to stop counting as ready")
    story.not_ready = dict(fleet.tier(EAST))

    # west's volume is corrupted; then a node joins there
    volume = fleet.clusters[WEST].volume_dir(act.NAMESPACE, naming.cache_volume_name(act.CACHE))
    snapshot = next(volume.glob(f"hub/*/snapshots/{story.commit}"))
    corrupted = max(snapshot.iterdir(), key=lambda p: p.stat().st_size)  # a link to its blob
    blob = corrupted.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    fleet.clusters[WEST].label_node(act.JOINING, dict(act.OPT_IN))
    fleet.until(lambda: fleet.tier(WEST).get("failedNodes") == 1, "the joining node to fail")
    for _ in range(5):  # no retry turns it Ready
        fleet.round()
    dest = fleet.node_copy(WEST, act.JOINING)
    story.corrupt = {
        "tier": dict(fleet.tier(WEST)),
        "marker": (dest / ".fleetcache" / "node-ready.json").exists(),
        "file": any(dest.glob(f"hub/*/snapshots/{story.commit}/{corrupted.name}")),
        "corrupt_bytes": any(p.is_file() and p.read_bytes() == bytes(data)
                             for p in dest.rglob("*")),
        "label": fleet.clusters[WEST].nodes[act.JOINING].labels.get(story.label_key),
    }


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    root = tmp_path_factory.mktemp("node-tier")
    model = make_model(MODEL_BYTES, shards=2, seed=3)
    recorded = Story(model_bytes=sum(c.size for c in model.values()))
    with TestHub() as east_hub, TestHub() as west_hub, rendering.function_process() as address, \
            rendering.channel_to(address) as channel:
        hubs = {EAST: east_hub, WEST: west_hub}
        for hub in hubs.values():
            hub.add_repo(act.REPO, dict(model))
        clusters = {}
        for name in act.CLUSTERS:
            clusters[name] = Cluster(name, root / name, hubs[name].endpoint)
            for node, labels, runs_control_plane in act.NODES:
                clusters[name].add_node(node, labels, control_plane=runs_control_plane,
                                        filesystems=(act.CACHE_PATH,))
        control = control_plane(channel, clusters)
        try:
            play(Fleet(control, clusters, hubs, recorded))
        finally:
            for cluster in clusters.values():
                cluster.stop()
    return recorded


# --- every opted-in pool node holds the verified commit --------------------------------------


def test_every_opted_in_pool_node_holds_the_verified_commit(story):
    for cluster in act.CLUSTERS:
        assert {n: story.warm[cluster][n] for n in OPTED_IN} == \
            {n: story.digest for n in OPTED_IN}, cluster


def test_a_node_not_opted_in_and_the_control_plane_hold_nothing(story):
    for cluster in act.CLUSTERS:
        assert {n: story.warm[cluster][n] for n in NOT_IN_POOL} == {n: "" for n in NOT_IN_POOL}


def test_each_cluster_reads_the_model_from_the_hub_once_however_many_nodes_it_warms(story):
    for cluster in act.CLUSTERS:
        assert story.model_bytes <= story.hub_bytes[cluster] <= 1.05 * story.model_bytes


# --- churn ----------------------------------------------------------------------------------


def test_a_joining_node_is_warmed_without_a_single_request_to_the_hub(story):
    assert story.join["after"] == story.join["before"]
    assert story.join["digest"] == story.digest
    assert story.join["label"] == story.commit


def test_a_removed_node_stops_counting_at_the_first_reconcile_after_its_pod_is_gone(story):
    # round 1 reconciles before the DaemonSet controller acts on the removal; round 2 after
    assert [r["desiredNodes"] for r in story.removal[1:]] == [2, 2]
    assert all(r["readyNodes"] + r["downloadingNodes"] + r["failedNodes"] <= 2
               for r in story.removal[1:])


def test_a_not_ready_node_stays_desired_but_stops_counting_as_ready(story):
    assert (story.not_ready["desiredNodes"], story.not_ready["readyNodes"]) == (2, 1)
    assert story.not_ready["phase"] != "Ready"


def test_the_model_cache_sums_the_node_counts_of_its_clusters(story):
    assert {k: story.cache_sums[k] for k in ("desiredNodes", "readyNodes", "failedNodes",
                                             "readyClusters")} == \
        {"desiredNodes": 4, "readyNodes": 4, "failedNodes": 0, "readyClusters": 2}


# --- replicas on warm nodes -----------------------------------------------------------------


def test_replicas_land_on_warm_nodes_and_read_the_node_copy(story):
    assert len(story.replicas) == 2
    for replica in story.replicas:
        assert replica["node"] in OPTED_IN + (act.JOINING,)
        assert replica["node_label"] == story.commit
        assert replica["select"] == {"delivery": "node", "reason": "NodeCopyReady"}
        assert replica["model"].startswith(replica["node_copy"] + os.sep)
        assert replica["delivery"] == ("Node", "Node")


# --- restricted -----------------------------------------------------------------------------


def test_every_composed_pod_but_the_node_agent_passes_restricted(story):
    kinds = {key[1] for key in story.pod_specs}
    assert {"Job", "Deployment", "DaemonSet"} <= kinds
    violations = {key: restricted_violations(spec) for key, spec in story.pod_specs.items()
                  if key[1:] != NODE_AGENT}
    assert {key: v for key, v in violations.items() if v} == {}


# --- a corrupt volume -----------------------------------------------------------------------


def test_a_corrupt_cluster_volume_never_reaches_a_node(story):
    assert story.corrupt["marker"] is False  # no node-ready.json: select reads the volume
    assert story.corrupt["file"] is False  # the corrupted file is not in the node's snapshot
    assert story.corrupt["corrupt_bytes"] is False
    assert story.corrupt["label"] is None


def test_the_node_a_corrupt_volume_failed_is_named_with_its_reason(story):
    tier = story.corrupt["tier"]
    assert (tier["failedNodes"], tier["readyNodes"]) == (1, 2)
    assert tier["firstFailure"]["node"] == act.JOINING
    assert tier["firstFailure"]["reason"] == "DigestMismatch"


# --- the simulation's placement rules (no agents run: the pods' image is not the agent) -----


def nodes_cluster(tmp_path: Path) -> Cluster:
    cluster = Cluster("c", tmp_path)
    for node, labels, runs_control_plane in act.NODES:
        cluster.add_node(node, labels, control_plane=runs_control_plane,
                         filesystems=(act.CACHE_PATH,))
    return cluster


def pool_affinity() -> dict:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in {**act.POOL, **act.OPT_IN}.items()]}]}


def engine_pod(**spec) -> dict:
    return {"metadata": {"labels": {"app": "engine"}},
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}], **spec}}


def test_a_daemonset_runs_on_matching_untainted_nodes_and_leaves_one_that_stops_matching(
        tmp_path):
    cluster = nodes_cluster(tmp_path)
    cluster.apply({"apiVersion": "apps/v1", "kind": "DaemonSet",
                   "metadata": {"name": "d", "namespace": "ns"},
                   "spec": {"template": engine_pod(affinity={"nodeAffinity": {
                       "requiredDuringSchedulingIgnoredDuringExecution": pool_affinity()}})}})
    placed = []
    for change in (lambda: None, lambda: cluster.label_node("gpu-2", {act.OPT_IN_KEY: None})):
        change()
        cluster.tick(time.monotonic())
        placed.append((sorted(p.node for p in cluster.pods[("DaemonSet", "ns", "d")]),
                       cluster.objects[("DaemonSet", "ns", "d")]["status"][
                           "desiredNumberScheduled"]))
    cluster.stop()
    assert placed == [(["gpu-1", "gpu-2"], 2), (["gpu-1"], 1)]


def test_a_pod_whose_volume_affinity_admits_no_node_stays_pending_with_the_schedulers_words(
        tmp_path):
    cluster = nodes_cluster(tmp_path)
    cluster.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv"},
                   "spec": {"capacity": {"storage": "1Gi"}, "storageClassName": "local",
                            "hostPath": {"path": act.CACHE_PATH, "type": "Directory"},
                            "claimRef": {"namespace": "ns", "name": "claim"},
                            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "In",
                                                       "values": ["nowhere"]}]}]}}}})
    cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": "claim", "namespace": "ns"},
                   "spec": {"storageClassName": "local", "volumeName": "pv",
                            "resources": {"requests": {"storage": "1Gi"}}}})
    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "engine", "namespace": "ns"},
                   "spec": {"replicas": 1, "template": engine_pod(volumes=[
                       {"name": "cache", "persistentVolumeClaim": {"claimName": "claim"}}])}})
    for _ in range(2):
        cluster.tick(time.monotonic())
    status = cluster.objects[("Deployment", "ns", "engine")]["status"]
    pods = [(p.node, p.phase) for p in cluster.pods[("Deployment", "ns", "engine")]]
    cluster.stop()
    assert cluster.objects[("PersistentVolumeClaim", "ns", "claim")]["status"]["phase"] == "Bound"
    assert pods == [("", "Pending")]
    assert status["conditions"][0]["status"] == "False"
    assert status["conditions"][0]["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint, "
        "3 node(s) had volume node affinity conflict.")


def test_a_preferred_node_affinity_wins_among_the_nodes_that_fit(tmp_path):
    cluster = nodes_cluster(tmp_path)
    cluster.label_node("gpu-2", {"warm": "yes"})
    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "engine", "namespace": "ns"},
                   "spec": {"replicas": 1, "template": engine_pod(affinity={"nodeAffinity": {
                       "preferredDuringSchedulingIgnoredDuringExecution": [
                           {"weight": 100, "preference": {"matchExpressions": [
                               {"key": "warm", "operator": "In", "values": ["yes"]}]}}]}})}})
    cluster.tick(time.monotonic())
    nodes = [p.node for p in cluster.pods[("Deployment", "ns", "engine")]]
    cluster.stop()
    assert nodes == ["gpu-2"]


def test_a_cordoned_node_takes_no_new_pod_but_keeps_its_daemon_pods(tmp_path):
    cluster = nodes_cluster(tmp_path)
    for name in ("gpu-1", "gpu-2"):
        cluster.cordon_node(name)
    cluster.apply({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "ns"},
                   "spec": {"template": engine_pod(affinity={"nodeAffinity": {
                       "requiredDuringSchedulingIgnoredDuringExecution": pool_affinity()}})}})
    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "engine", "namespace": "ns"},
                   "spec": {"replicas": 1, "template": engine_pod(affinity={"nodeAffinity": {
                       "preferredDuringSchedulingIgnoredDuringExecution": [
                           {"weight": 100, "preference": {"matchExpressions": [
                               {"key": act.OPT_IN_KEY, "operator": "Exists"}]}}]}})}})
    cluster.tick(time.monotonic())
    engine = [p.node for p in cluster.pods[("Deployment", "ns", "engine")]]
    daemons = sorted(p.node for p in cluster.pods[("DaemonSet", "ns", "d")])
    node = cluster.objects[("Node", "", "gpu-1")]
    cluster.stop()
    assert engine == ["gpu-3"] and daemons == ["gpu-1", "gpu-2"]
    assert node["spec"]["unschedulable"] is True
