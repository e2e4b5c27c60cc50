"""Replicas of sources beyond the Hub, end to end (issue 12, contract §D): a ModelDeployment
over a ModelCache from an existing volume, and one over an S3 prefix fetched with layout
Flat, each applied together with its cache, get Ready replicas whose pod mounts the claim
the cluster's hydration reports read-only and whose FLEETCACHE_MODEL directory holds the
model's files; every composed pod passes Pod Security `restricted`.

Real function server, real agents (the verify and fetch Jobs) against an S3 API server on
loopback, fleetcache.simulation for Crossplane and the clusters: a claim is a directory, and
a nodeless cluster's engine Deployment is Available only when the directory
FLEETCACHE_MODEL names (through the pod's mounts) holds config.json.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.simulation import Cluster, ControlPlane, step, translate
from fleetcache.functions import naming, read
from fleetcache.functions.k8s import agent_job
from fleetcache.volume import flat_commit_path
from tests.support.k8s import restricted_violations
from tests.support.plane import control_plane

CLUSTERS = ("gpu-a", "gpu-b")
MODEL_BYTES = 1 << 20
DEADLINE = 120.0
FLAT_CACHE = "flat-chat"
ENGINE = {"image": "vllm/vllm-openai:v0.11.0", "args": ["--model=$(FLEETCACHE_MODEL)"]}


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"}}}


def model_deployment(name: str, cache: str) -> dict:
    """One replica on each cluster of the fleet."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": act.NAMESPACE},
            "spec": {"modelCacheRef": {"name": cache}, "replicas": len(CLUSTERS),
                     "maxReplicasPerCluster": 1,
                     "placement": {"clusterNames": list(CLUSTERS)}, "engine": ENGINE}}


@dataclass
class Replica:
    """What one engine Deployment on a cluster looks like once its ModelDeployment is Ready."""

    cluster: str
    claim: dict  # the pod's persistentVolumeClaim volume source
    mount: dict  # the engine's mount of it
    env: dict[str, str]
    model_dir: Path  # FLEETCACHE_MODEL on the cluster's disk
    available: bool


@dataclass
class Story:
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # per deployment
    replicas: dict[str, list[Replica]] = field(default_factory=dict)
    phases: dict[str, list[tuple]] = field(default_factory=dict)  # replica phases seen
    pod_specs: dict[tuple, dict] = field(default_factory=dict)  # every composed pod template


class Fleet:
    def __init__(self, control: ControlPlane, clusters: dict[str, Cluster], story: Story):
        self.control, self.clusters, self.story = control, clusters, story

    def round(self) -> None:
        step(self.control, self.clusters.values())
        for name, cluster in self.clusters.items():
            for (kind, namespace, obj_name), obj in cluster.objects.items():
                template = read.get_path(obj, "spec.template.spec")
                if kind in ("Job", "Deployment") and template:
                    self.story.pod_specs[(name, kind, namespace, obj_name)] = template
        for replica in self.control.of_kind("ModelReplica"):
            seen = (read.get_path(replica, "spec.delivery"), read.get_path(replica, "status.phase"))
            phases = self.story.phases.setdefault(replica["spec"]["deploymentName"], [])
            if seen not in phases:
                phases.append(seen)
        time.sleep(0.05)

    def until_ready(self, name: str) -> None:
        started = time.monotonic()
        while read.get_path(self.control.xrs.get(("ModelDeployment", act.NAMESPACE, name), {}),
                           "status.replicas.ready") != len(CLUSTERS):
            assert time.monotonic() - started < DEADLINE, f"timed out waiting for {name}"
            self.round()

    def replicas(self, name: str) -> list[Replica]:
        found = []
        for cluster_name, cluster in sorted(self.clusters.items()):
            for (kind, namespace, _), obj in cluster.objects.items():
                labels = read.get_path(obj, "metadata.labels", {}) or {}
                if kind != "Deployment" or namespace != act.NAMESPACE or \
                        labels.get(f"{naming.GROUP}/model-deployment") != name:
                    continue
                pod = obj["spec"]["template"]["spec"]
                container = pod["containers"][0]
                claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
                mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
                env = {e["name"]: e.get("value", "") for e in container["env"]}
                host = cluster.claim_mounts(namespace, pod, container)
                found.append(Replica(
                    cluster_name, claim["persistentVolumeClaim"], mount, env,
                    Path(translate(env["FLEETCACHE_MODEL"], host)),
                    read.get_path(obj, "status.conditions", [{}])[0].get("status") == "True"))
        return found


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    root = tmp_path_factory.mktemp("source-delivery")
    told = Story()
    with act.S3Store() as s3, rendering.function_process() as address, \
            rendering.channel_to(address) as channel:
        clusters = {name: Cluster(name, root / name) for name in CLUSTERS}
        control = control_plane(channel, clusters)
        fleet = Fleet(control, clusters, told)
        try:
            for name in CLUSTERS:
                control.apply(fleet_cluster(name))
            control.apply(act.grant(CLUSTERS))
            control.apply(act.credentials_secret())

            # an existing volume filled by hand: the files under subPath chat/
            told.files["volume-chat"] = act.model_files(MODEL_BYTES, seed=41)
            for name in CLUSTERS:
                act.fill_volume(clusters[name], told.files["volume-chat"])
            control.apply(act.volume_cache(CLUSTERS))
            control.apply(model_deployment("volume-chat", act.VOLUME_CACHE))
            fleet.until_ready("volume-chat")
            told.replicas["volume-chat"] = fleet.replicas("volume-chat")

            # an S3 prefix fetched flat to its commit's directory on the cache volume
            told.files["flat-chat"] = act.model_files(MODEL_BYTES, seed=42)
            s3.make_bucket(act.BUCKET)
            for path, data in told.files["flat-chat"].items():
                s3.put(act.BUCKET, f"{act.PREFIX}/{path}", data)
            flat = act.s3_cache(s3.endpoint, CLUSTERS)
            flat["metadata"]["name"] = FLAT_CACHE
            flat["spec"]["source"]["s3"]["layout"] = "Flat"
            control.apply(flat)
            control.apply(model_deployment("flat-chat", FLAT_CACHE))
            fleet.until_ready("flat-chat")
            told.replicas["flat-chat"] = fleet.replicas("flat-chat")
        finally:
            for cluster in clusters.values():
                cluster.stop()
    return told


