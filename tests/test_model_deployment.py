"""compose-model-deployment: placement, stickiness, delivery per replica, status.

Every row of DESIGN.md §3's table under both policies; stickiness across repeated
composes; scale up and down; a cluster leaving the placement; Source -> Cache exactly
once; determinism; hostile input; a gRPC render of the example deployment.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache import messages, reasons, shapes
from fleetcache.apis.specs import InputError
from fleetcache.apis.xrds import load_xrds, walk_schema
from fleetcache.devtools import cli, render
from fleetcache.functions import naming, protocol, server
from fleetcache.functions.composers import model_deployment as composer
from fleetcache.functions.composers import model_replica
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.views import model_replica as model_replica_view
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS
from tests.support import xrd
from tests.support.deployments import (
    CACHE,
    ENGINE,
    NAMESPACE,
    NO_CACHE,
    cache_required,
    cache_row,
    deployment,
    hydration,
)
from tests.support.fleet import COMMIT, GIB, fleet_cluster


def request(xr: dict, clusters: list[dict], cache: dict | None = None,
            observed: dict | None = None) -> protocol.Request:
    """`cache`: what cache_required gives; None: the ModelCache does not exist."""
    required = {composer.FLEET_CLUSTERS_KEY: clusters}
    if "modelCacheRef" in (xr.get("spec") or {}):
        required.update(cache or NO_CACHE)
    return protocol.Request(composite=xr, observed=observed or {}, required=required)


def compose(xr: dict, clusters: list[dict], cache: dict | None = None,
            observed: dict | None = None) -> protocol.Outcome:
    return composer.compose(request(xr, clusters, cache, observed))


def observe(outcome: protocol.Outcome, ready: bool | set[int] = False) -> dict:
    """The composed ModelReplicas as Crossplane would observe them next time."""
    out = {}
    for key, (desired, _) in outcome.desired.items():
        index = desired["spec"]["replica"]
        is_ready = ready if isinstance(ready, bool) else index in ready
        observed = copy.deepcopy(desired)
        observed["status"] = {"conditions": [{"type": "Ready",
                                              "status": "True" if is_ready else "False"}]}
        out[key] = observed
    return out


def replicas(outcome: protocol.Outcome) -> dict[int, dict]:
    return {r["spec"]["replica"]: r for r, _ in outcome.desired.values()}


def clusters_of(outcome: protocol.Outcome) -> dict[int, str]:
    return {i: r["spec"]["clusterName"] for i, r in replicas(outcome).items()}


def conditions(outcome: protocol.Outcome) -> dict[str, protocol.Condition]:
    return {c.type: c for c in outcome.conditions}


FLEET = [fleet_cluster("gpu-a"), fleet_cluster("gpu-b"), fleet_cluster("gpu-c")]


# --- requirements ------------------------------------------------------------------------


def test_asks_for_every_fleet_cluster_and_the_model_cache_in_its_namespace():
    outcome = composer.compose(protocol.Request(composite=deployment()))
    assert outcome.requirements[composer.FLEET_CLUSTERS_KEY] == FLEET_CLUSTERS
    assert outcome.requirements[composer.MODEL_CACHE_KEY] == protocol.Requirement(
        naming.API_VERSION, "ModelCache", match_name=CACHE, namespace=NAMESPACE)
    assert outcome.desired == {} and outcome.status == {}


def test_asks_for_the_caches_hydrations_by_its_label_in_its_namespace():
    outcome = composer.compose(protocol.Request(composite=deployment()))
    assert outcome.requirements[composer.HYDRATIONS_KEY] == protocol.Requirement(
        naming.API_VERSION, "ModelCacheHydration", namespace=NAMESPACE,
        match_labels=((naming.LABEL_MODEL_CACHE, CACHE),))
    assert hydration(cache_row("gpu-a", "Ready"))["metadata"]["labels"][
        naming.LABEL_MODEL_CACHE] == CACHE


def test_a_long_cache_name_is_asked_for_by_its_label_value():
    name = "q" * 80
    outcome = composer.compose(protocol.Request(composite=deployment(modelCacheRef={"name": name})))
    labels = dict(outcome.requirements[composer.HYDRATIONS_KEY].match_labels)
    assert labels == {naming.LABEL_MODEL_CACHE: naming.label_value(name)} and len(
        labels[naming.LABEL_MODEL_CACHE]) <= 63


def test_keeps_every_replica_while_requirements_are_not_fetched_yet():
    first = compose(deployment(replicas=2), FLEET, cache_required(cache_row("gpu-a", "Ready")))
    observed = observe(first)
    again = composer.compose(protocol.Request(composite=deployment(replicas=2), observed=observed,
                                         required={composer.FLEET_CLUSTERS_KEY: FLEET}))
    assert sorted(again.desired) == sorted(observed)


def test_a_direct_model_needs_no_model_cache():
    xr = deployment(modelCacheRef=None, model={"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}})
    outcome = composer.compose(protocol.Request(composite=xr))
    assert composer.MODEL_CACHE_KEY not in outcome.requirements


# --- the decision table under both policies -----------------------------------------------

TABLE = [
    # (cache row on the replica's cluster, policy, delivery, reason)
    (None, {}, "Source", "NotACacheTarget"),
    (None, {"whileHydrating": "Wait", "onHydrationFailure": "Fail"}, "Source", "NotACacheTarget"),
    ("Ready", {}, "Cache", "CacheReady"),
    ("Ready", {"whileHydrating": "Wait", "onHydrationFailure": "Fail"}, "Cache", "CacheReady"),
    ("Pending", {}, "Source", "Hydrating"),
    ("Pending", {"whileHydrating": "Source"}, "Source", "Hydrating"),
    ("Pending", {"whileHydrating": "Wait"}, "Wait", "Hydrating"),
    ("Hydrating", {}, "Source", "Hydrating"),
    ("Hydrating", {"whileHydrating": "Wait"}, "Wait", "Hydrating"),
    ("Failed", {}, "Source", "HydrationFailed"),
    ("Failed", {"onHydrationFailure": "Source"}, "Source", "HydrationFailed"),
    ("Failed", {"onHydrationFailure": "Fail"}, "Fail", "HydrationFailed"),
]


@pytest.mark.parametrize("phase,policy,delivery,reason", TABLE)
def test_delivery_follows_the_table(phase, policy, delivery, reason):
    rows = [cache_row("gpu-a", phase, bytesDone=GIB, reason="AuthFailed" if phase == "Failed"
                      else "", message="token rejected" if phase == "Failed" else "")] \
        if phase else [cache_row("gpu-z", "Ready")]
    xr = deployment(placement={"clusterNames": ["gpu-a"]}, delivery=policy)
    outcome = compose(xr, [fleet_cluster("gpu-a")], cache_required(*rows))
    replica = replicas(outcome)[0]
    assert replica["spec"]["delivery"] == delivery
    assert outcome.status["placements"] == [
        {"replica": 0, "cluster": "gpu-a", "delivery": delivery, "reason": reason,
         "commit": COMMIT if delivery in ("Cache", "Source") else ""}]
    counts = outcome.status["replicas"]
    assert (counts["cache"], counts["source"], counts["waiting"], counts["failed"]) == (
        int(delivery == "Cache"), int(delivery == "Source"), int(delivery == "Wait"),
        int(delivery == "Fail"))
    # Every replica of a cached model serves the cache's commit, Cache or Source; a Wait
    # or Fail replica runs nothing, so it names no model and no engine.
    if delivery in ("Cache", "Source"):
        assert replica["spec"]["model"] == {"repo": "Qwen/Qwen3-0.6B", "revision": "main",
                                            "commit": COMMIT}
    assert ("engineDigest" in replica["spec"]) == (delivery in ("Cache", "Source"))
    assert ("cache" in replica["spec"]) == (delivery == "Cache")
    assert ("hydration" in replica["spec"]) == (delivery in ("Wait", "Fail"))
    if delivery == "Cache":
        assert replica["spec"]["cache"] == {
            "modelCacheName": CACHE, "volumeName": naming.cache_volume_name(CACHE),
            "mountPath": agent_job.CACHE_MOUNT_PATH, "commit": COMMIT,
            "snapshotPath": f"{agent_job.CACHE_MOUNT_PATH}/hub/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}"}
    if delivery == "Fail":
        assert replica["spec"]["hydration"]["reason"] == "AuthFailed"
    assert conditions(outcome)["ModelCacheResolved"].status == "True"


def test_each_clusters_standing_comes_from_its_hydration_not_the_caches_rows():
    cache = cache_required(cache_row("gpu-a", "Hydrating"))
    cache[composer.MODEL_CACHE_KEY][0]["status"]["clusters"] = [cache_row("gpu-a", "Ready")]
    outcome = compose(deployment(**ON_GPU_A), FLEET, cache)
    assert outcome.status["placements"][0]["reason"] == "Hydrating"


def test_a_target_without_a_hydration_yet_is_pending_and_waits_under_wait():
    cache = cache_required(cache_row("gpu-a", "Ready"))
    cache[composer.MODEL_CACHE_KEY][0]["spec"]["placement"] = {
        "clusterNames": ["gpu-a", "gpu-b"]}
    xr = deployment(placement={"clusterNames": ["gpu-b"]}, delivery={"whileHydrating": "Wait"})
    replica = replicas(compose(xr, FLEET, cache))[0]["spec"]
    assert replica["delivery"] == "Wait" and replica["hydration"]["phase"] == "Pending"


def test_a_hydration_still_pinned_to_the_old_commit_serves_it_from_the_cache():
    queued = hydration(cache_row("gpu-a", "Ready", servingCommit=OLD_COMMIT), OLD_COMMIT)
    cache = cache_required(cache_row("gpu-a", "Ready"))
    cache[composer.HYDRATIONS_KEY] = [queued]
    spec = replicas(compose(deployment(**ON_GPU_A), FLEET, cache))[0]["spec"]
    assert (spec["delivery"], spec["cache"]["commit"]) == ("Cache", OLD_COMMIT)


def test_a_hydration_of_another_cache_is_not_read():
    other = hydration(cache_row("gpu-a", "Ready"), cache="other")
    cache = cache_required(cache_row("gpu-a", "Hydrating"))
    cache[composer.HYDRATIONS_KEY].insert(0, other)
    outcome = compose(deployment(**ON_GPU_A), FLEET, cache)
    assert outcome.status["placements"][0]["reason"] == "Hydrating"


def test_of_two_hydrations_of_a_cluster_the_one_pinned_to_the_commit_counts():
    old = hydration(cache_row("gpu-a", "Failed"), OLD_COMMIT)
    old["metadata"]["name"] = "a-first-by-name"
    cache = cache_required(cache_row("gpu-a", "Ready"))
    cache[composer.HYDRATIONS_KEY].append(old)
    outcome = compose(deployment(**ON_GPU_A), FLEET, cache)
    assert outcome.status["placements"][0]["reason"] == "CacheReady"


def test_an_invalid_cache_spec_makes_the_clusters_with_hydrations_its_targets():
    cache = cache_required(cache_row("gpu-a", "Ready"))
    cache[composer.MODEL_CACHE_KEY][0]["spec"] = {"placement": "everywhere"}
    outcome = compose(deployment(replicas=2, maxReplicasPerCluster=1), FLEET, cache)
    assert {p["cluster"]: p["reason"] for p in outcome.status["placements"]} == {
        "gpu-a": "CacheReady", "gpu-b": "NotACacheTarget"}


def test_a_ready_row_without_a_resolved_commit_is_still_hydrating():
    outcome = compose(deployment(delivery={"whileHydrating": "Wait"}), [fleet_cluster("gpu-a")],
                      cache_required(cache_row("gpu-a", "Ready"), commit=None))
    assert replicas(outcome)[0]["spec"]["delivery"] == "Wait"
    resolved = conditions(outcome)["ModelCacheResolved"]
    assert (resolved.status, resolved.reason) == ("False", "Resolving")


def test_a_model_cache_that_never_existed_makes_every_replica_wait():
    outcome = compose(deployment(replicas=3), FLEET, cache=None)
    assert {r["spec"]["delivery"] for r in replicas(outcome).values()} == {"Wait"}
    assert {p["reason"] for p in outcome.status["placements"]} == {"ModelCacheNotFound"}
    assert outcome.status["replicas"]["waiting"] == 3
    assert {r["spec"]["hydration"]["reason"] for r in replicas(outcome).values()} == {
        "ModelCacheNotFound"}


def test_a_model_cache_that_never_existed_says_nothing_runs():
    resolved = conditions(compose(deployment(replicas=3), FLEET, cache=None))[
        "ModelCacheResolved"]
    assert (resolved.status, resolved.reason) == ("False", "ModelCacheNotFound")
    assert f"ModelCache {NAMESPACE}/{CACHE} does not exist" in resolved.message
    assert "nothing runs: its 3 scheduled replicas wait" in resolved.message
    assert "from the source" not in resolved.message
    assert "Create the ModelCache" in resolved.message


def test_a_replica_waiting_for_a_missing_cache_says_so_with_the_remedy():
    outcome = compose(deployment(), FLEET, cache=None)
    replica = model_replica.compose(protocol.Request(composite=replicas(outcome)[0]))
    assert (replica.status["phase"], replica.status["reason"]) == ("Waiting",
                                                                   "ModelCacheNotFound")
    assert f"ModelCache {NAMESPACE}/{CACHE} does not exist" in replica.status["message"]
    assert "Create the ModelCache" in replica.status["message"]
    assert replica.desired == {}


def test_a_vanished_model_cache_keeps_serving_the_last_model_from_the_source():
    first = compose(deployment(), FLEET, cache_required(cache_row("gpu-a", "Ready")))
    xr = deployment()
    xr["status"] = copy.deepcopy(first.status)
    outcome = compose(xr, FLEET, cache=None, observed=observe(first, ready=True))
    replica = replicas(outcome)[0]
    assert replica["spec"]["delivery"] == "Source"
    assert replica["spec"]["model"]["commit"] == COMMIT
    resolved = conditions(outcome)["ModelCacheResolved"]
    assert f"every replica loads Qwen/Qwen3-0.6B@{COMMIT}, the model this deployment " \
           "served last, from the source" in resolved.message


def test_a_direct_huggingface_model_is_always_source():
    xr = deployment(modelCacheRef=None, replicas=2,
                    model={"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "v1"}})
    outcome = compose(xr, FLEET)
    for replica in replicas(outcome).values():
        assert replica["spec"]["delivery"] == "Source"
        assert replica["spec"]["model"] == {"repo": "Qwen/Qwen3-0.6B", "revision": "v1",
                                            "commit": ""}
    resolved = conditions(outcome)["ModelCacheResolved"]
    assert (resolved.status, resolved.reason) == ("True", "NoModelCache")


# --- a new commit hydrating where an older one is verified --------------------------------

OLD_COMMIT = "0" * 40
OLD_SNAPSHOT = f"{agent_job.CACHE_MOUNT_PATH}/hub/models--Qwen--Qwen3-0.6B/snapshots/{OLD_COMMIT}"


def serving_row(phase: str, **extra) -> dict:
    """gpu-a's row after the ModelCache resolved COMMIT: OLD_COMMIT is still on its volume."""
    return cache_row("gpu-a", phase, servingCommit=OLD_COMMIT, **extra)


