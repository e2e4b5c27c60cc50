"""compose-model-deployment during a ModelCache's rollout in waves (issue 21, item 6): a
replica moves to the new commit only when its cluster's wave has started and the cluster is
Ready on it; on rollback it returns; no replica is sent to a commit its cluster's cache is not
Ready on. Without status.rollout, or once it is Complete, nothing changes
(tests/test_model_deployment.py holds that behaviour)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from fleetcache import reasons
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_deployment as composer
from fleetcache.functions.k8s import agent_job
from tests.support.deployments import cache_required, cache_row, deployment, hydration
from tests.support.fleet import COMMIT, DIGEST, GIB, fleet_cluster

OLD_COMMIT = "0" * 40
OLD_DIGEST = "cd" * 32
OLD_SNAPSHOT = f"{agent_job.CACHE_MOUNT_PATH}/hub/models--Qwen--Qwen3-0.6B/snapshots/{OLD_COMMIT}"
FLEET = [fleet_cluster("gpu-a"), fleet_cluster("gpu-b")]
ON_GPU_A = {"placement": {"clusterNames": ["gpu-a"]}}
HELD = reasons.PreviousCommitHeldByRollout


def on(cluster: str, commit: str, phase: str, serving: str = "") -> dict:
    """The cluster's hydration pinned to `commit` (the old content with OLD_DIGEST), its status
    speaking of that content, the volume serving `serving` (the pinned commit once Ready)."""
    serving = serving or (commit if phase == "Ready" else "")
    found = hydration(cache_row(cluster, phase, servingCommit=serving), commit)
    digest = DIGEST if commit == COMMIT else OLD_DIGEST
    found["spec"].update(manifestDigest=digest, bytes=3 * GIB)
    found["status"]["resolved"] = {"commit": commit, "manifestDigest": digest, "bytes": 3 * GIB}
    return found


def rollout(phase: str) -> dict:
    """status.rollout as compose-model-cache writes it (views/model_cache.py RolloutStatus)."""
    return {"commit": COMMIT, "manifestDigest": DIGEST, "previousCommit": OLD_COMMIT,
            "phase": phase, "wave": "canary", "waves": [], "startedTime": "2026-05-01T12:00:00Z",
            "restartedAt": "", "stalePromote": "", "summary": "", "message": ""}


def cache(*hydrations: dict, phase: str | None = "Progressing") -> dict[str, list[dict]]:
    """The ModelCache resolved to COMMIT over the hydrations' clusters, with status.rollout
    in `phase` (None: no rollout, as without spec.rollout.waves)."""
    required = cache_required(*(cache_row(h["spec"]["clusterName"], "Ready") for h in hydrations))
    required[composer.HYDRATIONS_KEY] = list(hydrations)
    if phase is not None:
        required[composer.MODEL_CACHE_KEY][0]["status"]["rollout"] = rollout(phase)
    return required


def compose(xr: dict, required: dict, observed: dict | None = None) -> protocol.Outcome:
    return composer.compose(protocol.Request(
        composite=xr, observed=observed or {},
        required={composer.FLEET_CLUSTERS_KEY: FLEET, **required}))


def observe(outcome: protocol.Outcome) -> dict:
    """The composed ModelReplicas as Crossplane observes them next time, Ready."""
    out = {}
    for key, (desired, _) in outcome.desired.items():
        observed = copy.deepcopy(desired)
        observed["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out[key] = observed
    return out


def only_replica(outcome: protocol.Outcome) -> dict[str, Any]:
    (replica, _), = outcome.desired.values()
    return replica["spec"]


def placement(outcome: protocol.Outcome) -> tuple[str, str, str]:
    row, = outcome.status["placements"]
    return row["delivery"], row["commit"], row["reason"]


# --- a cluster whose wave has not started ----------------------------------------------


@pytest.mark.parametrize("phase", ["Progressing", "Paused", "Halted"])
def test_a_cluster_whose_wave_has_not_started_serves_the_old_commit_from_its_cache(phase):
    outcome = compose(deployment(**ON_GPU_A), cache(on("gpu-a", OLD_COMMIT, "Ready"), phase=phase))
    spec = only_replica(outcome)
    assert (spec["delivery"], spec["cache"]["commit"], spec["cache"]["snapshotPath"],
            spec["model"]["commit"]) == ("Cache", OLD_COMMIT, OLD_SNAPSHOT, OLD_COMMIT)
    assert placement(outcome) == ("Cache", OLD_COMMIT, HELD)


@pytest.mark.parametrize("phase", ["Pending", "Hydrating", "Failed"])
def test_a_source_replica_on_a_held_cluster_loads_the_old_commit(phase):
    outcome = compose(deployment(**ON_GPU_A), cache(on("gpu-a", OLD_COMMIT, phase)))
    assert only_replica(outcome)["model"]["commit"] == OLD_COMMIT
    assert placement(outcome) == ("Source", OLD_COMMIT, HELD)


def test_a_running_source_replica_under_switch_to_cache_never_loads_the_old_commit():
    xr = deployment(delivery={"switchToCache": "Never"}, **ON_GPU_A)
    first = compose(xr, cache(on("gpu-a", OLD_COMMIT, "Hydrating")))
    outcome = compose(xr, cache(on("gpu-a", OLD_COMMIT, "Ready")), observe(first))
    assert placement(outcome) == ("Source", OLD_COMMIT, reasons.SwitchToCacheNever)


def test_a_held_cluster_under_while_hydrating_wait_waits_for_its_hydration():
    outcome = compose(deployment(delivery={"whileHydrating": "Wait"}, **ON_GPU_A),
                      cache(on("gpu-a", OLD_COMMIT, "Hydrating")))
    assert only_replica(outcome)["hydration"]["phase"] == "Hydrating"
    assert placement(outcome) == ("Wait", "", reasons.Hydrating)


def test_the_deployment_says_how_many_replicas_the_rollout_holds():
    outcome = compose(deployment(replicas=2, placement={"clusterNames": ["gpu-a", "gpu-b"]},
                                 maxReplicasPerCluster=1),
                      cache(on("gpu-a", OLD_COMMIT, "Ready"), on("gpu-b", COMMIT, "Ready")))
    resolved = {c.type: c for c in outcome.conditions}["ModelCacheResolved"]
    assert resolved.message.endswith("; 1 replica on a previous commit while the ModelCache's "
                                     "rollout in waves holds their cluster (status.rollout)")
    assert outcome.status["replicas"]["previousCommit"] == 1


# --- the wave starts, and the rollout rolls back -----------------------------------------


def test_a_replica_moves_to_the_new_commit_only_once_its_cluster_is_ready_on_it():
    xr = deployment(**ON_GPU_A)
    seen, observed = [], {}
    for state in (on("gpu-a", OLD_COMMIT, "Ready"),  # its wave has not started
                  on("gpu-a", COMMIT, "Pending", serving=OLD_COMMIT),  # started, queued
                  on("gpu-a", COMMIT, "Hydrating", serving=OLD_COMMIT),
                  on("gpu-a", COMMIT, "Ready")):
        outcome = compose(xr, cache(state), observed)
        seen.append(placement(outcome))
        observed = observe(outcome)
    assert [commit for _, commit, _ in seen] == [OLD_COMMIT, OLD_COMMIT, OLD_COMMIT, COMMIT]
    assert seen[-1] == ("Cache", COMMIT, reasons.CacheReady)


def test_on_rollback_a_replica_returns_to_the_old_commit_once_it_is_ready_again():
    xr = deployment(**ON_GPU_A)
    on_new = compose(xr, cache(on("gpu-a", COMMIT, "Ready")))
    assert placement(on_new) == ("Cache", COMMIT, reasons.CacheReady)
    re_pinned = on("gpu-a", OLD_COMMIT, "Ready", serving=COMMIT)
    re_pinned["status"]["resolved"]["commit"] = COMMIT  # its composer has not run again yet
    waiting = compose(xr, cache(re_pinned, phase="RolledBack"), observe(on_new))
    assert placement(waiting)[:2] == ("Cache", COMMIT)  # what the volume is Ready on
    returned = compose(xr, cache(on("gpu-a", OLD_COMMIT, "Ready"), phase="RolledBack"),
                       observe(waiting))
    assert placement(returned) == ("Cache", OLD_COMMIT, HELD)


def test_a_source_replica_on_the_new_commit_returns_to_the_old_one_on_rollback():
    xr = deployment(**ON_GPU_A)
    on_new = compose(xr, cache(on("gpu-a", COMMIT, "Hydrating")))
    assert placement(on_new) == ("Source", COMMIT, reasons.Hydrating)
    outcome = compose(xr, cache(on("gpu-a", OLD_COMMIT, "Hydrating"), phase="RolledBack"),
                      observe(on_new))
    assert placement(outcome) == ("Source", OLD_COMMIT, HELD)


# --- without a rollout in waves ------------------------------------------------------------


@pytest.mark.parametrize("phase", [None, "Complete"], ids=["no-rollout", "complete"])
def test_without_a_rollout_in_flight_a_cluster_pinned_to_old_content_is_served_as_today(phase):
    served = compose(deployment(**ON_GPU_A), cache(on("gpu-a", OLD_COMMIT, "Ready"), phase=phase))
    assert placement(served) == ("Cache", OLD_COMMIT, reasons.PreviousCommitWhileHydrating)
    from_source = compose(deployment(**ON_GPU_A),
                          cache(on("gpu-a", OLD_COMMIT, "Hydrating"), phase=phase))
    assert placement(from_source) == ("Source", COMMIT, reasons.Hydrating)


def test_a_malformed_rollout_status_reads_as_no_rollout():
    required = cache(on("gpu-a", OLD_COMMIT, "Hydrating"))
    required[composer.MODEL_CACHE_KEY][0]["status"]["rollout"]["startedTime"] = "soon"
    assert placement(compose(deployment(**ON_GPU_A), required)) == (
        "Source", COMMIT, reasons.Hydrating)


def test_a_hydration_of_another_repository_is_not_held_on_its_commit():
    other = on("gpu-a", OLD_COMMIT, "Ready")
    other["spec"]["source"] = {"huggingFace": {"repo": "Qwen/Qwen2.5-0.5B"}}
    other["status"]["servingRepo"] = "Qwen/Qwen2.5-0.5B"
    assert placement(compose(deployment(**ON_GPU_A), cache(other))) == (
        "Source", COMMIT, reasons.Hydrating)


# --- never a commit its cluster's cache is not Ready on ----------------------------------

PHASES = ("Pending", "Hydrating", "Ready", "Failed")
POLICIES = ({}, {"whileHydrating": "Wait"}, {"onHydrationFailure": "Fail"},
            {"switchToCache": "Never"})


def ready_on(state: dict) -> set[str]:
    """The commits the cluster's volume is Ready on: what its hydration has verified."""
    status = state["status"]
    ready = {status.get("servingCommit")}
    if status["phase"] == "Ready":
        ready.add(status["resolved"]["commit"])
    return ready - {None, ""}


@pytest.mark.parametrize("rollout_phase", ["Progressing", "RolledBack"])
def test_no_replica_mounts_a_commit_its_clusters_cache_is_not_ready_on(rollout_phase):
    # pinned, and the content its status speaks of: the held content, reported or not yet
    # (re-pinned by a rollback), or the new content once its wave started
    pins = ((OLD_COMMIT, OLD_COMMIT), (OLD_COMMIT, COMMIT), (COMMIT, COMMIT))
    for (pinned, spoken), phase, serving, policy in itertools.product(
            pins, PHASES, ("", OLD_COMMIT, COMMIT), POLICIES):
        state = on("gpu-a", pinned, phase, serving=serving)
        state["status"]["resolved"]["commit"] = spoken  # other than pinned: not reported since
        if phase == "Ready":
            state["status"]["servingCommit"] = spoken
        outcome = compose(deployment(delivery=policy, **ON_GPU_A), cache(state, phase=rollout_phase))
        delivery, commit, _ = placement(outcome)
        case = (pinned, spoken, phase, serving, policy)
        if delivery == "Cache":
            assert commit in ready_on(state), case
        if delivery == "Source" and pinned == OLD_COMMIT:
            assert commit == OLD_COMMIT, case