def files_under(directory: Path, names) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in names
            if (directory / name).is_file()}


# --- an existing volume ---------------------------------------------------------------------


def test_volume_replicas_are_ready_on_every_cluster(story):
    assert sorted((r.cluster, r.available) for r in story.replicas["volume-chat"]) == \
        [(c, True) for c in CLUSTERS]


def test_volume_replicas_mount_the_users_claim_read_only(story):
    for replica in story.replicas["volume-chat"]:
        assert replica.claim == {"claimName": act.CLAIM, "readOnly": True}
        assert (replica.mount["mountPath"], replica.mount["readOnly"]) == \
            (agent_job.CACHE_MOUNT_PATH, True)


def test_volume_replicas_load_the_sub_path_holding_the_models_files(story):
    files = story.files["volume-chat"]
    for replica in story.replicas["volume-chat"]:
        assert replica.env["FLEETCACHE_MODEL"] == f"{agent_job.CACHE_MOUNT_PATH}/{act.SUB_PATH}"
        assert files_under(replica.model_dir, files) == files


def test_volume_replicas_pin_the_volumes_commit_and_get_no_hf_hub_cache(story):
    for replica in story.replicas["volume-chat"]:
        assert replica.env["FLEETCACHE_MODEL_REVISION"].startswith("vol-")
        assert "HF_HUB_CACHE" not in replica.env and replica.env["HF_HUB_OFFLINE"] == "1"


def test_volume_replicas_wait_while_the_volume_is_verified_then_run_from_it(story):
    seen = story.phases["volume-chat"]
    assert seen[-1] == ("Cache", "Ready")
    assert all(delivery in ("Wait", "Cache") for delivery, _ in seen)  # never Source


# --- an S3 prefix, layout Flat --------------------------------------------------------------


def test_flat_replicas_are_ready_on_every_cluster(story):
    assert sorted((r.cluster, r.available) for r in story.replicas["flat-chat"]) == \
        [(c, True) for c in CLUSTERS]


def test_flat_replicas_mount_the_cache_volume_read_only(story):
    for replica in story.replicas["flat-chat"]:
        assert replica.claim == {"claimName": naming.cache_volume_name(FLAT_CACHE),
                                 "readOnly": True}
        assert replica.mount["readOnly"] is True


def test_flat_replicas_load_their_commits_directory_holding_the_models_files(story):
    files = story.files["flat-chat"]
    for replica in story.replicas["flat-chat"]:
        assert replica.env["FLEETCACHE_MODEL"] == \
            flat_commit_path(agent_job.CACHE_MOUNT_PATH, replica.env["FLEETCACHE_MODEL_REVISION"])
        assert files_under(replica.model_dir, files) == files


def test_flat_replicas_pin_the_s3_commit_and_get_no_hf_hub_cache(story):
    for replica in story.replicas["flat-chat"]:
        assert replica.env["FLEETCACHE_MODEL_REVISION"].startswith("s3-")
        assert "HF_HUB_CACHE" not in replica.env


# --- pod security ---------------------------------------------------------------------------


def test_every_composed_pod_passes_restricted(story):
    kinds = {key[1] for key in story.pod_specs}
    assert {"Job", "Deployment"} <= kinds
    violations = {key: restricted_violations(spec) for key, spec in story.pod_specs.items()}
    assert {key: v for key, v in violations.items() if v} == {}