ON_GPU_A = {"placement": {"clusterNames": ["gpu-a"]}}


def test_a_cluster_hydrating_a_new_commit_keeps_serving_the_old_one_from_the_cache():
    outcome = compose(deployment(**ON_GPU_A), FLEET, cache_required(serving_row("Hydrating")))
    spec = replicas(outcome)[0]["spec"]
    assert spec["delivery"] == "Cache"
    assert spec["cache"]["commit"] == OLD_COMMIT and spec["cache"]["snapshotPath"] == OLD_SNAPSHOT
    assert spec["model"]["commit"] == OLD_COMMIT
    assert outcome.status["placements"] == [
        {"replica": 0, "cluster": "gpu-a", "delivery": "Cache",
         "reason": "PreviousCommitWhileHydrating", "commit": OLD_COMMIT}]


@pytest.mark.parametrize("policy", [{}, {"whileHydrating": "Wait"}], ids=["source", "wait"])
def test_serving_the_old_commit_beats_while_hydrating(policy):
    outcome = compose(deployment(delivery=policy, **ON_GPU_A), FLEET,
                      cache_required(serving_row("Pending", reason="RolloutQueued")))
    assert replicas(outcome)[0]["spec"]["delivery"] == "Cache"


@pytest.mark.parametrize("policy", [{}, {"onHydrationFailure": "Fail"}], ids=["source", "fail"])
def test_a_failed_new_commit_keeps_serving_the_old_one_from_the_cache(policy):
    outcome = compose(deployment(delivery=policy, **ON_GPU_A), FLEET,
                      cache_required(serving_row("Failed", reason="DigestMismatch")))
    spec = replicas(outcome)[0]["spec"]
    assert (spec["delivery"], spec["cache"]["commit"]) == ("Cache", OLD_COMMIT)
    assert outcome.status["placements"][0]["reason"] == "PreviousCommitHydrationFailed"


