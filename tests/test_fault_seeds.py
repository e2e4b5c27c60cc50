"""Faults at random over a tiny simulated fleet (devtools/simulation/faults.py), with every
invariant of devtools/simulation/invariants.py checked after every round and once the faults
stop (design/simulation.md, "Faults at random").

`make test` plays FIXED_SEEDS, chosen to cover every kind of fault; `make test-slow` plays
SLOW_SEEDS. A failing seed's message starts with its one-line reproducer
(`python -m fleetcache.devtools.simulation.faults --seed N`); `FLEETCACHE_FAULT_SEED=N` plays
only seed N here. The seed of each bug the runs found is played too (REGRESSION_SEEDS),
committed with its fix. The first tests are the checks themselves: each fires on a
state that breaks it, and stays quiet on one that does not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.devtools.simulation import Cluster, ControlPlane, Provider, faults, invariants
from fleetcache.devtools.simulation.clock import Clock
from fleetcache.devtools.testhub.content import BytesContent
from fleetcache.devtools.testhub.server import HubFile, Repo
from fleetcache.functions import naming

FIXED_SEEDS = (33, 54, 74)
# Seeds that found a bug, fixed since: each must keep breaking no invariant.
REGRESSION_SEEDS = {
    160: "the resolve record's ConfigMap was deleted while its Job ran: the Job completed, the "
         "record never said Resolved, and the cache stayed Resolving for ever",
    12: "the resolve step's Objects kept their keys and names when the resolving cluster changed: "
        "provider-kubernetes re-pointed each Object and left the old record ConfigMap, ServiceAccount, "
        "Role, RoleBinding and Job on the old cluster",
    55: "a copy's PVC was deleted with its Object and created again empty by provider-kubernetes: "
        "the hydration took the Job that had completed on the old PVC for a Ready copy, and a "
        "replica was sent to a commit that was not on the volume",
}
SLOW_SEEDS = range(1000)
COMMIT = "a" * 40
CLAIM = naming.cache_volume_name("chat")
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"weights" * 100}


def seeds() -> list[int]:
    chosen = os.environ.get("FLEETCACHE_FAULT_SEED")
    return [int(chosen)] if chosen else list(FIXED_SEEDS)


# --- the checks, on hand-made states ------------------------------------------------------------


def repo() -> Repo:
    return Repo("t/m", commits={COMMIT: {path: HubFile(path, BytesContent(data), path.endswith(
        ".safetensors")) for path, data in FILES.items()}})


def engine(commit: str = COMMIT, name: str = "chat-0") -> dict:
    """An engine Deployment on Cache delivery, mounting the cache volume, as compose-model-replica
    writes it (the parts the checks read)."""
    snapshot = f"/var/cache/fleetcache/hub/models--t--m/snapshots/{commit}"
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "engine", "env": [
                    {"name": "FLEETCACHE_DELIVERY", "value": "cache"},
                    {"name": "FLEETCACHE_MODEL", "value": snapshot},
                    {"name": "FLEETCACHE_MODEL_REVISION", "value": commit}],
                    "volumeMounts": [{"name": "model-cache", "mountPath": "/var/cache/fleetcache"}]}],
                "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": CLAIM}}]}}}}


def plane() -> ControlPlane:
    control = ControlPlane(lambda *_: None, {}, {}, Provider({}, lambda: []))
    control.xrs[("ModelCache", "ml", "chat")] = {
        "apiVersion": naming.API_VERSION, "kind": "ModelCache",
        "metadata": {"name": "chat", "namespace": "ml"}, "spec": {},
        "status": {"resolved": {"commit": COMMIT}}}
    return control


def cluster_with(tmp_path: Path, *deployments: dict, files: dict[str, bytes] = FILES) -> Cluster:
    cluster = Cluster("gpu-a", tmp_path / "gpu-a")
    snapshot = cluster.volume_dir("ml", CLAIM) / "hub/models--t--m/snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for path, data in files.items():
        (snapshot / path).write_bytes(data)
    for deployment in deployments:
        cluster.objects[("Deployment", "ml", deployment["metadata"]["name"])] = deployment
    return cluster


def check(control: ControlPlane, cluster: Cluster, problems: tuple[str, ...] = ()) -> list[str]:
    return [v.invariant for v in invariants.Checker(repo()).after_round(
        control, {cluster.name: cluster}, list(problems))]


def test_a_replica_mounting_exactly_the_published_files_breaks_nothing(tmp_path):
    assert check(plane(), cluster_with(tmp_path, engine())) == []


def test_a_mounted_file_that_does_not_hash_to_the_hubs_sha256_is_unverified(tmp_path):
    cluster = cluster_with(tmp_path, engine(), files={**FILES, "config.json": b"{}"})
    assert check(plane(), cluster) == [invariants.MOUNTS_VERIFIED]


def test_a_mounted_commit_missing_from_the_volume_is_unverified(tmp_path):
    cluster = cluster_with(tmp_path, engine("b" * 40))
    assert invariants.MOUNTS_VERIFIED in check(plane(), cluster)


def test_a_file_the_hub_never_published_in_the_snapshot_is_unverified(tmp_path):
    cluster = cluster_with(tmp_path, engine(), files={**FILES, "extra.bin": b"?"})
    assert check(plane(), cluster) == [invariants.MOUNTS_VERIFIED]


def test_a_copy_gone_evicted_while_an_engine_mounts_it_is_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCacheHydration", "ml", "chat-gpu-a")] = {
        "kind": "ModelCacheHydration", "metadata": {"name": "chat-gpu-a", "namespace": "ml"},
        "spec": {"clusterName": "gpu-a", "modelCacheName": "chat"},
        "status": {"phase": "Evicted", "volumeName": CLAIM}}
    assert check(control, cluster_with(tmp_path, engine())) == [invariants.IN_USE_KEPT]


def test_a_model_cache_being_deleted_while_an_engine_mounts_it_is_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCache", "ml", "chat")]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check(control, cluster_with(tmp_path, engine())) == [invariants.IN_USE_KEPT]


def test_three_commits_of_one_cache_on_one_cluster_are_caught(tmp_path):
    others = [engine(c * 40, f"chat-{c}") for c in "bc"]
    assert invariants.ONE_COMMIT in check(plane(), cluster_with(tmp_path, engine(), *others))


def test_two_commits_neither_of_them_the_resolved_one_are_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCache", "ml", "chat")]["status"]["resolved"]["commit"] = "d" * 40
    cluster = cluster_with(tmp_path, engine(), engine("b" * 40, "chat-1"))
    assert invariants.ONE_COMMIT in check(control, cluster)


def test_a_grant_projecting_past_its_quota_is_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCacheGrant", "ml", "team")] = {
        "kind": "ModelCacheGrant", "metadata": {"name": "team", "namespace": "ml"},
        "status": {"quotaBytes": 100, "projectedBytes": 101}}
    assert check(control, cluster_with(tmp_path)) == [invariants.WITHIN_GRANT]


def test_a_copy_of_content_no_grant_admitted_is_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCacheHydration", "ml", "chat-gpu-a")] = {
        "kind": "ModelCacheHydration", "metadata": {"name": "chat-gpu-a", "namespace": "ml"},
        "spec": {"clusterName": "gpu-a", "modelCacheName": "chat", "manifestDigest": "e" * 64},
        "status": {}}
    assert check(control, cluster_with(tmp_path)) == [invariants.WITHIN_GRANT]


def test_a_status_over_its_bound_is_caught(tmp_path):
    control = plane()
    control.xrs[("ModelCache", "ml", "chat")]["status"]["summary"] = "x" * invariants.STATUS_BYTES
    assert check(control, cluster_with(tmp_path)) == [invariants.STATUS_BOUNDED]


def test_a_fatal_result_of_any_call_is_caught():
    functions = faults.Functions(Clock(faults.SECONDS_PER_ROUND))
    request = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag="t"))
    request.observed.composite.resource.update({"apiVersion": "x/v1", "kind": "Unknown",
                                                "metadata": {"name": "n"}})
    functions.RunFunction(request, timeout=1)
    assert len(functions.problems) == 1 and "fatal result" in functions.problems[0]


def test_a_remote_object_no_object_manages_is_left_behind(tmp_path):
    cluster = cluster_with(tmp_path)
    cluster.objects[("ConfigMap", "ml", "orphan")] = {"kind": "ConfigMap", "metadata": {"name": "orphan"}}
    found = invariants.deletions_complete(plane(), {"gpu-a": cluster})
    assert [v.invariant for v in found] == [invariants.DELETIONS_COMPLETE]


def test_a_failed_copy_is_no_lasting_state_once_the_faults_stopped():
    control = plane()
    control.xrs[("ModelCacheHydration", "ml", "chat-gpu-a")] = {
        "kind": "ModelCacheHydration", "metadata": {"name": "chat-gpu-a", "namespace": "ml"},
        "spec": {"clusterName": "gpu-a", "modelCacheName": "chat"},
        "status": {"phase": "Failed", "reason": "SourceUnreachable",
                   "conditions": [{"type": "Ready", "status": "False"}]}}
    assert not invariants.lasting(control, control.xrs[("ModelCacheHydration", "ml", "chat-gpu-a")])


def test_a_copy_with_no_room_on_its_cluster_is_a_lasting_state():
    control = plane()
    control.xrs[("FleetCluster", "", "gpu-a")] = {
        "kind": "FleetCluster", "metadata": {"name": "gpu-a"}, "spec": {"cache": {}},
        "status": {"cache": {"capacityBytes": 1024}}}
    hydration = {"kind": "ModelCacheHydration", "metadata": {"name": "chat-gpu-a", "namespace": "ml"},
                 "spec": {"clusterName": "gpu-a", "modelCacheName": "chat", "storage": {"size": "1Gi"}},
                 "status": {"phase": "Pending", "reason": "CapacityLow"}}
    assert invariants.lasting(control, hydration)


# --- the plans ---------------------------------------------------------------------------------


def test_a_seed_draws_the_same_plan_every_time():
    assert faults.Plan.of(1234) == faults.Plan.of(1234)
    assert faults.Plan.of(1234) != faults.Plan.of(1235)


def test_the_fixed_seeds_cover_every_kind_of_fault():
    drawn = {f.kind for seed in FIXED_SEEDS for f in faults.Plan.of(seed).faults}
    assert drawn == set(faults.KINDS)


def test_a_failing_seed_says_how_to_play_it_again():
    outcome = faults.Outcome(1234, violations=["round 3: mounts-verified: ..."])
    assert outcome.report().splitlines()[0].endswith(
        ".venv/bin/python -m fleetcache.devtools.simulation.faults --seed 1234")


# --- the seeds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", seeds(), ids=lambda seed: f"seed-{seed}")
def test_no_invariant_breaks_under_the_faults_a_seed_draws(seed):
    outcome = faults.play(seed)
    assert outcome.violations == [], outcome.report()


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS), ids=lambda seed: f"seed-{seed}")
def test_a_regression_seed_breaks_no_invariant_any_more(seed):
    outcome = faults.play(seed)
    assert outcome.violations == [], f"{REGRESSION_SEEDS[seed]}\n{outcome.report()}"


@pytest.mark.slow
def test_a_thousand_seeds_break_no_invariant():
    reports = []
    outcomes = faults.play_many(list(SLOW_SEEDS), jobs=max(2, os.cpu_count() or 2),
                                echo=reports.append)
    failed = [o.report() for o in outcomes if o.violations]
    assert len(outcomes) == len(SLOW_SEEDS)
    assert failed == [], "\n\n".join(failed + reports[-1:])

