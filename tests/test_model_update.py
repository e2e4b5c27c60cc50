"""A model update, end to end: the revision moves to a new commit and every replica keeps
serving its cluster's verified snapshot until the new one is Ready there.

Real function server, real agents against the test hub, fleetcache.simulation for
Crossplane and the clusters. Its Deployments are Available only while the snapshot the
engine's environment names exists on the volume, so a replica mounting a commit its
cluster does not hold (or one the agent deleted) shows up as unavailable.
"""

from __future__ import annotations

import time

import pytest

from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Cluster, files_bytes
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read
from tests.support.plane import PlayedFleet, control_plane

NAMESPACE = "ml"
REPO = "fleetcache-test/update"
CLUSTERS = ("gpu-a", "gpu-b")
DEADLINE = 60.0


def model_cache_grant() -> dict:
    """The namespace's grant: both clusters, room for both commits on each."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": "team", "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": list(CLUSTERS)}, "quota": {"bytes": "1Gi"}}}


def model_cache(endpoint: str, revision: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": "team"},
                     "source": {"huggingFace": {"repo": REPO, "revision": revision,
                                                "endpoint": endpoint}},
                     "placement": {"clusterNames": list(CLUSTERS)},
                     "rollout": {"maxConcurrent": 1}}}


def model_deployment() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": "chat"}, "replicas": 2,
                     "maxReplicasPerCluster": 1,
                     "placement": {"clusterNames": list(CLUSTERS)},
                     "engine": {"image": "vllm/vllm-openai:v0.11.0",
                                "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"}}}


class Fleet(PlayedFleet):
    def until(self, done, what: str) -> None:
        started = time.monotonic()
        while not done():
            assert time.monotonic() - started < DEADLINE, f"timed out waiting for {what}"
            self.round()

    def kind(self, kind: str) -> list[dict]:
        return self.control.of_kind(kind)

    def hydrated(self, commit: str) -> bool:
        hydrations = self.kind("ModelCacheHydration")
        return len(hydrations) == len(CLUSTERS) and all(
            h["spec"]["commit"] == commit and h.get("status", {}).get("phase") == "Ready"
            for h in hydrations)

    def pruned(self, commit: str) -> bool:
        hydrations = self.kind("ModelCacheHydration")
        return len(hydrations) == len(CLUSTERS) and all(
            commit in h.get("status", {}).get("prunedCommits", [])
            and commit not in h.get("status", {}).get("storedCommits", [commit])
            for h in hydrations)

    def replicas(self) -> list[dict]:
        return self.kind("ModelReplica")

    def serving(self) -> dict[str, str]:
        """cluster -> the commit its replica mounts from the cache ("" if not on Cache)."""
        return {r["spec"]["clusterName"]: read.get_path(r, "spec.cache.commit", "")
                for r in self.replicas()}

    def unavailable(self) -> list[str]:
        """Replicas whose engine could not start on their cluster right now."""
        out = []
        for replica in self.replicas():
            cluster = self.clusters[replica["spec"]["clusterName"]]
            for key, obj in cluster.objects.items():
                if key[0] == "Deployment" and not read.is_true(obj, "Available"):
                    out.append(f"{cluster.name}/{key[2]}")
        return sorted(set(out))


@pytest.fixture(scope="module")
def update(tmp_path_factory):
    """Play v1 to Ready with replicas on Cache, then move the revision to v2 and record
    every round until the fleet serves v2."""
    root = tmp_path_factory.mktemp("model-update")
    with TestHub() as hub, rendering.function_process() as address, \
            rendering.channel_to(address) as channel:
        v1 = hub.add_repo(REPO, make_model(4 * 2**20, shards=2, seed=1), revision="v1")
        v2 = hub.add_repo(REPO, make_model(4 * 2**20, shards=2, seed=2), revision="v2")
        clusters = {name: Cluster(name, root / name) for name in CLUSTERS}
        control = control_plane(channel, clusters)
        fleet = Fleet(control, clusters)
        try:
            for name in CLUSTERS:
                control.apply(fleet_cluster(name))
            control.apply(model_cache_grant())
            control.apply(model_cache(hub.endpoint, "v1"))
            fleet.until(lambda: fleet.hydrated(v1), "v1 to hydrate everywhere")
            control.apply(model_deployment())
            fleet.until(lambda: fleet.serving() == {c: v1 for c in CLUSTERS}
                        and not fleet.unavailable() and len(fleet.replicas()) == 2,
                        "replicas on the v1 cache")

            volumes = {name: cluster.volume_dir(NAMESPACE, naming.cache_volume_name("chat"))
                       for name, cluster in clusters.items()}
            before = {name: files_bytes(volume) for name, volume in volumes.items()}
            control.apply(model_cache(hub.endpoint, "v2"))
            rounds = []
            started = time.monotonic()
            while not (fleet.hydrated(v2) and fleet.serving() == {c: v2 for c in CLUSTERS}):
                assert time.monotonic() - started < DEADLINE, "timed out waiting for v2"
                fleet.round()
                deployment = fleet.kind("ModelDeployment")[0]
                rounds.append({"serving": fleet.serving(), "unavailable": fleet.unavailable(),
                               "deliveries": {r["spec"]["delivery"] for r in fleet.replicas()},
                               "replicas": dict(deployment["status"]["replicas"]),
                               "cache": dict(fleet.kind("ModelCache")[0]["status"]),
                               "volume_bytes": {name: files_bytes(volume)
                                                for name, volume in volumes.items()}})
            fleet.round()  # the last replica change reaches its cluster
            unavailable_after = fleet.unavailable()
            peak = {name: max(r["volume_bytes"][name] for r in rounds) for name in CLUSTERS}
            fleet.until(lambda: fleet.pruned(v1), "v1 to be pruned everywhere")
            after = {name: files_bytes(volume) for name, volume in volumes.items()}
            model_dir = f"hub/models--{REPO.replace('/', '--')}"
            kept = {name: {"snapshots": sorted(p.name for p in (volume / model_dir /
                                                                "snapshots").iterdir()),
                           "config": (volume / model_dir / "snapshots" / v2 /
                                      "config.json").is_file(),
                           "refs": {p.name: p.read_text()
                                    for p in (volume / model_dir / "refs").iterdir()}}
                    for name, volume in volumes.items()}
            hydrations = fleet.kind("ModelCacheHydration")
            unavailable_after_prune = fleet.unavailable()

            cache_key = ("ModelCache", NAMESPACE, "chat")
            refusal = control.delete(cache_key)
            for _ in range(3):
                fleet.round()
            held = bool(fleet.kind("ModelCache")) and fleet.unavailable() == []
            control.delete(("ModelDeployment", NAMESPACE, "chat"))
            fleet.until(lambda: not fleet.kind("ModelCache"), "the held deletion to replay")
            fleet.until(lambda: not fleet.kind("ModelCacheHydration")
                        and not any(volume.exists() for volume in volumes.values()),
                        "the garbage collector to delete what the cache composed")
            yield {"v1": v1, "v2": v2, "rounds": rounds, "volumes": volumes,
                   "unavailable_after": unavailable_after, "before": before, "peak": peak,
                   "after": after, "kept": kept, "hydrations": hydrations,
                   "unavailable_after_prune": unavailable_after_prune,
                   "refusal": refusal, "held": held,
                   "left": [k for k in control.xrs if k[0] == "ModelCacheHydration"]}
        finally:
            for cluster in clusters.values():
                cluster.stop()


def test_no_replica_leaves_the_cache_during_the_update(update):
    assert all(r["deliveries"] == {"Cache"} for r in update["rounds"])


def test_every_replica_stays_available_through_the_update(update):
    assert [r["unavailable"] for r in update["rounds"] if r["unavailable"]] == []
    assert update["unavailable_after"] == []


def test_a_cluster_serves_v1_while_the_other_already_serves_v2(update):
    v1, v2 = update["v1"], update["v2"]
    assert any(sorted(r["serving"].values()) == sorted([v1, v2]) for r in update["rounds"])


def test_the_deployment_counts_replicas_still_on_the_previous_commit(update):
    assert max(r["replicas"]["previousCommit"] for r in update["rounds"]) >= 1
    assert all(r["replicas"]["cache"] == 2 for r in update["rounds"])


def test_clusters_not_ready_on_v2_report_v1_as_their_serving_commit(update):
    rows = [row for r in update["rounds"] for row in r["cache"]["clusters"]]
    assert any(row["phase"] == "Hydrating" for row in rows)
    assert all(row["servingCommit"] == update["v1"] for row in rows if row["phase"] != "Ready")


def test_the_model_cache_stays_available_while_it_rolls_out(update):
    assert {read.condition_of({"status": r["cache"]}, "Available").get("status")
            for r in update["rounds"]} == {"True"}


def test_each_volume_held_both_commits_while_replicas_moved(update):
    for name in CLUSTERS:
        assert update["peak"][name] > 1.9 * update["before"][name]


def test_once_no_replica_serves_the_old_commit_it_is_pruned_and_its_bytes_freed(update):
    for name in CLUSTERS:
        assert update["kept"][name]["snapshots"] == [update["v2"]]
        assert update["kept"][name]["config"]
        assert update["after"][name] < 0.55 * update["peak"][name]


def test_the_hydrations_say_what_they_pruned_and_what_they_hold(update):
    for hydration in update["hydrations"]:
        assert hydration["status"]["prunedCommits"] == [update["v1"]]
        assert hydration["status"]["storedCommits"] == [update["v2"]]
        assert hydration["status"]["usedBytes"] > 0


def test_pruning_never_takes_a_replicas_snapshot_away(update):
    assert update["unavailable_after_prune"] == []


def test_every_volume_names_the_kept_commit_by_its_revision_and_drops_the_pruned_ref(update):
    for name in CLUSTERS:
        assert update["kept"][name]["refs"] == {"v2": update["v2"]}


def test_deleting_the_cache_while_replicas_mount_it_is_refused_and_nothing_stops(update):
    assert "in-use by 2 usage(s)" in update["refusal"]  # one Cache replica per cluster
    assert update["held"]


def test_the_refused_deletion_replays_once_no_replica_mounts_the_cache(update):
    assert update["left"] == []
    assert not any(volume.exists() for volume in update["volumes"].values())