def test_replicas_move_to_the_new_commit_in_one_change_once_it_is_ready():
    xr = deployment(**ON_GPU_A)
    specs, observed = [], {}
    for row in (cache_row("gpu-a", "Ready", servingCommit=OLD_COMMIT),  # before the update
                serving_row("Pending", reason="RolloutQueued"), serving_row("Hydrating"),
                serving_row("Hydrating", bytesDone=GIB), cache_row("gpu-a", "Ready",
                                                                   servingCommit=COMMIT)):
        cache = cache_required(row, commit=OLD_COMMIT if not specs else COMMIT)
        outcome = compose(xr, FLEET, cache, observed)
        specs.append(replicas(outcome)[0]["spec"])
        observed = observe(outcome, ready=True)
    assert all(s == specs[0] for s in specs[:4])  # no roll while the new commit hydrates
    assert specs[0]["cache"]["snapshotPath"] == OLD_SNAPSHOT
    assert specs[-1]["delivery"] == "Cache" and specs[-1]["cache"]["commit"] == COMMIT
    assert outcome.status["placements"][0]["reason"] == "CacheReady"


def test_a_replica_already_on_source_is_not_sent_back_to_the_old_commit():
    xr = deployment(**ON_GPU_A)
    first = compose(xr, FLEET, cache_required(cache_row("gpu-a", "Hydrating")))
    assert replicas(first)[0]["spec"]["delivery"] == "Source"
    outcome = compose(xr, FLEET, cache_required(serving_row("Hydrating")), observe(first))
    assert (replicas(outcome)[0]["spec"]["delivery"],
            outcome.status["placements"][0]["reason"]) == ("Source", "Hydrating")


@pytest.mark.parametrize("phase,policy,delivery", [row[:3] for row in TABLE if row[0]])
def test_without_a_serving_commit_the_table_holds(phase, policy, delivery):
    outcome = compose(deployment(delivery=policy, **ON_GPU_A), FLEET,
                      cache_required(cache_row("gpu-a", phase, servingCommit="")))
    assert replicas(outcome)[0]["spec"]["delivery"] == delivery
    assert outcome.status["replicas"]["previousCommit"] == 0


