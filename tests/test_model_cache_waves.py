"""compose-model-cache rolling a new commit out in waves (issue 21, design/rollouts.md): only
the waves started move to the new commit, the others keep the old one; a wave done starts the
next, a pause waits for a promote, a failure halts or rolls the canary back to the previous
content; the volumes keep the previous commit while it may be needed; the mirror's publisher
is one that may start; status.rollout, Progressing and the warnings say where it stands."""

from __future__ import annotations

import copy
import datetime

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render
from fleetcache.functions import naming, protocol, server, times
from fleetcache.functions.composers import model_cache
from tests.support.builders import cache_replica, with_status
from tests.support.fleet import (
    COMMIT,
    DIGEST,
    GIB,
    condition,
    fleet_cluster,
    grant_admitting,
    hydrations,
    model_cache_xr,
    observed_hydration,
    with_resolved,
)

OLD = "0" * 40
NAMES = ["gpu-a", "gpu-b", "gpu-c"]
FLEET = [fleet_cluster(n) for n in NAMES]
CANARY = [{"name": "canary", "clusterNames": ["gpu-a"]}]
CANARY_PAUSED = [{"name": "canary", "clusterNames": ["gpu-a"], "pause": True}]
NOW = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


def cache(**rollout) -> dict:
    """The cache resolved to COMMIT, its targets gpu-a..c, rolled out as `rollout` says."""
    return with_resolved(model_cache_xr(placement={"clusterNames": NAMES},
                                        rollout={"maxConcurrent": 10, **rollout}))


def compose(xr: dict, observed: dict, replicas: list[dict] | None = None, *, now=NOW,
            previous: dict | None = None, fleet: list[dict] | None = None,
            extra: dict | None = None) -> protocol.Outcome:
    """One call under a grant that admitted it; previous: the status.rollout of the last call."""
    xr = copy.deepcopy(xr)
    if previous is not None:
        xr["status"]["rollout"] = previous
    required = {"fleet-clusters": FLEET if fleet is None else fleet,
                "model-cache-grant": [grant_admitting(xr)], "model-replicas": replicas or [], **(extra or {})}
    return model_cache.compose(protocol.Request(composite=xr, observed=observed, required=required, now=now))