def test_a_serving_commit_that_is_not_a_commit_is_ignored():
    outcome = compose(deployment(**ON_GPU_A), FLEET,
                      cache_required(cache_row("gpu-a", "Hydrating", servingCommit="../../etc")))
    assert replicas(outcome)[0]["spec"]["delivery"] == "Source"


def test_status_counts_replicas_on_the_previous_commit_within_cache():
    cache = cache_required(serving_row("Hydrating"), cache_row("gpu-b", "Ready"))
    outcome = compose(deployment(replicas=2, maxReplicasPerCluster=1), FLEET, cache)
    counts = outcome.status["replicas"]
    assert (counts["cache"], counts["previousCommit"], counts["source"]) == (2, 1, 0)
    assert "1 replica still on a previous commit" in conditions(outcome)["ModelCacheResolved"].message


def test_new_replicas_rank_a_cluster_serving_the_previous_commit_after_cache_ready():
    cache = cache_required(cache_row("gpu-a", "Hydrating"), cache_row("gpu-b", "Ready"),
                        cache_row("gpu-c", "Hydrating", servingCommit=OLD_COMMIT))
    outcome = compose(deployment(replicas=3, maxReplicasPerCluster=1), FLEET, cache)
    assert clusters_of(outcome) == {0: "gpu-b", 1: "gpu-c", 2: "gpu-a"}


# --- placement ----------------------------------------------------------------------------


def three_state_cache() -> dict:
    return cache_required(cache_row("gpu-b", "Hydrating"), cache_row("gpu-c", "Ready"))


def test_new_replicas_rank_cache_ready_then_hydrating_then_the_rest():
    outcome = compose(deployment(replicas=3, maxReplicasPerCluster=1), FLEET, three_state_cache())
    assert clusters_of(outcome) == {0: "gpu-c", 1: "gpu-b", 2: "gpu-a"}
    assert [p["delivery"] for p in outcome.status["placements"]] == ["Cache", "Source", "Source"]


def test_ties_go_to_the_cluster_with_fewest_replicas_then_by_name():
    outcome = compose(deployment(replicas=5), FLEET, cache_required(cache_row("gpu-z", "Ready")))
    assert clusters_of(outcome) == {0: "gpu-a", 1: "gpu-b", 2: "gpu-c", 3: "gpu-a", 4: "gpu-b"}


def test_a_failed_cache_target_ranks_with_the_rest():
    cache = cache_required(cache_row("gpu-a", "Failed"), cache_row("gpu-b", "Pending"))
    outcome = compose(deployment(replicas=1), FLEET, cache)
    assert clusters_of(outcome) == {0: "gpu-b"}


def test_placement_by_cluster_names_reports_names_that_do_not_exist():
    xr = deployment(replicas=2, placement={"clusterNames": ["gpu-b", "gpu-missing"]})
    outcome = compose(xr, FLEET, three_state_cache())
    assert set(clusters_of(outcome).values()) == {"gpu-b"}
    assert "gpu-missing" in conditions(outcome)["ReplicasScheduled"].message


def test_one_replica_on_one_cluster_is_said_in_the_singular():
    outcome = compose(deployment(placement={"clusterNames": ["gpu-a"]}), FLEET,
                      cache_required(cache_row("gpu-a", "Ready")))
    assert conditions(outcome)["ReplicasScheduled"].message == "1 replica on 1 cluster"


def test_replicas_stick_to_their_cluster_across_composes():
    xr = deployment(replicas=4)
    outcome = compose(xr, FLEET, cache_required(cache_row("gpu-z", "Ready")))
    first = clusters_of(outcome)
    # A warmer cluster appears: new replicas would go there, existing ones stay put.
    fleet = FLEET + [fleet_cluster("gpu-0")]
    cache = cache_required(cache_row("gpu-0", "Ready"))
    for _ in range(3):
        outcome = compose(xr, fleet, cache, observe(outcome))
        assert clusters_of(outcome) == first


def test_scale_up_keeps_placed_replicas_and_ranks_the_new_ones():
    outcome = compose(deployment(replicas=2), FLEET, three_state_cache())
    before = clusters_of(outcome)
    outcome = compose(deployment(replicas=4), FLEET, three_state_cache(), observe(outcome))
    after = clusters_of(outcome)
    assert {i: after[i] for i in before} == before
    assert after[2] == after[3] == "gpu-c"  # cache Ready ranks first


def test_scale_down_removes_the_highest_index_first():
    outcome = compose(deployment(replicas=4), FLEET, three_state_cache())
    before = clusters_of(outcome)
    outcome = compose(deployment(replicas=2), FLEET, three_state_cache(), observe(outcome))
    assert clusters_of(outcome) == {0: before[0], 1: before[1]}
    assert sorted(outcome.desired) == [composer.replica_key(0), composer.replica_key(1)]
    outcome = compose(deployment(replicas=0), FLEET, three_state_cache(), observe(outcome))
    assert outcome.desired == {} and outcome.composite_ready is True
    assert outcome.status["summary"] == "0/0"


def test_a_cluster_leaving_the_placement_moves_only_its_replicas():
    xr = deployment(replicas=3, maxReplicasPerCluster=1)
    outcome = compose(xr, FLEET, three_state_cache())
    assert clusters_of(outcome) == {0: "gpu-c", 1: "gpu-b", 2: "gpu-a"}
    relabelled = [FLEET[0], FLEET[1], fleet_cluster("gpu-c", labels={"gpu": "a100"}),
                  fleet_cluster("gpu-d")]
    outcome = compose(xr, relabelled, three_state_cache(), observe(outcome, ready=True))
    assert clusters_of(outcome) == {0: "gpu-d", 1: "gpu-b", 2: "gpu-a"}
    # The moved replica is not ready on its new cluster yet; the others still are.
    assert outcome.status["replicas"]["ready"] == 2 and outcome.composite_ready is False


def test_a_cluster_that_is_not_ready_is_no_candidate():
    fleet = [fleet_cluster("gpu-a", ready=False), fleet_cluster("gpu-b")]
    outcome = compose(deployment(replicas=2), fleet, three_state_cache())
    assert set(clusters_of(outcome).values()) == {"gpu-b"}