def on_old() -> dict:
    """Every target's hydration pinned to OLD, Ready and serving it."""
    old = with_resolved(model_cache_xr(placement={"clusterNames": NAMES}), commit=OLD)
    made = model_cache.compose(protocol.Request(composite=old, required={
        "fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(old)]}))
    return {k: serving(observed_hydration(r, "Ready", done=3 * GIB), OLD) for k, (r, _) in made.desired.items()}


def serving(observed: dict, commit: str) -> dict:
    out = copy.deepcopy(observed)
    out["status"].update({"servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": commit,
                          "servingManifestDigest": DIGEST})
    return out


def moved(observed: dict, outcome: protocol.Outcome, cluster: str, phase: str, *,
          changed: datetime.datetime = NOW, reason: str = "") -> dict:
    """The cluster's hydration as composed in `outcome`, observed in `phase` (its Hydrated
    condition changed at `changed`)."""
    out = dict(observed)
    desired = hydrations(outcome)[cluster]
    hydration = serving(observed_hydration(desired, phase, done=3 * GIB, reason=reason),
                        desired["spec"]["commit"] if phase == "Ready" else OLD)
    hydration["status"]["conditions"] = [{"type": "Hydrated", "status": str(phase == "Ready"),
                                          "reason": reason or phase,
                                          "lastTransitionTime": times.format_time(changed)}]
    out[f"hydration-{cluster}"] = hydration
    return out


def ready_replica(commit: str, cluster: str, since: datetime.datetime, ready: bool = True) -> dict:
    replica = cache_replica(commit, cluster=cluster)
    replica["spec"]["cache"]["modelCacheName"] = "qwen"
    return with_status(replica, reason="Available" if ready else "Starting", servingCommit=commit,
                       model={"revision": commit}, conditions=[
        {"type": "Ready", "status": str(ready), "lastTransitionTime": times.format_time(since)},
        {"type": "Serving", "status": "True", "lastTransitionTime": times.format_time(since)}])


def commits(outcome: protocol.Outcome) -> dict[str, str]:
    return {c: h["spec"]["commit"] for c, h in hydrations(outcome).items()}


def rows(outcome: protocol.Outcome) -> dict[str, dict]:
    return {r["name"]: r for r in outcome.status["clusters"]}


def started(xr: dict) -> tuple[dict, protocol.Outcome]:
    """The first call of the rollout over a fleet on OLD: its observed state and outcome."""
    observed = on_old()
    return observed, compose(xr, observed)


# --- without waves ------------------------------------------------------------------------------


def test_without_waves_every_target_moves_and_there_is_no_rollout_status_or_replica_requirement():
    outcome = compose(cache(), on_old())
    assert commits(outcome) == dict.fromkeys(NAMES, COMMIT)
    assert "rollout" not in outcome.status
    assert "model-replicas" not in outcome.requirements
    assert all("keepCommits" not in h["spec"] for h in hydrations(outcome).values())


# --- the waves -----------------------------------------------------------------------------------


def test_the_replicas_mounting_the_cache_are_required_by_its_label_in_its_namespace():
    outcome = compose(cache(waves=CANARY), on_old())
    assert outcome.requirements["model-replicas"] == protocol.Requirement(
        naming.API_VERSION, "ModelReplica", namespace="ml", match_labels=((naming.LABEL_MODEL_CACHE, "qwen"),))


def test_nothing_new_is_composed_until_the_replicas_are_fetched():
    xr, observed = cache(waves=CANARY), on_old()
    outcome = model_cache.compose(protocol.Request(composite=xr, observed=observed, required={
        "fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)]}))
    assert commits(outcome) == dict.fromkeys(NAMES, OLD)


def test_only_the_first_wave_is_composed_on_the_new_commit_the_others_keep_the_old():
    _, outcome = started(cache(waves=CANARY))
    assert commits(outcome) == {"gpu-a": COMMIT, "gpu-b": OLD, "gpu-c": OLD}
    rollout = outcome.status["rollout"]
    assert (rollout["phase"], rollout["wave"], rollout["summary"], rollout["previousCommit"]) == \
        ("Progressing", "canary", "wave 1/2", OLD)


def test_a_cluster_of_a_later_wave_says_which_wave_it_waits_for():
    _, outcome = started(cache(waves=CANARY))
    row = rows(outcome)["gpu-b"]
    assert row["message"].startswith("waits for wave rest: the rollout is at wave canary")
    assert f"serving {OLD[:10]}" in row["message"]


def test_the_previous_content_is_latched_when_the_rollout_starts():
    _, outcome = started(cache(waves=CANARY))
    rollout = outcome.status["rollout"]
    assert (rollout["previousManifestDigest"], rollout["previousBytes"]) == (DIGEST, 3 * GIB)


def test_a_wave_done_starts_the_next_one():
    xr = cache(waves=CANARY)
    observed, first = started(xr)
    outcome = compose(xr, moved(observed, first, "gpu-a", "Ready"), previous=first.status["rollout"])
    assert commits(outcome) == dict.fromkeys(NAMES, COMMIT)
    assert outcome.status["rollout"]["wave"] == "rest"


def test_a_wave_waits_for_its_replicas_on_the_new_commit_to_be_ready():
    xr = cache(waves=CANARY)
    observed, first = started(xr)
    replicas = [ready_replica(COMMIT, "gpu-a", NOW, ready=False)]
    outcome = compose(xr, moved(observed, first, "gpu-a", "Ready"), replicas, previous=first.status["rollout"])
    assert commits(outcome)["gpu-b"] == OLD
    assert "waiting for gpu-a" in outcome.status["rollout"]["message"]


def test_a_replica_not_ready_on_the_new_commit_past_the_deadline_halts_the_rollout():
    xr = cache(waves=CANARY, progressDeadline="30m")
    observed, first = started(xr)
    replicas = [ready_replica(COMMIT, "gpu-a", NOW, ready=False)]
    outcome = compose(xr, moved(observed, first, "gpu-a", "Ready"), replicas, now=NOW + 31 * MINUTE,
                      previous=first.status["rollout"])
    assert outcome.status["rollout"]["phase"] == "Halted"
    assert "gpu-a: Starting" in outcome.status["rollout"]["message"]


def test_a_paused_wave_done_pauses_and_progressing_says_rollout_paused():
    xr = cache(waves=CANARY_PAUSED)
    observed, first = started(xr)
    outcome = compose(xr, moved(observed, first, "gpu-a", "Ready"), previous=first.status["rollout"])
    assert (outcome.status["rollout"]["phase"], outcome.status["rollout"]["summary"]) == \
        ("Paused", "paused at canary")
    progressing = condition(outcome, "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "RolloutPaused")
    assert commits(outcome)["gpu-b"] == OLD
    assert rows(outcome)["gpu-b"]["reason"] == "RolloutPaused"


def test_a_promote_of_the_paused_wave_starts_the_next():
    xr = cache(waves=CANARY_PAUSED)
    observed, first = started(xr)
    observed = moved(observed, first, "gpu-a", "Ready")
    paused = compose(xr, observed, previous=first.status["rollout"])
    promoted = cache(waves=CANARY_PAUSED, promote="canary")
    outcome = compose(promoted, observed, previous=paused.status["rollout"])
    assert commits(outcome) == dict.fromkeys(NAMES, COMMIT)


def test_a_failed_canary_halts_and_no_other_cluster_starts():
    xr = cache(waves=CANARY)
    observed, first = started(xr)
    outcome = compose(xr, moved(observed, first, "gpu-a", "Failed", reason="DigestMismatch"),
                      previous=first.status["rollout"])
    assert outcome.status["rollout"]["phase"] == "Halted"
    assert commits(outcome) == {"gpu-a": COMMIT, "gpu-b": OLD, "gpu-c": OLD}
    progressing = condition(outcome, "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "RolloutHalted")
    assert rows(outcome)["gpu-b"]["reason"] == "RolloutHalted"


def test_a_rollback_re_pins_the_canary_to_the_previous_content():
    xr = cache(waves=CANARY, onFailure="Rollback")
    observed, first = started(xr)
    outcome = compose(xr, moved(observed, first, "gpu-a", "Failed", reason="DigestMismatch"),
                      previous=first.status["rollout"])
    assert outcome.status["rollout"]["phase"] == "RolledBack"
    spec = hydrations(outcome)["gpu-a"]["spec"]
    assert (spec["commit"], spec["manifestDigest"], spec["bytes"]) == (OLD, DIGEST, 3 * GIB)
    assert condition(outcome, "Progressing").reason == "RolledBack"


def test_a_rollback_of_a_source_with_a_pinned_manifest_halts_and_says_why():
    xr = cache(waves=CANARY, onFailure="Rollback")
    observed, first = started(xr)
    failed = moved(observed, first, "gpu-a", "Failed", reason="DigestMismatch")
    decision = model_cache.rollout_decision(
        protocol.Request(composite={**xr, "status": {**xr["status"], "rollout": first.status["rollout"]}},
                         observed=failed, required={"model-replicas": []}, now=NOW),
        s3_spec(xr), xr["status"]["resolved"], model_cache.target_clusters(model_cache.read_spec(xr["spec"]), FLEET))
    assert decision.status is not None and decision.status.phase == "Halted"
    assert "spec.rollout.onFailure is Rollback but the source's hydrations read the ModelCache's current " \
        "manifest" in decision.status.message


def s3_spec(xr: dict) -> model_cache.CacheSpec:
    """The cache's spec with an S3 source (its hydrations read the cache's pinned manifest)."""
    spec = copy.deepcopy(xr["spec"])
    spec["source"] = {"s3": {"bucket": "models", "prefix": "qwen", "endpoint": "https://s3.example.com",
                             "credentialsSecretRef": {"name": "s3-keys"}}}
    return model_cache.read_spec(spec)


def test_a_halt_is_warned_once_on_the_change_not_on_every_call():
    xr = cache(waves=CANARY)
    observed, first = started(xr)
    observed = moved(observed, first, "gpu-a", "Failed", reason="DigestMismatch")
    halted = compose(xr, observed, previous=first.status["rollout"])
    again = compose(xr, observed, previous=halted.status["rollout"])
    assert [w for w in halted.warnings if "halted at canary" in w]
    assert not [w for w in again.warnings if "halted" in w]



def test_a_new_wave_is_a_normal_event_once_not_a_warning():
    xr = cache(waves=CANARY)
    observed, first = started(xr)
    observed = moved(observed, first, "gpu-a", "Ready")
    next_wave = compose(xr, observed, previous=first.status["rollout"])
    again = compose(xr, observed, previous=next_wave.status["rollout"])
    assert [n for n in next_wave.notices if "wave" in n or "rest" in n]
    assert not next_wave.warnings and not again.notices


def test_a_bake_in_progress_asks_to_be_called_again_when_it_ends():
    xr = cache(waves=CANARY, bakeTime="10m")
    observed, first = started(xr)
    replicas = [ready_replica(COMMIT, "gpu-a", NOW)]
    baking = compose(xr, moved(observed, first, "gpu-a", "Ready"), replicas, now=NOW + 4 * MINUTE,
                     previous=first.status["rollout"])
    assert commits(baking)["gpu-b"] == OLD
    assert baking.requeue_after == 6 * MINUTE.total_seconds()

# --- the previous commit on the volumes -----------------------------------------------------------


def test_the_volumes_keep_the_previous_commit_while_the_rollout_is_in_flight():
    _, outcome = started(cache(waves=CANARY))
    assert hydrations(outcome)["gpu-a"]["spec"]["keepCommits"] == [OLD]


def test_the_previous_commit_is_let_go_after_complete_plus_after_removal():
    xr = cache(waves=CANARY)
    xr["spec"]["retention"] = {"afterRemoval": "1h"}
    observed, first = started(xr)
    observed = moved(observed, first, "gpu-a", "Ready")
    second = compose(xr, observed, previous=first.status["rollout"])
    for cluster in ("gpu-b", "gpu-c"):
        observed = moved(observed, second, cluster, "Ready")
    complete = compose(xr, observed, previous=second.status["rollout"])
    later = compose(xr, observed, now=NOW + 61 * MINUTE, previous=complete.status["rollout"])
    assert complete.status["rollout"]["phase"] == "Complete"
    assert hydrations(complete)["gpu-b"]["spec"]["keepCommits"] == [OLD]
    assert all("keepCommits" not in h["spec"] for h in hydrations(later).values())


# --- the mirror -------------------------------------------------------------------------------------


def test_the_publisher_is_a_cluster_the_waves_let_start():
    mirror = {"s3": {"bucket": "fleet-mirror", "endpoint": "https://minio.example.com"}, "onMissing": "Fail"}
    xr = with_resolved(model_cache_xr(placement={"clusterNames": NAMES}, distribution={"mirror": mirror},
                                      rollout={"maxConcurrent": 10,
                                               "waves": [{"name": "canary", "clusterNames": ["gpu-b"]}]}))
    outcome = compose(xr, on_old())
    assert outcome.status["mirror"]["publisher"] == "gpu-b"
    assert hydrations(outcome)["gpu-b"]["spec"]["commit"] == COMMIT


# --- through the gRPC server ------------------------------------------------------------------------


def test_the_first_wave_moves_through_the_grpc_server():
    xr, observed = cache(waves=CANARY), on_old()
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)], "model-replicas": []}
    runner = server.FunctionRunner(now=lambda: NOW)
    with render.InProcessServer(None, runner) as srv, render.channel_to(srv.address) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(
            render.build_request(xr, observed, fnv1.State(), None, None, required, tag="waves"))
    composed = {key: server.from_struct(rsp.desired.resources[key].resource)["spec"]["commit"]
                for key in rsp.desired.resources if key.startswith("hydration-")}
    assert composed == {"hydration-gpu-a": COMMIT, "hydration-gpu-b": OLD, "hydration-gpu-c": OLD}
    assert server.from_struct(rsp.desired.composite.resource)["status"]["rollout"]["wave"] == "canary"