def test_no_candidate_leaves_replicas_unscheduled_with_no_clusters():
    outcome = compose(deployment(replicas=2), [fleet_cluster("gpu-a", labels={})],
                      three_state_cache())
    assert outcome.desired == {}
    scheduled = conditions(outcome)["ReplicasScheduled"]
    assert (scheduled.status, scheduled.reason) == ("False", "NoClusters")
    assert reasons.remedy("NoClusters") in scheduled.message
    assert outcome.status["placements"] == [
        {"replica": i, "cluster": "", "delivery": "", "reason": "NoClusters", "commit": ""}
        for i in (0, 1)]
    assert outcome.status["replicas"]["scheduled"] == 0 and outcome.composite_ready is False


def test_max_replicas_per_cluster_caps_and_reports_the_rest():
    outcome = compose(deployment(replicas=5, maxReplicasPerCluster=1), FLEET[:2],
                      three_state_cache())
    assert len(outcome.desired) == 2
    scheduled = conditions(outcome)["ReplicasScheduled"]
    assert (scheduled.status, scheduled.reason) == ("False", "MaxReplicasPerCluster")
    assert "spec.maxReplicasPerCluster" in scheduled.message
    assert outcome.status["replicas"]["scheduled"] == 2


def test_lowering_max_replicas_per_cluster_moves_the_highest_indices():
    outcome = compose(deployment(replicas=4), FLEET[:1] + FLEET[1:2],
                      cache_required(cache_row("gpu-a", "Ready")))
    assert clusters_of(outcome) == {0: "gpu-a", 1: "gpu-a", 2: "gpu-a", 3: "gpu-a"}
    outcome = compose(deployment(replicas=4, maxReplicasPerCluster=2), FLEET[:2],
                      cache_required(cache_row("gpu-a", "Ready")), observe(outcome))
    assert clusters_of(outcome) == {0: "gpu-a", 1: "gpu-a", 2: "gpu-b", 3: "gpu-b"}


# --- Source -> Cache ------------------------------------------------------------------------


def hydrating_then_ready(policy: dict, steps: int = 4) -> list[dict]:
    """The replica's spec at every compose while the cache hydrates, then once Ready."""
    xr = deployment(delivery=policy, placement={"clusterNames": ["gpu-a"]})
    specs, observed = [], {}
    for step in range(steps):
        row = cache_row("gpu-a", "Hydrating", bytesDone=step * GIB // 2)
        outcome = compose(xr, FLEET, cache_required(row), observed)
        specs.append(replicas(outcome)[0]["spec"])
        observed = observe(outcome, ready=True)
    for _ in range(2):
        outcome = compose(xr, FLEET, cache_required(cache_row("gpu-a", "Ready")), observed)
        specs.append(replicas(outcome)[0]["spec"])
        observed = observe(outcome, ready=True)
    return specs


def test_on_ready_switches_a_source_replica_to_the_cache_exactly_once():
    specs = hydrating_then_ready({"switchToCache": "OnReady"})
    changes = sum(1 for a, b in zip(specs, specs[1:], strict=False) if a != b)
    assert changes == 1
    assert specs[0]["delivery"] == "Source" and specs[-1]["delivery"] == "Cache"


def test_never_keeps_a_running_source_replica_as_it_is():
    specs = hydrating_then_ready({"switchToCache": "Never"})
    assert all(s == specs[0] for s in specs)
    outcome = compose(deployment(delivery={"switchToCache": "Never"},
                                 placement={"clusterNames": ["gpu-a"]}),
                      FLEET, cache_required(cache_row("gpu-a", "Ready")),
                      {composer.replica_key(0): {"spec": specs[-1]}})
    assert outcome.status["placements"][0]["reason"] == "SwitchToCacheNever"


def test_never_still_gives_new_replicas_the_cache():
    xr = deployment(delivery={"switchToCache": "Never"}, replicas=2,
                    placement={"clusterNames": ["gpu-a"]})
    outcome = compose(xr, FLEET, cache_required(cache_row("gpu-a", "Ready")))
    assert {r["spec"]["delivery"] for r in replicas(outcome).values()} == {"Cache"}


def test_a_waiting_replica_takes_the_cache_when_it_is_ready_under_never():
    xr = deployment(delivery={"switchToCache": "Never", "whileHydrating": "Wait"},
                    placement={"clusterNames": ["gpu-a"]})
    outcome = compose(xr, FLEET, cache_required(cache_row("gpu-a", "Hydrating")))
    assert replicas(outcome)[0]["spec"]["delivery"] == "Wait"
    outcome = compose(xr, FLEET, cache_required(cache_row("gpu-a", "Ready")), observe(outcome))
    assert replicas(outcome)[0]["spec"]["delivery"] == "Cache"


# --- status and readiness -----------------------------------------------------------------


def test_ready_only_when_every_desired_replica_is_ready():
    xr = deployment(replicas=3)
    outcome = compose(xr, FLEET, three_state_cache())
    assert outcome.composite_ready is False and outcome.status["summary"] == "0/3"
    outcome = compose(xr, FLEET, three_state_cache(), observe(outcome, ready={0, 1}))
    assert outcome.composite_ready is False and outcome.status["summary"] == "2/3"
    assert conditions(outcome)["ReplicasReady"].status == "False"
    outcome = compose(xr, FLEET, three_state_cache(), observe(outcome, ready=True))
    assert outcome.composite_ready is True and outcome.status["summary"] == "3/3"
    ready = conditions(outcome)["ReplicasReady"]
    assert (ready.status, ready.reason) == ("True", "Available")


def test_placements_list_every_replica_up_to_the_limit():
    outcome = compose(deployment(replicas=composer.LISTED_PLACEMENTS), FLEET,
                      three_state_cache())
    assert [p["replica"] for p in outcome.status["placements"]] == list(
        range(composer.LISTED_PLACEMENTS))


def test_past_the_limit_placements_list_the_replicas_needing_attention_by_index():
    xr = deployment(replicas=150, maxReplicasPerCluster=40,
                    delivery={"whileHydrating": "Wait"})
    cache = cache_required(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Hydrating"))
    outcome = compose(xr, FLEET, cache)
    listed = outcome.status["placements"]
    assert len(listed) == composer.LISTED_PLACEMENTS
    assert [p["replica"] for p in listed] == sorted(p["replica"] for p in listed)
    shown = [p["delivery"] for p in listed]
    assert (shown.count(""), shown.count("Wait"), shown.count("Source"),
            shown.count("Cache")) == (30, 40, 30, 0)
    assert outcome.status["replicas"] == {
        "desired": 150, "scheduled": 120, "ready": 0, "cache": 40, "source": 40,
        "waiting": 40, "failed": 0, "previousCommit": 0}


def test_status_stays_small_at_a_thousand_replicas():
    fleet = [fleet_cluster(f"gpu-{i:03d}") for i in range(500)]
    xr = deployment(replicas=1000, maxReplicasPerCluster=4)
    outcome = compose(xr, fleet, cache_required(cache_row("gpu-000", "Ready")))
    assert len(json.dumps(outcome.status)) < 20_000


def test_status_and_replicas_are_valid_against_their_xrds():
    xr = deployment(replicas=5, maxReplicasPerCluster=2,
                    delivery={"whileHydrating": "Wait", "onHydrationFailure": "Fail"})
    cache = cache_required(cache_row("gpu-a", "Failed"), cache_row("gpu-b", "Hydrating"),
                        cache_row("gpu-c", "Ready"))
    outcome = compose(xr, FLEET, cache)
    assert {p["delivery"] for p in outcome.status["placements"]} == {"Cache", "Wait", "Fail"}
    with_status = copy.deepcopy(xr)
    with_status["status"] = outcome.status
    xrd.assert_valid(with_status)
    for replica in replicas(outcome).values():
        xrd.assert_valid(replica)


def test_every_deployment_example_is_valid_and_composes():
    examples = [(path, doc) for path, _, doc in xrd.example_docs() if doc.get("kind") == "ModelDeployment"]
    assert sorted(path.name for path, _ in examples) == [
        "modeldeployment-cached.yaml", "modeldeployment-huggingface.yaml", "modeldeployment-node.yaml",
        "modeldeployment-wait-for-cache.yaml"]
    for path, doc in examples:
        xrd.assert_valid(doc)
        outcome = compose(xrd.xrd_for(doc).with_defaults(doc), FLEET,
                          cache_required(cache_row("gpu-a", "Ready")))
        assert outcome.status["replicas"]["desired"] == doc["spec"].get("replicas", 1), path


def test_every_xrd_field_has_a_description():
    for kind in ("ModelDeployment", "ModelReplica"):
        for path, node in walk_schema(load_xrds()[kind].schema):
            assert node.get("description"), f"{kind} {path or '<root>'} has no description"


# --- determinism and hostile input ----------------------------------------------------------


def run_proto(xr: dict, clusters: list[dict], cache: dict | None) -> fnv1.RunFunctionResponse:
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, xr)
    for key, items in {composer.FLEET_CLUSTERS_KEY: clusters, **(cache or NO_CACHE)}.items():
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.CopyFrom(
                resource.dict_to_struct(item))
    return server.run(req, protocol.Request(composite={}).now)


def test_same_request_gives_the_same_bytes():
    xr = deployment(replicas=7, maxReplicasPerCluster=3)
    first = run_proto(xr, FLEET, three_state_cache()).SerializeToString(deterministic=True)
    for _ in range(3):
        shuffled = list(reversed(FLEET))
        cache = three_state_cache()
        cache[composer.HYDRATIONS_KEY].reverse()
        again = run_proto(xr, shuffled, cache).SerializeToString(deterministic=True)
        assert again == first
    a = compose(xr, FLEET, three_state_cache())
    b = compose(xr, list(reversed(FLEET)), three_state_cache())
    assert json.dumps(naming.canonical(a.desired)) == json.dumps(naming.canonical(b.desired))


HOSTILE_SPECS = [
    None,
    {},
    {"modelCacheRef": {"name": CACHE}},
    {"modelCacheRef": "qwen", "placement": {"clusterNames": ["a"]}, "engine": ENGINE},
    {"modelCacheRef": {"name": "Not A Name"}, "placement": {"clusterNames": ["a"]},
     "engine": ENGINE},
    {"modelCacheRef": {"name": CACHE}, "model": {"huggingFace": {"repo": "a/b"}},
     "placement": {"clusterNames": ["a"]}, "engine": ENGINE},
    {"model": {"huggingFace": {"repo": "no-slash"}}, "placement": {"clusterNames": ["a"]},
     "engine": ENGINE},
    {"model": "Qwen/Qwen3-0.6B", "placement": {"clusterNames": ["a"]}, "engine": ENGINE},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"],
                                                     "clusterSelector": {}}, "engine": ENGINE},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": "a"}, "engine": ENGINE},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterSelector": {
        "matchExpressions": [{"key": "gpu", "operator": "Near"}]}}, "engine": ENGINE},
    {"modelCacheRef": {"name": CACHE}, "placement": [], "engine": ENGINE},
    *[{"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
       "engine": ENGINE, "replicas": bad} for bad in ("3", True, -1, 1001, 2.5)],
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]}, "engine": ENGINE,
     "maxReplicasPerCluster": 0},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]}, "engine": ENGINE,
     "delivery": {"whileHydrating": "Later"}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]}, "engine": ENGINE,
     "delivery": "Wait"},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": ""}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "env": [{"name": "FLEETCACHE_MODEL", "value": "other"}]}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "env": "A=1"}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "port": 70000}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "readinessPath": "health"}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "sharedMemorySize": "lots"}},
    {"modelCacheRef": {"name": CACHE}, "placement": {"clusterNames": ["a"]},
     "engine": {"image": "x", "args": "--model"}},
]


@pytest.mark.parametrize("spec", HOSTILE_SPECS, ids=range(len(HOSTILE_SPECS)))
def test_hostile_specs_are_input_errors_or_fatal_results(spec):
    xr = deployment()
    if spec is None:
        del xr["spec"]
    else:
        xr["spec"] = spec
    with pytest.raises(InputError):
        compose(xr, FLEET, three_state_cache())
    rsp = run_proto(xr, FLEET, three_state_cache())
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal and "internal error" not in fatal[0], fatal


def test_long_and_dotted_names_give_valid_child_names():
    for name in ("x" * 253, "7b.chat", "a" + "-b" * 100):
        xr = deployment(replicas=3)
        xr["metadata"]["name"] = name
        outcome = compose(xr, FLEET, three_state_cache())
        names = [r["metadata"]["name"] for r in replicas(outcome).values()]
        assert len(set(names)) == 3
        for child in names:
            assert len(child) <= 63 and shapes.DNS_SUBDOMAIN.match(child), child
        for replica in replicas(outcome).values():
            for value in replica["metadata"]["labels"].values():
                assert shapes.LABEL_VALUE.match(value) and len(value) <= 63


def test_hostile_observed_and_required_resources_do_not_break_compose():
    observed = {composer.replica_key(0): {"spec": {"replica": "zero", "clusterName": 5}},
                composer.replica_key(1): {"spec": "nope"}, "other": {"kind": "Thing"}}
    cache = cache_required(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Hydrating"))
    broken = cache[composer.HYDRATIONS_KEY][1]
    broken["status"] = {"phase": ["Ready"], "progress": "half", "servingCommit": {"x": 1}}
    cache[composer.HYDRATIONS_KEY] += [
        "junk", {"spec": "nope"}, {"spec": {"clusterName": 7, "modelCacheName": CACHE}},
        {"spec": {"clusterName": "gpu-c", "modelCacheName": CACHE}, "status": "Ready"}]
    fleet = FLEET + [{"metadata": "bad"}, "junk", {"metadata": {"name": "gpu-x",
                                                                 "labels": "oops"}},
                     {"metadata": {"name": "gpu-y"}, "status": {"conditions": "Ready"}}]
    outcome = compose(deployment(replicas=3, maxReplicasPerCluster=1), fleet, cache, observed)
    assert len(outcome.desired) == 3
    assert {p["cluster"]: p["delivery"] for p in outcome.status["placements"]} == {
        "gpu-a": "Cache", "gpu-b": "Source", "gpu-c": "Source"}


def test_what_a_hostile_hydration_says_reaches_a_replica_cut_to_size():
    row = cache_row("gpu-a", "Failed", reason="not a reason " * 50, message="m" * 10_000,
                    bytesDone=-5)
    outcome = compose(deployment(delivery={"onHydrationFailure": "Fail"}, **ON_GPU_A), FLEET,
                      cache_required(row))
    replica = replicas(outcome)[0]
    told = replica["spec"]["hydration"]
    assert (told["reason"], told["bytesDone"]) == ("", 0)
    assert len(told["message"]) <= messages.MESSAGE_LIMIT
    xrd.assert_valid(replica)


@pytest.mark.parametrize("resolved", ["abc", {"commit": 7}, {"commit": "../../etc"}, []],
                         ids=["string", "number", "path", "list"])
def test_a_malformed_resolved_commit_reads_as_not_resolved_with_a_warning(resolved):
    cache = cache_required(cache_row("gpu-a", "Ready"))
    cache[composer.MODEL_CACHE_KEY][0]["status"]["resolved"] = resolved
    outcome = compose(deployment(), FLEET, cache)
    assert replicas(outcome)[0]["spec"]["delivery"] == "Source"
    assert conditions(outcome)["ModelCacheResolved"].reason == "Resolving"
    assert any("is not a resolve result" in w and len(w) < 400 for w in outcome.warnings)


def test_a_malformed_latched_model_reads_as_none():
    xr = deployment()
    xr["status"] = {"model": {"modelCacheName": CACHE, "repo": ["x"], "commit": 7}}
    outcome = compose(xr, FLEET, cache=None)
    assert replicas(outcome)[0]["spec"]["delivery"] == "Wait"


def test_a_thousand_replicas_over_five_hundred_clusters():
    fleet = [fleet_cluster(f"gpu-{i:03d}") for i in range(500)]
    cache = cache_required(*[cache_row(f"gpu-{i:03d}", ("Ready", "Hydrating", "Failed")[i % 3])
                          for i in range(0, 500, 2)])
    xr = deployment(replicas=1000, maxReplicasPerCluster=4)
    outcome = compose(xr, fleet, cache)
    assert len(outcome.desired) == 1000
    assert len({r["metadata"]["name"] for r in replicas(outcome).values()}) == 1000
    per_cluster: dict[str, int] = {}
    for cluster in clusters_of(outcome).values():
        per_cluster[cluster] = per_cluster.get(cluster, 0) + 1
    assert max(per_cluster.values()) <= 4
    again = compose(xr, fleet, cache, observe(outcome))
    assert clusters_of(again) == clusters_of(outcome)


# --- end to end through the function server -----------------------------------------------


def test_render_of_the_example_gives_cache_source_and_source():
    """The issue's done-when: a cache Ready on one cluster, Hydrating on another and absent
    on a third gives Cache, Source (Waiting under Wait) and Source, each with its env."""
    fleet = [fleet_cluster(n, labels=doc["metadata"]["labels"])
             for doc in xrd.load_yaml_docs(xrd.EXAMPLES / "fleet" / "fleetclusters.yaml")
             for n in [doc["metadata"]["name"]]]
    example = xrd.load_yaml_docs(xrd.EXAMPLES / "modeldeployment-cached.yaml")[0]
    cache = cache_required(cache_row("gpu-east-1", "Ready"),
                           cache_row("gpu-east-2", "Hydrating", bytesDone=GIB),
                           name=example["spec"]["modelCacheRef"]["name"])
    for item in (*cache[composer.MODEL_CACHE_KEY], *cache[composer.HYDRATIONS_KEY]):
        item["metadata"]["namespace"] = example["metadata"]["namespace"]
    compositions = {p.stem: xrd.load_yaml_docs(p)[0] for p in xrd.COMPOSITIONS.glob("*.yaml")}

    def envs(policy: dict) -> dict[str, tuple[str, str, dict]]:
        xr = copy.deepcopy(example)
        xr["spec"]["delivery"] = policy
        out = {}
        with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            xr = xrd.xrd_for(xr).with_defaults(xr)
            rendered = render.run_pipeline(stub, xr, compositions["modeldeployments"], [],
                                           fleet + [item for items in cache.values()
                                                    for item in items])
            assert not rendered.fatal, rendered.fatal
            for replica in rendered.by_kind("ModelReplica"):
                xrd.assert_valid(replica)
                inner = render.run_pipeline(stub, replica, compositions["modelreplicas"], [],
                                            fleet + [xr])
                assert not inner.fatal, inner.fatal
                objects = {r["metadata"]["name"]: r for r in inner.by_kind("Object")}
                deployments = [o["spec"]["forProvider"]["manifest"] for o in objects.values()
                               if o["spec"]["forProvider"]["manifest"]["kind"] == "Deployment"]
                env = {e["name"]: e.get("value") for d in deployments for e in
                       d["spec"]["template"]["spec"]["containers"][0]["env"]}
                out[replica["spec"]["clusterName"]] = (
                    replica["spec"]["delivery"], inner.composite["status"]["phase"], env)
        return out

    default = envs({})
    assert {c: d for c, (d, _, _) in default.items()} == {
        "gpu-east-1": "Cache", "gpu-east-2": "Source", "gpu-west-1": "Source"}
    cached_env = default["gpu-east-1"][2]
    assert cached_env["FLEETCACHE_DELIVERY"] == "cache" and cached_env["HF_HUB_OFFLINE"] == "1"
    assert cached_env["FLEETCACHE_MODEL"].endswith(f"/snapshots/{COMMIT}")
    for cluster in ("gpu-east-2", "gpu-west-1"):
        env = default[cluster][2]
        assert (env["FLEETCACHE_MODEL"], env["FLEETCACHE_DELIVERY"]) == ("Qwen/Qwen3-0.6B",
                                                                         "source")
        assert env["FLEETCACHE_MODEL_REVISION"] == COMMIT and "HF_HUB_CACHE" not in env

    waiting = envs({"whileHydrating": "Wait"})
    assert waiting["gpu-east-2"][:2] == ("Wait", "Waiting") and waiting["gpu-east-2"][2] == {}
    assert waiting["gpu-west-1"][0] == "Source"


def test_replicas_carry_the_engines_digest_not_the_engine():
    """The replica reads spec.engine from its ModelDeployment; the digest says which one
    the deployment composed it with (one normalizer, model_replica_view.Engine, for both)."""
    engine = {**ENGINE, "port": 9000}
    spec = replicas(compose(deployment(engine=engine), FLEET, three_state_cache()))[0]["spec"]
    assert "engine" not in spec
    assert spec["engineDigest"] == model_replica_view.Engine.of(engine).digest
    assert spec["deploymentName"] == "chat"


def test_changing_the_engine_changes_every_replicas_spec_once():
    before = compose(deployment(replicas=2), FLEET, three_state_cache())
    after = compose(deployment(replicas=2, engine={**ENGINE, "args": ["--max-model-len=8192"]}),
                    FLEET, three_state_cache(), observe(before))
    digests = {r["spec"]["engineDigest"] for r in replicas(before).values()}
    changed = {r["spec"]["engineDigest"] for r in replicas(after).values()}
    assert len(digests) == len(changed) == 1 and digests != changed


def test_equivalent_engines_share_a_digest():
    defaulted = {**ENGINE, "port": 8000, "readinessPath": "/health", "env": []}
    assert model_replica_view.Engine.of(defaulted).digest == model_replica_view.Engine.of(ENGINE).digest


def test_printer_columns_are_the_designed_ones():
    xrds = load_xrds()
    columns = {kind: [(c["name"], c["jsonPath"]) for c in xrds[kind].effective_printer_columns
                      if c.get("priority", 0) == 0]
               for kind in ("ModelDeployment", "ModelReplica")}
    assert columns["ModelDeployment"][:6] == [
        ("REPLICAS", ".status.summary"), ("CACHE", ".status.replicas.cache"),
        ("SOURCE", ".status.replicas.source"), ("WAITING", ".status.replicas.waiting"),
        ("FAILED", ".status.replicas.failed"), ("REASON", ".status.reason")]
    assert ("AGE", ".metadata.creationTimestamp") in columns["ModelDeployment"]
    assert columns["ModelReplica"][:4] == [
        ("CLUSTER", ".spec.clusterName"), ("DELIVERY", ".spec.delivery"),
        ("PHASE", ".status.phase"), ("REASON", ".status.reason")]


# --- spec.engine.env[].valueFrom: a Kubernetes EnvVarSource, bounded -------------------------

ROOT = Path(__file__).resolve().parents[1]
ENV_SOURCES = {
    "configMapKeyRef": {"name": "engine-settings", "key": "max-model-len", "optional": True},
    "secretKeyRef": {"name": "engine-token", "key": "TOKEN"},
    "fieldRef": {"fieldPath": "metadata.name"},
    "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"},
}


def render_with_env_from(tmp_path: Path, value_from: Any) -> tuple[int, str, str]:
    """`fleetcache render` of the example deployment with one more variable, FROM, whose
    valueFrom is `value_from`."""
    xr = render.load_documents(ROOT / "examples/modeldeployment-cached.yaml")[0]
    xr["spec"]["engine"]["env"].append({"name": "FROM", "valueFrom": value_from})
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(xr))
    fixtures = ROOT / "tests/fixtures/render"
    result = CliRunner().invoke(cli.main, [
        "render", str(tmp_path / "xr.yaml"),
        "--composition", str(ROOT / "compositions/modeldeployments.yaml"),
        "--xrd", str(ROOT / "apis"), "--required", str(fixtures / "required"),
        "--required", str(fixtures / "modelcache-partly-warm")])
    return result.exit_code, result.stdout, result.stderr


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("value_from, field", [
    ({"secretKeyRef": {"key": "TOKEN", "name": nested(48)}}, "valueFrom.secretKeyRef.name"),
    ({"secretKeyRef": ENV_SOURCES["secretKeyRef"], "a": nested(49)}, "valueFrom.a"),
], ids=["inside-a-source", "beside-a-source"])
def test_a_value_from_nested_50_levels_deep_is_refused_by_render_in_one_line(
        tmp_path, value_from, field):
    """Kept whole, such a value failed the function call in protobuf decoding (upb's depth
    limit) before any fleetcache code ran; the schema refuses it at the API server."""
    code, out, err = render_with_env_from(tmp_path, value_from)
    assert (code, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(f"ModelDeployment/qwen3-chat: spec.engine.env[1].{field}: ")
    assert len(line) < 300


@pytest.mark.parametrize("source", sorted(ENV_SOURCES))
def test_each_kind_of_env_var_source_is_accepted_and_reaches_the_engine(tmp_path, source):
    code, _, err = render_with_env_from(tmp_path, {source: ENV_SOURCES[source]})
    assert (code, err) == (0, "")
    engine = render.load_documents(ROOT / "examples/modeldeployment-cached.yaml")[0]["spec"]["engine"]
    engine["env"].append({"name": "FROM", "valueFrom": {source: ENV_SOURCES[source]}})
    assert model_replica_view.Engine.of(engine).env[-1] == \
        {"name": "FROM", "valueFrom": {source: ENV_SOURCES[source]}}


def test_a_value_from_naming_two_sources_is_refused(tmp_path):
    code, _, err = render_with_env_from(tmp_path, {"fieldRef": ENV_SOURCES["fieldRef"],
                                                   "secretKeyRef": ENV_SOURCES["secretKeyRef"]})
    assert code == 1
    assert err == ("ModelDeployment/qwen3-chat: spec.engine.env[1].valueFrom: valueFrom must set "
                   "exactly one of configMapKeyRef, secretKeyRef, fieldRef or resourceFieldRef\n")
