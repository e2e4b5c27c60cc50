"""compose-model-cache-hydration: table tests of compose() on plain requests."""

from __future__ import annotations

import copy
import datetime
import json

import pytest

from fleetcache import exitcodes, messages, reasons
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol, quantities
from fleetcache.functions.composers.model_cache_hydration import compose
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s.hydration_objects import content_id, job_prefix
from fleetcache.functions.views.fleet_cluster import fleet_cluster_requirement
from tests.support.builders import (
    CACHE,
    CLUSTER,
    COMMIT,
    DIGEST,
    GIB,
    NAMESPACE,
    cache_replica,
    composed_key,
    fleet_cluster,
    hydration_request,
    hydration_xr,
    job_complete,
    job_failed,
    job_failed_exit,
    job_running,
    observe,
    pvc,
    with_status,
)
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations
from tests.support.xrd import assert_valid

JOB_KEY = job_prefix(COMMIT, DIGEST)  # the fetch Job's key, less its template digest
NEW_COMMIT = "0" * 39 + "1"
BOUND = {"volume": pvc("Bound")}
TOKEN_BYTES = "hf_SECRETsecretSECRET"


def progress(done: int, total: int, files_done: int = 2, files_total: int = 5, **more) -> dict:
    return {"progress": {"phase": "Hydrating", "bytesDone": str(done), "bytesTotal": str(total),
                         "filesDone": str(files_done), "filesTotal": str(files_total),
                         "commit": COMMIT, **more}}


def settle(xr: dict | None = None, *, states: dict | None = None, data: dict | None = None,
           cluster: object = "ready") -> protocol.Outcome:
    """Compose until the Job exists, then observe everything in the given remote states."""
    xr = hydration_xr() if xr is None else xr
    first = compose(hydration_request(xr, cluster=cluster))
    second = compose(hydration_request(xr, observed=observe(first), cluster=cluster))
    observed = observe(second, states=states, data=data)
    return compose(hydration_request(xr, observed=observed, cluster=cluster))


def observed_after(xr: dict, *, states: dict | None = None, data: dict | None = None) -> dict:
    """What Crossplane observes once the Job was created and reached `states`."""
    first = compose(hydration_request(xr))
    second = compose(hydration_request(xr, observed=observe(first)))
    return observe(second, states=states, data=data)


def remote(outcome: protocol.Outcome, key: str) -> dict:
    return outcome.desired[composed_key(outcome, key)][0]["spec"]["forProvider"]["manifest"]


def pod_spec(outcome: protocol.Outcome) -> dict:
    return remote(outcome, JOB_KEY)["spec"]["template"]["spec"]


# --- phases -------------------------------------------------------------------------------


def test_first_call_composes_the_prerequisites_but_not_the_job():
    outcome = compose(hydration_request())
    assert sorted(outcome.desired) == ["namespace", "progress", "role", "role-binding",
                                       "service-account", "volume"]
    assert outcome.status["phase"] == "Pending"
    assert outcome.status["reason"] == "AwaitingPrerequisites"
    assert outcome.composite_ready is False


def test_job_is_created_once_its_prerequisites_exist_on_the_cluster():
    first = compose(hydration_request())
    outcome = compose(hydration_request(observed=observe(first)))
    assert composed_key(outcome, JOB_KEY)
    assert outcome.status["reason"] == "JobNotStarted"


def test_an_existing_job_is_kept_even_when_a_prerequisite_is_not_observed():
    observed = observed_after(hydration_xr(), states={JOB_KEY: job_running(), **BOUND})
    del observed["service-account"]
    outcome = compose(hydration_request(observed=observed))
    assert composed_key(outcome, JOB_KEY)


def test_pending_while_the_job_has_not_started():
    outcome = settle(states=BOUND)
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "JobNotStarted")


def test_pending_while_the_volume_is_not_bound():
    outcome = settle(states={JOB_KEY: job_running(), "volume": pvc("Pending")})
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "VolumeNotBound")
    assert "storageClassName" in outcome.status["message"]  # the remedy
    assert outcome.desired["volume"][1] is False


def test_hydrating_reports_progress_from_the_configmap():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(2 * GIB, 5 * GIB))
    status = outcome.status
    assert status["phase"] == "Hydrating"
    assert status["progress"] == {"bytesDone": 2 * GIB, "bytesTotal": 5 * GIB,
                                  "filesDone": 2, "filesTotal": 5, "percent": 40}
    assert status["message"].startswith("40%")
    assert outcome.composite_ready is False


def test_hydrating_mentions_the_last_retried_failure():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(1, 10, reason="RateLimited", message="429 from the Hub"))
    assert "RateLimited: 429 from the Hub" in outcome.status["message"]


def test_hydrating_shows_the_agents_note_while_it_retries_a_hung_endpoint():
    note = "retrying GET /api/models (attempt 2 of 5) after: no answer within 30s"
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(1, 10, message=note))
    assert outcome.status["phase"] == "Hydrating"
    assert note in outcome.status["message"]


def test_a_long_agent_message_keeps_its_remedy_whole_and_once():
    remedy = exitcodes.BY_REASON["DigestMismatch"].remedy
    message = f"model-00001.safetensors: sha256 {'ab' * 60} expected. {remedy}"
    outcome = settle(states={JOB_KEY: job_failed_exit(12), **BOUND},
                     data=progress(1, 10, phase="Failed", reason="DigestMismatch",
                                   message=message))
    assert outcome.status["message"].count(remedy[:20]) == 1  # no cut-off copy before it
    assert outcome.status["message"].endswith(remedy)


def test_progress_record_of_an_earlier_commit_is_ignored():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(GIB, GIB, commit=NEW_COMMIT))
    assert outcome.status["progress"]["bytesDone"] == 0
    assert outcome.status["progress"]["bytesTotal"] == 3 * GIB  # spec.bytes


def test_junk_in_the_progress_record_reads_as_zero():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data={"progress": {"bytesDone": "lots", "bytesTotal": "-5",
                                        "filesDone": None}})
    assert outcome.status["progress"]["bytesDone"] == 0
    assert outcome.status["phase"] == "Hydrating"


def test_ready_when_the_job_completes():
    outcome = settle(states={JOB_KEY: job_complete(), **BOUND}, data=progress(GIB, GIB))
    assert outcome.status["phase"] == "Ready"
    assert outcome.status["progress"]["percent"] == 100
    assert outcome.status["progress"]["filesDone"] == 5
    assert outcome.composite_ready is True
    assert protocol.Condition("Hydrated", "True", "Hydrated", outcome.status["message"]) \
        in outcome.conditions


def test_ready_drops_job_token_and_agent_access_but_keeps_the_volume():
    outcome = settle(hydration_xr(token=True), states={JOB_KEY: job_complete(), **BOUND})
    assert sorted(outcome.desired) == ["namespace", "progress", "volume"]
    assert all(ready for _, ready in outcome.desired.values())


def test_ready_is_latched_after_the_job_is_collected():
    xr = with_status(hydration_xr(), phase="Ready", resolved={"commit": COMMIT},
                     progress={"bytesDone": GIB, "bytesTotal": GIB, "filesTotal": 5})
    observed = {k: v for k, v in observed_after(xr, states=BOUND).items()
                if not k.startswith(JOB_KEY)}
    outcome = compose(hydration_request(xr, observed=observed))
    assert outcome.status["phase"] == "Ready"
    assert not composed_key(outcome, JOB_KEY)
    assert outcome.status["progress"]["bytesTotal"] == GIB


def test_ready_latch_holds_while_the_cluster_is_not_ready():
    xr = with_status(hydration_xr(), phase="Ready", resolved={"commit": COMMIT})
    outcome = compose(hydration_request(xr, cluster="not-ready"))
    assert outcome.status["phase"] == "Ready"
    assert "not Ready" in outcome.status["message"]


def test_latch_does_not_hold_for_a_new_commit():
    old = with_status(hydration_xr(), phase="Ready", resolved={"commit": COMMIT})
    xr = copy.deepcopy(old)
    xr["spec"]["commit"] = NEW_COMMIT
    observed = observe(compose(hydration_request(xr)))
    outcome = compose(hydration_request(xr, observed=observed))
    assert outcome.status["phase"] == "Pending"
    assert composed_key(outcome, job_prefix(NEW_COMMIT, DIGEST))
    assert outcome.status["resolved"]["commit"] == NEW_COMMIT


def test_new_patterns_on_the_same_commit_hydrate_again_with_a_new_job():
    ready = with_status(hydration_xr(), phase="Ready",
                        resolved={"commit": COMMIT, "manifestDigest": DIGEST})
    xr = copy.deepcopy(ready)
    xr["spec"]["manifestDigest"] = "cd" * 32
    observed = observe(compose(hydration_request(xr)))
    outcome = compose(hydration_request(xr, observed=observed))
    assert outcome.status["phase"] != "Ready"
    assert composed_key(outcome, job_prefix(COMMIT, "cd" * 32))
    assert not composed_key(outcome, JOB_KEY)


def test_a_new_commit_replaces_the_old_job_object():
    observed = observed_after(hydration_xr(), states={JOB_KEY: job_running(), **BOUND})
    xr = hydration_xr(commit=NEW_COMMIT)
    outcome = compose(hydration_request(xr, observed=observed))
    assert not composed_key(outcome, JOB_KEY)
    new_job = remote(outcome, job_prefix(NEW_COMMIT, DIGEST))
    assert NEW_COMMIT[:10] in new_job["metadata"]["name"]


# --- the serving commit -------------------------------------------------------------------

NEW_JOB_KEY = job_prefix(NEW_COMMIT, DIGEST)
SERVING = {"servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": COMMIT,
           "servingManifestDigest": "ab" * 32}


def repinned(states: dict, status: dict | None = None) -> protocol.Outcome:
    """A hydration that was Ready on COMMIT, re-pinned to NEW_COMMIT, its new Job in `states`."""
    xr = with_status(hydration_xr(commit=NEW_COMMIT), **{
        "phase": "Ready", "resolved": {"commit": COMMIT}, **(status or SERVING)})
    return compose(hydration_request(xr, observed=observed_after(xr, states=states)))


def serving(outcome: protocol.Outcome) -> dict:
    return {k: outcome.status[k] for k in SERVING}


def test_ready_latches_the_commit_as_the_serving_commit():
    outcome = settle(states={JOB_KEY: job_complete(), **BOUND})
    assert serving(outcome) == SERVING


def test_no_serving_commit_before_the_first_ready():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND})
    assert serving(outcome) == {"servingRepo": "", "servingCommit": "",
                                "servingManifestDigest": ""}


def test_the_serving_commit_is_kept_while_a_new_commit_hydrates():
    outcome = repinned({NEW_JOB_KEY: job_running(), **BOUND})
    assert outcome.status["phase"] == "Hydrating"
    assert outcome.status["resolved"]["commit"] == NEW_COMMIT
    assert serving(outcome) == SERVING
    assert f"keeps serving {COMMIT[:10]} until {NEW_COMMIT[:10]}" in outcome.status["message"]


def test_the_serving_commit_is_kept_after_the_new_commit_fails():
    outcome = repinned({NEW_JOB_KEY: job_failed_exit(13), **BOUND},
                       status={**SERVING, "phase": "Hydrating"})
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Failed",
                                                                   "InsufficientCapacity")
    assert serving(outcome) == SERVING


def test_the_serving_commit_moves_to_the_new_commit_once_it_is_ready():
    outcome = repinned({NEW_JOB_KEY: job_complete(), **BOUND})
    assert outcome.status["phase"] == "Ready"
    assert serving(outcome)["servingCommit"] == NEW_COMMIT
    assert "keeps serving" not in outcome.status["message"]


def test_a_serving_commit_that_is_not_a_commit_is_dropped():
    outcome = repinned({NEW_JOB_KEY: job_running(), **BOUND},
                       status={**SERVING, "servingCommit": "../../etc"})
    assert serving(outcome)["servingCommit"] == ""


@pytest.mark.parametrize("row", exitcodes.EXIT_CODES, ids=lambda r: f"{r.code}-{r.reason}")
def test_failed_reason_and_remedy_come_from_the_exit_code(row):
    outcome = settle(states={JOB_KEY: job_failed_exit(row.code), **BOUND})
    assert outcome.status["phase"] == "Failed"
    assert outcome.status["reason"] == row.reason
    assert row.remedy in outcome.status["message"]
    assert protocol.Condition("Hydrated", "False", row.reason, outcome.status["message"]) \
        in outcome.conditions


def test_failed_reason_comes_from_the_progress_record_without_an_exit_code():
    outcome = settle(states={JOB_KEY: job_failed("BackoffLimitExceeded", "Job has reached "
                                                 "the specified backoff limit"), **BOUND},
                     data=progress(1, 10, phase="Failed", reason="SourceUnreachable",
                                   message="connection reset by huggingface.co"))
    assert outcome.status["reason"] == "SourceUnreachable"
    assert "connection reset" in outcome.status["message"]
    assert exitcodes.BY_REASON["SourceUnreachable"].remedy in outcome.status["message"]


def test_failed_by_deadline_says_deadline_exceeded():
    outcome = settle(states={JOB_KEY: job_failed("DeadlineExceeded", "Job was active longer "
                                                 "than specified deadline"), **BOUND},
                     data=progress(1, 10, reason="RateLimited", message="429"))
    assert outcome.status["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds" in outcome.status["message"]


def test_failed_without_any_clue_says_backoff_limit_exceeded():
    outcome = settle(states={JOB_KEY: job_failed("BackoffLimitExceeded", ""), **BOUND})
    assert outcome.status["reason"] == "BackoffLimitExceeded"


def test_failed_keeps_the_job_and_token_so_it_is_not_retried_in_a_loop():
    outcome = settle(hydration_xr(token=True), states={JOB_KEY: job_failed_exit(10), **BOUND})
    assert composed_key(outcome, JOB_KEY) and "token-secret" in outcome.desired
    assert outcome.composite_ready is False


# --- the cluster --------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ["ready", "not-ready", "missing", "unfetched"])
def test_the_fleet_cluster_is_required_on_every_call(cluster):
    outcome = compose(hydration_request(cluster=cluster))
    assert outcome.requirements["fleet-cluster"] == fleet_cluster_requirement(CLUSTER)


def test_cluster_not_fetched_yet_is_pending_and_composes_nothing():
    outcome = compose(hydration_request(cluster="unfetched"))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "ClusterNotReady")
    assert outcome.desired == {}


def test_cluster_not_ready_is_pending_and_keeps_what_exists():
    observed = observed_after(hydration_xr(), states={JOB_KEY: job_running(), **BOUND})
    outcome = compose(hydration_request(observed=observed, cluster="not-ready"))
    assert outcome.status["reason"] == "ClusterNotReady"
    assert sorted(outcome.desired) == sorted(observed)


def test_cluster_gone_is_cluster_not_found_and_keeps_what_exists():
    observed = observed_after(hydration_xr(), states={JOB_KEY: job_running(), **BOUND})
    outcome = compose(hydration_request(observed=observed, cluster="missing"))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "ClusterNotFound")
    assert "Create the FleetCluster" in outcome.status["message"]
    assert sorted(outcome.desired) == sorted(observed)


def test_a_cluster_with_a_malformed_capacity_is_still_usable():
    cluster = fleet_cluster(CLUSTER, cache={"capacity": "a lot"})
    outcome = compose(hydration_request(cluster=cluster))
    assert "volume" in outcome.desired


def test_objects_use_the_clusters_provider_config():
    cluster = fleet_cluster(CLUSTER)
    cluster["status"]["providerConfigName"] = "adopted-cpc"
    outcome = compose(hydration_request(cluster=cluster))
    refs = {o["spec"]["providerConfigRef"]["name"] for o, _ in outcome.desired.values()}
    assert refs == {"adopted-cpc"}
    assert all(o["spec"]["providerConfigRef"]["kind"] == "ClusterProviderConfig"
               for o, _ in outcome.desired.values())


def test_agent_image_comes_from_the_cluster():
    cluster = fleet_cluster(CLUSTER)
    cluster["spec"]["agent"] = {"image": "mirror.example/agent:v1"}
    first = compose(hydration_request(cluster=cluster))
    outcome = compose(hydration_request(observed=observe(first), cluster=cluster))
    assert pod_spec(outcome)["containers"][0]["image"] == "mirror.example/agent:v1"


# --- what is composed ---------------------------------------------------------------------


def test_remote_names_follow_the_contract():
    outcome = settle(hydration_xr(token=True), states=BOUND)
    assert remote(outcome, "volume")["metadata"]["name"] == naming.cache_volume_name(CACHE)
    assert remote(outcome, "progress")["metadata"]["name"] == naming.child_name(CACHE, "progress")
    for key in ("service-account", "role", "role-binding"):
        assert remote(outcome, key)["metadata"]["name"] == naming.child_name(CACHE, "agent")
    assert remote(outcome, "token-secret")["metadata"]["name"] == naming.child_name(CACHE, "token")
    job = remote(outcome, JOB_KEY)
    assert job["metadata"]["name"] == naming.child_name(
        CACHE, "hydrate", content_id(COMMIT, DIGEST), agent_job.template_digest(job))
    assert {m["metadata"].get("namespace", m["metadata"]["name"])
            for _, m in iter_remote_manifests(outcome)} == {NAMESPACE}
    assert outcome.status["volumeName"] == naming.cache_volume_name(CACHE)


def test_object_names_derive_from_the_hydration_and_the_job_carries_the_commit():
    xr = hydration_xr()
    outcome = settle(xr, states=BOUND)
    name = xr["metadata"]["name"]
    assert outcome.desired["volume"][0]["metadata"]["name"] == naming.child_name(name, "volume")
    assert COMMIT[:10] in outcome.desired[composed_key(outcome, JOB_KEY)][0]["metadata"]["name"]


def test_namespace_is_create_only_so_it_is_never_deleted():
    outcome = compose(hydration_request())
    policies = outcome.desired["namespace"][0]["spec"]["managementPolicies"]
    assert policies == ["Observe", "Create"]
    assert "Delete" not in policies and "*" not in policies


def test_progress_configmap_is_observe_create_delete_so_agent_writes_survive():
    outcome = compose(hydration_request())
    assert outcome.desired["progress"][0]["spec"]["managementPolicies"] == \
        ["Observe", "Create", "Delete"]


def test_agent_may_only_get_and_patch_its_own_configmap():
    outcome = compose(hydration_request())
    rules = remote(outcome, "role")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["configmaps"],
                      "resourceNames": [naming.child_name(CACHE, "progress")],
                      "verbs": ["get", "patch"]}]
    binding = remote(outcome, "role-binding")
    assert binding["roleRef"]["name"] == remote(outcome, "role")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": naming.child_name(
        CACHE, "agent"), "namespace": NAMESPACE}]


def test_volume_is_ready_only_when_bound_by_cel_query_and_by_flag():
    bound = settle(states=BOUND)
    pending = settle(states={"volume": pvc("Pending")})
    readiness = bound.desired["volume"][0]["spec"]["readiness"]
    assert readiness["policy"] == "DeriveFromCelQuery"
    assert "'Bound'" in readiness["celQuery"]
    assert (bound.desired["volume"][1], pending.desired["volume"][1]) == (True, False)


def test_volume_size_class_and_mode_come_from_the_hydration():
    xr = hydration_xr(storage={"size": "7Gi", "storageClassName": "fast",
                               "accessMode": "ReadWriteOnce"})
    cluster = fleet_cluster(CLUSTER, cache={"storageClassName": "slow"})
    spec = remote(compose(hydration_request(xr, cluster=cluster)), "volume")["spec"]
    assert spec["resources"]["requests"]["storage"] == "7Gi"
    assert spec["storageClassName"] == "fast"
    assert spec["accessModes"] == ["ReadWriteOnce"]


def test_an_existing_volume_keeps_its_class_and_access_mode_and_never_shrinks():
    first = compose(hydration_request(hydration_xr(storage={"size": "8Gi"})))
    observed = observe(first, states=BOUND)
    observed["volume"]["status"]["atProvider"]["manifest"]["spec"].update(
        storageClassName="old-class", accessModes=["ReadWriteOnce"])
    smaller = hydration_xr(commit=NEW_COMMIT, storage={"size": "4Gi", "storageClassName": "new"})
    spec = remote(compose(hydration_request(smaller, observed=observed)), "volume")["spec"]
    assert spec["resources"]["requests"]["storage"] == "8Gi"
    assert (spec["storageClassName"], spec["accessModes"]) == ("old-class", ["ReadWriteOnce"])


def test_an_existing_volume_grows_with_a_larger_commit():
    observed = observe(compose(hydration_request(hydration_xr(storage={"size": "4Gi"}))),
                       states=BOUND)
    bigger = hydration_xr(commit=NEW_COMMIT, storage={"size": "9Gi"})
    spec = remote(compose(hydration_request(bigger, observed=observed)), "volume")["spec"]
    assert spec["resources"]["requests"]["storage"] == "9Gi"


def test_volume_falls_back_to_the_clusters_cache_defaults():
    cluster = fleet_cluster(CLUSTER, cache={"storageClassName": "slow-rwx",
                                            "accessMode": "ReadWriteOnce"})
    spec = remote(compose(hydration_request(cluster=cluster)), "volume")["spec"]
    assert spec["storageClassName"] == "slow-rwx"
    assert spec["accessModes"] == ["ReadWriteOnce"]


def test_volume_uses_the_clusters_default_class_when_nothing_names_one():
    spec = remote(compose(hydration_request()), "volume")["spec"]
    assert "storageClassName" not in spec
    assert spec["accessModes"] == ["ReadWriteMany"]


def test_a_missing_storage_size_is_an_input_error_since_the_model_cache_always_sets_it():
    with pytest.raises(specs.InputError, match=r"^spec\.storage\.size is required$"):
        compose(hydration_request(hydration_xr(storage={})))


# --- capacity: the FleetCluster's decision, obeyed ----------------------------------------

KEY = f"{NAMESPACE}/{hydration_xr()['metadata']['name']}"
NOW = datetime.datetime(2026, 1, 10, 14, 35, 12, tzinfo=datetime.UTC)
HOUR = "2026-01-10T14:00:00Z"
READY_COPY = {"phase": "Ready", "resolved": {"commit": COMMIT, "manifestDigest": DIGEST},
           "servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": COMMIT,
           "servingManifestDigest": DIGEST, "storedCommits": [COMMIT], "usedBytes": 3 * GIB,
           "pinned": False, "lapsed": False, "mountedBy": 0, "placedReplicas": 0}


def capped(*, admitted=(), evicted=(), used: int = 0, reserved: int = 0,
           published: bool = True) -> dict:
    """FleetCluster with 100Gi capacity (high watermark 80%) and, when published, its
    status.cache decisions."""
    cluster = fleet_cluster(CLUSTER, cache={"capacity": "100Gi", "highWatermark": 80,
                                            "lowWatermark": 70})
    if published:
        cluster["status"]["cache"] = {"capacityBytes": 100 * GIB, "usedBytes": used * GIB,
                                      "reservedBytes": reserved * GIB,
                                      "admitted": list(admitted), "evicted": list(evicted)}
    return cluster


def at_now(xr: dict, *, cluster: object = "ready", replicas: list[dict] | None = None,
           observed: dict | None = None, now: datetime.datetime = NOW) -> protocol.Outcome:
    request = hydration_request(xr, cluster=cluster, replicas=replicas, observed=observed)
    request.now = now
    return compose(request)


def test_a_copy_not_admitted_waits_as_capacity_low_and_composes_nothing():
    outcome = at_now(hydration_xr(), cluster=capped(used=70, reserved=8))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "CapacityLow")
    assert outcome.desired == {}
    message = outcome.status["message"]
    assert "needs 4Gi (spec.storage.size)" in message
    assert "2.0GiB is free under 80% of 100.0GiB (70.0GiB used, 8.0GiB reserved" in message
    assert message.endswith(reasons.remedy("CapacityLow"))


def test_a_copy_waits_while_its_cluster_has_not_decided_for_its_capacity():
    outcome = at_now(hydration_xr(), cluster=capped(published=False))
    assert outcome.status["reason"] == "CapacityLow"
    assert "waiting for FleetCluster gpu-east-1 to admit it" in outcome.status["message"]


def test_a_waiting_copy_keeps_what_already_exists_on_the_cluster():
    observed = observe(compose(hydration_request(hydration_xr())))
    outcome = at_now(hydration_xr(), cluster=capped(), observed=observed)
    assert outcome.status["reason"] == "CapacityLow"
    assert set(outcome.desired) == set(observed)
    assert not any(k.startswith("job-") for k in outcome.desired)


@pytest.mark.parametrize("cache", [
    "admitted", {"admitted": KEY}, {"admitted": [7], "capacityBytes": "lots"},
], ids=["not-an-object", "list-is-a-string", "junk-entries"])
def test_a_malformed_cluster_decision_admits_nothing(cache):
    cluster = capped()
    cluster["status"]["cache"] = cache
    outcome = at_now(hydration_xr(), cluster=cluster)
    assert outcome.status["reason"] == "CapacityLow"
    assert outcome.desired == {}


def test_an_admitted_copy_starts():
    outcome = at_now(hydration_xr(), cluster=capped(admitted=[KEY]))
    assert outcome.status["reason"] == "AwaitingPrerequisites"
    assert "volume" in outcome.desired


@pytest.mark.parametrize("status", [
    {"phase": "Hydrating"},
    {"phase": "Pending", "servingCommit": COMMIT, "servingRepo": "Qwen/Qwen3-0.6B"},
], ids=["hydrating", "serving-an-older-commit"])
def test_a_started_copy_needs_no_admission(status):
    outcome = at_now(with_status(hydration_xr(), **status), cluster=capped())
    assert outcome.status["reason"] != "CapacityLow"
    assert "volume" in outcome.desired


def test_without_a_capacity_a_copy_starts_at_once():
    outcome = at_now(hydration_xr(), cluster=fleet_cluster(CLUSTER))
    assert outcome.status["reason"] == "AwaitingPrerequisites"


def test_a_ready_copy_the_cluster_evicts_composes_nothing_and_says_why():
    outcome = at_now(with_status(hydration_xr(), **READY_COPY), cluster=capped(evicted=[KEY]),
                     replicas=[])
    status = outcome.status
    assert (status["phase"], status["reason"]) == ("Evicted", "Evicted")
    assert outcome.desired == {}
    assert (status["servingCommit"], status["storedCommits"]) == ("", [])
    assert "usedBytes" not in status and "readyTime" not in status
    assert "evicted this copy to get under its low watermark" in status["message"]
    hydrated = next(c for c in outcome.conditions if c.type == "Hydrated")
    assert (hydrated.status, hydrated.reason) == ("False", "Evicted")
    assert outcome.composite_ready is False


@pytest.mark.parametrize("replicas, status", [
    ([cache_replica(COMMIT)], {}),  # mounted since the decision
    ([cache_replica(COMMIT, delivery="Source")], {}),  # placed: it will mount the copy
    (None, {}),  # the replicas are not known yet: keep
    ([], {"pinned": True}),
], ids=["mounted", "placed", "replicas-unknown", "pinned"])
def test_a_listed_copy_that_is_wanted_again_is_not_evicted(replicas, status):
    xr = with_status(hydration_xr(retention={"pinned": True}) if status else hydration_xr(),
                     **READY_COPY)
    observed = observe(compose(hydration_request(xr)))
    outcome = at_now(xr, cluster=capped(evicted=[KEY]), replicas=replicas, observed=observed)
    assert outcome.status["phase"] == "Ready"
    assert "volume" in outcome.desired


@pytest.mark.parametrize("cluster", ["capped-unlisted", "no-capacity", "not-ready", "missing"])
def test_an_evicted_copy_stays_evicted_until_a_replica_is_placed(cluster):
    xr = with_status(hydration_xr(), phase="Evicted", reason="Evicted", servingCommit="")
    fleet = {"capped-unlisted": capped(), "no-capacity": fleet_cluster(CLUSTER)}.get(
        cluster, cluster)
    for replicas in ([], None):
        outcome = at_now(xr, cluster=fleet, replicas=replicas)
        assert outcome.status["phase"] == "Evicted"
        assert outcome.desired == {}


def test_an_evicted_copy_asks_for_room_again_once_a_replica_is_placed():
    xr = with_status(hydration_xr(), phase="Evicted", reason="Evicted", servingCommit="",
                     lapsed=True)
    outcome = at_now(xr, cluster=capped(evicted=[KEY]),
                     replicas=[cache_replica(COMMIT, delivery="Source")])
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "CapacityLow")
    assert outcome.status["lapsed"] is False
    assert outcome.desired == {}


def test_an_evicted_copy_is_warmed_again_at_once_without_a_capacity():
    xr = with_status(hydration_xr(), phase="Evicted", reason="Evicted", servingCommit="")
    outcome = at_now(xr, cluster=fleet_cluster(CLUSTER),
                     replicas=[cache_replica(COMMIT, delivery="Source")])
    assert outcome.status["phase"] == "Pending"
    assert "volume" in outcome.desired


REMOVAL = {"since": "2026-01-10T12:00:00Z", "until": "2026-01-10T13:00:00Z"}
TTL = {"pinned": True, "ttlAfterLastUse": "24h"}


def test_a_copy_whose_cluster_left_the_placement_never_starts_a_fetch():
    outcome = at_now(hydration_xr(removal=REMOVAL), cluster=fleet_cluster(CLUSTER))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "LeftPlacement")
    assert outcome.desired == {}
    assert outcome.status["message"].endswith(reasons.remedy("LeftPlacement"))


def test_a_copy_whose_cluster_left_keeps_serving_what_it_holds():
    xr = with_status(hydration_xr(removal=REMOVAL), **READY_COPY)
    observed = observe(compose(hydration_request(xr)))
    outcome = at_now(xr, cluster=fleet_cluster(CLUSTER), observed=observed)
    assert outcome.status["phase"] == "Ready"
    assert "volume" in outcome.desired


def test_a_lapsed_copy_does_not_fetch_a_new_commit_until_a_replica_is_placed():
    xr = with_status(hydration_xr(commit=NEW_COMMIT, retention=TTL),
                     **{**READY_COPY, "lapsed": True})
    outcome = at_now(xr, cluster=fleet_cluster(CLUSTER), replicas=[])
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "Lapsed")
    assert not any(k.startswith("job-") for k in outcome.desired)
    assert outcome.status["servingCommit"] == COMMIT
    placed = at_now(xr, cluster=fleet_cluster(CLUSTER),
                    replicas=[cache_replica(COMMIT, delivery="Source")])
    assert placed.status["reason"] == "AwaitingPrerequisites"


def test_a_copy_that_lapsed_stays_lapsed_once_its_ttl_is_unset():
    xr = with_status(hydration_xr(commit=NEW_COMMIT), **{**READY_COPY, "lapsed": True})
    outcome = at_now(xr, cluster=fleet_cluster(CLUSTER), replicas=[])
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "Lapsed")
    assert outcome.status["message"].startswith(f"no replica used this copy on cluster {CLUSTER} "
                                                "(spec.retention.ttlAfterLastUse), so it lapsed")


# --- use: mounts, last use, readiness, pin and lapse ----------------------------------------


def use_after(xr: dict, replicas: list[dict] | None, now: datetime.datetime = NOW) -> dict:
    return at_now(xr, cluster=fleet_cluster(CLUSTER), replicas=replicas, now=now).status


def test_mounted_by_counts_cache_replicas_and_placed_counts_every_replica_here():
    replicas = [cache_replica(COMMIT, 0), cache_replica(COMMIT, 1),
                cache_replica(COMMIT, 2, delivery="Source"),
                cache_replica(COMMIT, 3, cluster="gpu-west-1")]
    status = use_after(with_status(hydration_xr(), **READY_COPY), replicas)
    assert (status["mountedBy"], status["placedReplicas"]) == (2, 3)


def test_mount_counts_are_absent_while_the_replicas_are_not_known():
    status = use_after(with_status(hydration_xr(), **READY_COPY), None)
    assert "mountedBy" not in status and "placedReplicas" not in status


@pytest.mark.parametrize("replicas, latched, expected", [
    ([cache_replica(COMMIT)], None, HOUR),  # mounted: this hour
    ([cache_replica(COMMIT)], "2026-01-09T08:00:00Z", HOUR),
    ([], "2026-01-09T08:00:00Z", "2026-01-09T08:00:00Z"),  # not mounted: latched
    ([cache_replica(COMMIT, delivery="Source")], None, None),  # placed is not used
    (None, "2026-01-09T08:00:00Z", "2026-01-09T08:00:00Z"),
    ([], "yesterday", None),
])
def test_last_used_time_is_the_hour_a_replica_last_mounted_the_copy(replicas, latched, expected):
    status = {**READY_COPY, **({"lastUsedTime": latched} if latched else {})}
    assert use_after(with_status(hydration_xr(), **status), replicas).get("lastUsedTime") == \
        expected


def test_ready_time_is_the_hour_of_the_first_ready_and_latched():
    first = settle(states={JOB_KEY: job_complete(), **BOUND})
    assert first.status["readyTime"] == "1970-01-01T00:00:00Z"
    later = use_after(with_status(hydration_xr(), **READY_COPY, readyTime="2026-01-02T03:00:00Z"),
                      [])
    assert later["readyTime"] == "2026-01-02T03:00:00Z"


def test_no_ready_time_before_the_first_ready():
    assert "readyTime" not in compose(hydration_request()).status


@pytest.mark.parametrize("retention, status, replicas, lapsed", [
    (TTL, {"lastUsedTime": "2026-01-09T14:00:00Z"}, [], True),  # 24h35m since last use
    (TTL, {"lastUsedTime": "2026-01-09T15:00:00Z"}, [], False),  # 23h35m
    (TTL, {"lastUsedTime": "2026-01-01T00:00:00Z", "readyTime": "2026-01-10T00:00:00Z"},
     [], False),  # counts from the later of last use and readiness
    (TTL, {"readyTime": "2026-01-08T00:00:00Z"}, [], True),  # never used since it was Ready
    (TTL, {"lastUsedTime": "2026-01-01T00:00:00Z"}, None, False),  # replicas unknown
    (TTL, {"lastUsedTime": "2026-01-01T00:00:00Z"},
     [cache_replica(COMMIT, delivery="Source")], False),  # a replica is placed
    (TTL, {"lapsed": True}, None, True),  # latched while unknown
    (TTL, {"lapsed": True}, [], True),  # latched: not re-warmed by itself
    (TTL, {"lapsed": True}, [cache_replica(COMMIT, delivery="Source")], False),  # placed
    ({"pinned": True}, {"lastUsedTime": "2020-01-01T00:00:00Z"}, [], False),  # no TTL
])
def test_a_copy_lapses_once_unused_for_its_ttl_until_a_replica_is_placed(
        retention, status, replicas, lapsed):
    xr = with_status(hydration_xr(retention=retention),
                     **{**READY_COPY, "readyTime": "2026-01-01T00:00:00Z", **status})
    result = use_after(xr, replicas)
    assert result["lapsed"] is lapsed
    assert result["pinned"] is (not lapsed)


@pytest.mark.parametrize("retention, pinned", [({}, False), ({"pinned": False}, False),
                                                ({"pinned": True}, True)])
def test_pinned_follows_the_retention_while_not_lapsed(retention, pinned):
    assert use_after(hydration_xr(retention=retention), [])["pinned"] is pinned


@pytest.mark.parametrize("case", ["waiting", "evicted", "left", "used"])
def test_the_capacity_and_use_status_validates_against_the_xrd(case):
    xr = {"waiting": hydration_xr(), "left": hydration_xr(removal=REMOVAL),
          "evicted": with_status(hydration_xr(), **READY_COPY),
          "used": with_status(hydration_xr(retention=TTL), **READY_COPY)}[case]
    cluster = capped(evicted=[KEY]) if case == "evicted" else capped()
    outcome = at_now(xr, cluster=cluster, replicas=[] if case != "used"
                     else [cache_replica(COMMIT)])
    assert_valid(with_status(xr, **outcome.status))


# --- the Job ------------------------------------------------------------------------------


def test_job_restarts_never_and_fails_at_once_on_exactly_the_permanent_codes():
    job = remote(settle(states=BOUND), JOB_KEY)
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        # DESIGN §4's permanent codes and the registry's 19-22; StagerBusy, SourceUnreachable
        # and RateLimited (16-18) are retried within the Job.
        {"action": "FailJob", "onExitCodes": {"containerName": "agent", "operator": "In",
                                              "values": [10, 11, 12, 13, 14, 15, 19, 20, 21, 22]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    ]


def test_job_limits_default_to_3_21600_3600():
    spec = remote(settle(states=BOUND), JOB_KEY)["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"],
            spec["ttlSecondsAfterFinished"]) == (3, 21600, 3600)


def test_job_limits_come_from_the_spec():
    xr = hydration_xr(job={"backoffLimit": 0, "activeDeadlineSeconds": 600,
                           "ttlSecondsAfterFinished": 0})
    spec = remote(settle(xr, states=BOUND), JOB_KEY)["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"],
            spec["ttlSecondsAfterFinished"]) == (0, 600, 0)


def test_job_has_no_kueue_queue_label():
    job = remote(settle(states=BOUND), JOB_KEY)
    labels = {**job["metadata"].get("labels", {}),
              **job["spec"]["template"]["metadata"].get("labels", {})}
    assert "kueue.x-k8s.io/queue-name" not in labels


def test_job_has_a_read_only_root_and_an_emptydir_tmp():
    spec = pod_spec(settle(states=BOUND))
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/tmp"]] == {"name": mounts["/tmp"], "emptyDir": {}}
    assert volumes[mounts[agent_job.CACHE_MOUNT_PATH]]["persistentVolumeClaim"] == \
        {"claimName": naming.cache_volume_name(CACHE)}


def test_job_mounts_the_token_as_a_file_and_passes_its_path():
    spec = pod_spec(settle(hydration_xr(token=True), states=BOUND))
    container = spec["containers"][0]
    token_volume = next(v for v in spec["volumes"] if "secret" in v)
    assert token_volume["secret"]["secretName"] == naming.child_name(CACHE, "token")
    assert {"name": token_volume["name"], "mountPath": agent_job.TOKEN_MOUNT_PATH,
            "readOnly": True} in container["volumeMounts"]
    args = container["args"]
    assert args[args.index("--token-file") + 1] == f"{agent_job.TOKEN_MOUNT_PATH}/{agent_job.TOKEN_SECRET_KEY}"
    assert not any("HF_TOKEN" in json.dumps(e) for e in container.get("env", []))


def test_job_fetches_the_pinned_commit_with_progress_and_tuning():
    xr = hydration_xr(agent={"concurrency": 4, "bandwidth": "100Mi"})
    args = pod_spec(settle(xr, states=BOUND))["containers"][0]["args"]
    assert args[:7] == ["fetch", "--dest", agent_job.CACHE_MOUNT_PATH, "--revision", COMMIT,
                        "--progress-configmap", f"{NAMESPACE}/{naming.child_name(CACHE, 'progress')}"]
    assert args[-4:] == ["--concurrency", "4", "--bandwidth", "100Mi"]
    assert ["--repo", "Qwen/Qwen3-0.6B"] == args[args.index("--repo"):args.index("--repo") + 2]
    assert "--token-file" not in args


def test_job_names_the_commit_as_the_revision_the_cache_asked_for():
    args = pod_spec(settle(hydration_xr(), states=BOUND))["containers"][0]["args"]
    assert args[args.index("--ref"):args.index("--ref") + 2] == ["--ref", "main"]


def test_job_writes_no_ref_when_the_cache_asked_for_the_commit_itself():
    source = {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": COMMIT}}
    args = pod_spec(settle(hydration_xr(source=source), states=BOUND))["containers"][0]["args"]
    assert "--ref" not in args


def test_job_passes_pod_security_restricted():
    assert restricted_violations(pod_spec(settle(hydration_xr(token=True), states=BOUND))) == []


# --- the token ----------------------------------------------------------------------------


def test_no_token_secret_without_a_token_reference():
    outcome = settle(states=BOUND)
    assert "token-secret" not in outcome.desired
    assert not any(v.get("secret") for v in pod_spec(outcome)["volumes"])


def test_token_secret_is_patched_in_by_the_provider_and_holds_no_bytes():
    outcome = compose(hydration_request(hydration_xr(token=True)))
    obj = outcome.desired["token-secret"][0]
    manifest = obj["spec"]["forProvider"]["manifest"]
    assert "data" not in manifest and "stringData" not in manifest
    assert obj["spec"]["references"] == [{"patchesFrom": {
        "apiVersion": "v1", "kind": "Secret", "name": "hf-token", "namespace": NAMESPACE,
        "fieldPath": "data.HF_TOKEN"}, "toFieldPath": f"data.{agent_job.TOKEN_SECRET_KEY}"}]


def test_token_bytes_never_appear_in_any_output():
    request = hydration_request(hydration_xr(token=True))
    request.required["token"] = [{"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": "hf-token", "namespace": NAMESPACE},
                                  "stringData": {"HF_TOKEN": TOKEN_BYTES}}]
    outcome = compose(request)
    assert TOKEN_BYTES not in repr(outcome)


@pytest.mark.parametrize("cluster", ["not-ready", "missing", "unfetched"])
def test_a_carried_over_token_secret_does_not_copy_the_token(cluster):
    # provider-kubernetes writes patched-in values back into the Object's manifest (and,
    # without --sanitize-secrets, into its status): what the function observes may hold it.
    observed = observed_after(hydration_xr(token=True), states={JOB_KEY: job_running()})
    token_object = observed["token-secret"]
    token_object["spec"]["forProvider"]["manifest"]["data"] = {"token": TOKEN_BYTES}
    token_object["status"]["atProvider"]["manifest"]["data"] = {"token": TOKEN_BYTES}
    outcome = compose(hydration_request(hydration_xr(token=True), observed=observed,
                                        cluster=cluster))
    assert "token-secret" in outcome.desired
    assert TOKEN_BYTES not in repr(outcome)


@pytest.mark.parametrize("state", ["hydrating", "failed", "ready", "latched"])
def test_token_secret_is_composed_only_while_not_ready(state):
    job = {"hydrating": job_running(), "failed": job_failed_exit(11),
           "ready": job_complete(), "latched": job_complete()}[state]
    xr = hydration_xr(token=True)
    if state == "latched":
        xr = with_status(xr, phase="Ready", resolved={"commit": COMMIT})
    outcome = settle(xr, states={JOB_KEY: job, **BOUND})
    assert ("token-secret" in outcome.desired) is (state in ("hydrating", "failed"))


# --- updates that fit: a volume that cannot grow says so -----------------------------------

REFUSAL = ('cannot apply object: persistentvolumeclaims "qwen-cache" is forbidden: only '
           "dynamically provisioned pvc can be resized and the storageclass that provisions "
           "the pvc must support resize")


def refused(observed: dict, message: str = REFUSAL) -> dict:
    """`observed` with provider-kubernetes' Synced=False on the volume Object."""
    observed["volume"]["status"]["conditions"].append(
        {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message})
    return observed


def grown(states: dict | None = None, message: str = REFUSAL, size: str = "9Gi"
          ) -> protocol.Outcome:
    """A 4Gi volume asked to grow to `size` for NEW_COMMIT, the resize refused."""
    observed = refused(observed_after(hydration_xr(storage={"size": "4Gi"}),
                                      states=states or BOUND), message)
    observed.pop(next(k for k in observed if k.startswith(JOB_KEY)), None)
    xr = hydration_xr(commit=NEW_COMMIT, storage={"size": size})
    if states:
        observed = refused(observed_after(xr, states=states), message)
        observed["volume"]["status"]["atProvider"]["manifest"]["spec"]["resources"][
            "requests"]["storage"] = "4Gi"
    return compose(hydration_request(xr, observed=observed))


def test_a_refused_resize_is_volume_not_expandable_with_the_remedy():
    outcome = grown()
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending",
                                                                   "VolumeNotExpandable")
    assert reasons.remedy("VolumeNotExpandable") in outcome.status["message"]
    assert "allowVolumeExpansion: true" in outcome.status["message"]


def test_the_fetch_job_is_not_started_into_a_volume_that_cannot_grow():
    assert not composed_key(grown(), NEW_JOB_KEY)


def test_the_volume_still_asks_for_the_larger_size_when_refused():
    """The refusal stays visible on the Object until the class or the size is fixed."""
    assert remote(grown(), "volume")["spec"]["resources"]["requests"]["storage"] == "9Gi"


def test_a_job_failed_on_a_volume_that_cannot_grow_says_volume_not_expandable():
    outcome = grown(states={NEW_JOB_KEY: job_failed_exit(13), **BOUND})
    assert outcome.status["reason"] == "VolumeNotExpandable"


def test_a_job_already_running_is_left_running_despite_a_refusal():
    outcome = grown(states={NEW_JOB_KEY: job_running(), **BOUND})
    assert outcome.status["phase"] == "Hydrating"
    assert composed_key(outcome, NEW_JOB_KEY)


def test_another_sync_error_on_the_volume_is_not_read_as_a_refusal():
    outcome = grown(message="cannot apply object: connection refused")
    assert outcome.status["reason"] != "VolumeNotExpandable"
    assert composed_key(outcome, NEW_JOB_KEY)


def test_a_refusal_is_ignored_once_the_volume_asks_for_no_more_than_it_has():
    assert grown(size="4Gi").status["reason"] != "VolumeNotExpandable"


# --- pruning what no replica serves ---------------------------------------------------------

THIRD_COMMIT = "2" * 40
UPDATED = {"phase": "Ready", "resolved": {"commit": NEW_COMMIT, "manifestDigest": DIGEST},
           "servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": NEW_COMMIT,
           "servingManifestDigest": DIGEST, "storedCommits": [COMMIT, NEW_COMMIT]}


def updated(replicas: list[dict] | None, *, states: dict | None = None,
            data: dict | None = None, **status) -> protocol.Outcome:
    """Ready on NEW_COMMIT with COMMIT still on the volume; its objects observed in `states`."""
    xr = with_status(hydration_xr(commit=NEW_COMMIT), **{**UPDATED, **status})
    first = compose(hydration_request(xr, replicas=replicas))
    second = compose(hydration_request(xr, observed=observe(first), replicas=replicas))
    observed = observe(second, states={**BOUND, **(states or {})}, data=data)
    return compose(hydration_request(xr, observed=observed, replicas=replicas))


def prune_keys(outcome: protocol.Outcome) -> list[str]:
    return [k for k in outcome.desired if k.startswith("prune-")]


def prune_job(outcome: protocol.Outcome) -> dict:
    [key] = prune_keys(outcome)
    return remote(outcome, key)


def keeps(outcome: protocol.Outcome) -> list[str]:
    args = prune_job(outcome)["spec"]["template"]["spec"]["containers"][0]["args"]
    return [b for a, b in zip(args, args[1:], strict=False) if a == "--keep"]


def test_the_replicas_of_its_cache_on_its_cluster_are_required_by_label():
    outcome = compose(hydration_request())
    assert outcome.requirements["model-replicas"] == protocol.Requirement(
        naming.API_VERSION, "ModelReplica", namespace=NAMESPACE,
        match_labels=((naming.LABEL_MODEL_CACHE, CACHE), (naming.LABEL_CLUSTER, CLUSTER)))


def test_a_commit_no_replica_mounts_is_pruned_once_the_new_one_is_ready():
    outcome = updated([cache_replica(NEW_COMMIT)])
    assert keeps(outcome) == [NEW_COMMIT]
    args = prune_job(outcome)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:5] == ["prune", "--dest", agent_job.CACHE_MOUNT_PATH, "--repo", "Qwen/Qwen3-0.6B"]
    assert args[-2:] == ["--progress-configmap", f"{NAMESPACE}/{naming.child_name(CACHE, 'progress')}"]


def test_a_commit_a_replica_still_mounts_is_never_pruned():
    outcome = updated([cache_replica(NEW_COMMIT), cache_replica(COMMIT, 1)])
    assert prune_keys(outcome) == []
    assert outcome.status["storedCommits"] == sorted([COMMIT, NEW_COMMIT])


def test_a_prune_keeps_every_commit_a_replica_mounts():
    outcome = updated([cache_replica(THIRD_COMMIT)], storedCommits=[COMMIT, THIRD_COMMIT])
    assert keeps(outcome) == sorted([NEW_COMMIT, THIRD_COMMIT])


def test_nothing_is_pruned_while_the_replicas_are_not_fetched():
    assert prune_keys(updated(None)) == []


def test_a_cache_replica_without_a_readable_commit_keeps_every_commit():
    broken = cache_replica(NEW_COMMIT)
    broken["spec"]["cache"]["commit"] = "main"
    assert prune_keys(updated([broken])) == []


def test_replicas_of_another_cluster_or_not_on_the_cache_do_not_keep_a_commit():
    outcome = updated([cache_replica(COMMIT, 0, cluster="gpu-west-9"),
                       cache_replica(COMMIT, 1, delivery="Source")])
    assert keeps(outcome) == [NEW_COMMIT]


def test_nothing_is_pruned_before_the_new_commit_is_ready():
    outcome = repinned({NEW_JOB_KEY: job_running(), **BOUND})
    assert prune_keys(outcome) == []
    assert outcome.status["storedCommits"] == [COMMIT]


def test_the_ready_commit_is_recorded_as_stored_on_the_volume():
    outcome = settle(states={JOB_KEY: job_complete(), **BOUND})
    assert outcome.status["storedCommits"] == [COMMIT]


def test_each_set_of_kept_commits_gets_its_own_prune_job():
    """A Job is immutable: a changed set is a new Job, never a mutated one."""
    alone = prune_job(updated([]))["metadata"]["name"]
    with_third = prune_job(updated([cache_replica(THIRD_COMMIT)]))["metadata"]["name"]
    assert alone != with_third


def test_a_completed_prune_is_latched_and_not_run_again():
    key = prune_keys(updated([]))[0]
    outcome = updated([], states={key: job_complete()},
                      data={"progress": {"phase": "Pruned",
                                         "prunedCommits": json.dumps([COMMIT])}})
    assert prune_keys(outcome) == []
    assert (outcome.status["storedCommits"], outcome.status["prunedCommits"]) == (
        [NEW_COMMIT], [COMMIT])


@pytest.mark.parametrize("reported, pruned", [
    (json.dumps([THIRD_COMMIT]), [COMMIT, THIRD_COMMIT]),  # the agent found one more
    (json.dumps([THIRD_COMMIT, NEW_COMMIT]), [COMMIT, THIRD_COMMIT]),  # never a kept one
    (f"{THIRD_COMMIT},{COMMIT}", [COMMIT]),  # not JSON: only what the list says
    (json.dumps({"commits": [THIRD_COMMIT]}), [COMMIT]),
    (json.dumps(["main", 7]), [COMMIT]),
])
def test_the_agents_pruned_commits_are_read_as_a_json_list(reported, pruned):
    key = prune_keys(updated([]))[0]
    outcome = updated([], states={key: job_complete()},
                      data={"progress": {"phase": "Pruned", "prunedCommits": reported}})
    assert outcome.status["prunedCommits"] == sorted(pruned)


def moved_on(prune_state: dict) -> tuple[protocol.Outcome, str]:
    """Ready on NEW_COMMIT with its prune Job observed in `prune_state`, when the cache
    moves on to THIRD_COMMIT."""
    before = updated([])
    key = prune_keys(before)[0]
    xr = with_status(hydration_xr(commit=THIRD_COMMIT), **UPDATED)
    observed = observe(before, states={**BOUND, key: prune_state})
    return compose(hydration_request(xr, observed=observed, replicas=[])), key


def test_a_new_commit_is_not_fetched_while_a_prune_planned_without_it_runs():
    outcome, key = moved_on(job_running())
    assert key in outcome.desired
    assert not composed_key(outcome, job_prefix(THIRD_COMMIT, DIGEST))


@pytest.mark.parametrize("state", [job_complete(), job_failed_exit(11)])
def test_a_new_commit_is_fetched_once_the_prune_has_ended(state):
    outcome, key = moved_on(state)
    assert key not in outcome.desired
    assert composed_key(outcome, job_prefix(THIRD_COMMIT, DIGEST))


def test_the_latched_prune_leaves_nothing_to_prune_on_the_next_call():
    outcome = updated([], storedCommits=[NEW_COMMIT], prunedCommits=[COMMIT])
    assert prune_keys(outcome) == []
    assert outcome.status["prunedCommits"] == [COMMIT]


def test_a_failed_prune_keeps_the_cache_ready_keeps_its_job_and_says_so():
    key = prune_keys(updated([]))[0]
    outcome = updated([], states={key: job_failed_exit(11)})
    assert outcome.status["phase"] == "Ready"
    assert key in outcome.desired
    assert f"pruning {COMMIT[:10]} failed" in outcome.status["message"]


def test_the_prune_job_runs_the_restricted_agent_on_the_cache_volume():
    outcome = updated([])
    job = prune_job(outcome)
    assert_valid_k8s(job)
    assert restricted_violations(job["spec"]["template"]["spec"]) == []
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": naming.cache_volume_name(CACHE)}} \
        in job["spec"]["template"]["spec"]["volumes"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == naming.child_name(CACHE, "agent")


def test_the_prune_job_waits_for_its_service_account_and_role():
    xr = with_status(hydration_xr(commit=NEW_COMMIT), **UPDATED)
    first = compose(hydration_request(xr, replicas=[]))
    assert "service-account" in first.desired and prune_keys(first) == []


def test_a_changed_repo_starts_the_stored_commits_afresh():
    """Prune works on one repo: the other model's commits are not this repo's to prune."""
    outcome = updated([], servingRepo="Qwen/Qwen3-8B")
    assert outcome.status["storedCommits"] == [NEW_COMMIT]
    assert prune_keys(outcome) == []


def test_a_prune_record_is_not_read_as_the_new_commits_fetch_record():
    xr = with_status(hydration_xr(commit=THIRD_COMMIT), **UPDATED)
    observed = observed_after(xr, states={job_prefix(THIRD_COMMIT, DIGEST): job_running(),
                                          **BOUND},
                              data={"progress": {"phase": "Pruned", "message": "pruned 1"}})
    outcome = compose(hydration_request(xr, observed=observed))
    assert "pruned 1" not in outcome.status["message"]


# --- usage is measured ----------------------------------------------------------------------


def test_used_and_capacity_bytes_come_from_the_agents_record():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(GIB, 2 * GIB, usedBytes=str(3 * GIB),
                                   capacityBytes=str(10 * GIB)))
    assert (outcome.status["usedBytes"], outcome.status["capacityBytes"],
            outcome.status["usedHuman"]) == (3 * GIB, 10 * GIB, quantities.human_bytes(3 * GIB))


def test_usage_is_absent_until_measured():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND}, data=progress(GIB, 2 * GIB))
    assert not {"usedBytes", "capacityBytes", "usedHuman"} & set(outcome.status)


def test_zero_used_bytes_is_a_measurement():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(0, 2 * GIB, usedBytes="0", capacityBytes=str(GIB)))
    assert outcome.status["usedBytes"] == 0


def test_a_prune_record_measures_the_volume_too():
    outcome = updated([], data={"progress": {"phase": "Pruned", "usedBytes": str(GIB),
                                             "capacityBytes": str(4 * GIB)}})
    assert (outcome.status["usedBytes"], outcome.status["capacityBytes"]) == (GIB, 4 * GIB)


def test_usage_is_latched_when_the_record_is_gone():
    xr = with_status(hydration_xr(), phase="Ready", resolved={"commit": COMMIT},
                     usedBytes=2 * GIB, capacityBytes=4 * GIB)
    outcome = settle(xr, states={JOB_KEY: job_complete(), **BOUND})
    assert (outcome.status["usedBytes"], outcome.status["capacityBytes"]) == (2 * GIB, 4 * GIB)


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "1e400"])
def test_a_malformed_usage_reads_as_not_measured(value):
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(GIB, 2 * GIB, usedBytes=value))
    assert "usedBytes" not in outcome.status


# --- every manifest is valid --------------------------------------------------------------

PHASE_STATES = {
    "first-call": None,
    "job-not-started": BOUND,
    "hydrating": {JOB_KEY: job_running(), **BOUND},
    "failed": {JOB_KEY: job_failed_exit(12), **BOUND},
}


@pytest.mark.parametrize("phase", sorted(PHASE_STATES))
def test_every_remote_manifest_is_valid_kubernetes(phase):
    xr = hydration_xr(token=True, agent={"bandwidth": "50M"},
                      storage={"size": "4Gi", "storageClassName": "fast-rwx"})
    if PHASE_STATES[phase] is None:
        outcome = compose(hydration_request(xr))
    else:
        outcome = settle(xr, states=PHASE_STATES[phase])
    manifests = list(iter_remote_manifests(outcome))
    assert len(manifests) == len(outcome.desired)
    for _, manifest in manifests:
        assert_valid_k8s(manifest)


STATUS_CASES = {
    "cluster-unfetched": dict(cluster="unfetched"),
    "cluster-missing": dict(cluster="missing"),
    "awaiting-prerequisites": dict(first_call=True),
    "volume-not-bound": dict(states={JOB_KEY: job_running(), "volume": pvc("Pending")}),
    "hydrating": dict(states={JOB_KEY: job_running(), **BOUND}, data=progress(GIB, 2 * GIB)),
    "hydrating-overreported": dict(states={JOB_KEY: job_running(), **BOUND},
                                   data=progress(5 * GIB, GIB, 9, 3)),
    "failed": dict(states={JOB_KEY: job_failed_exit(13), **BOUND}),
    "ready": dict(states={JOB_KEY: job_complete(), **BOUND}),
    "measured": dict(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(GIB, 2 * GIB, usedBytes="0", capacityBytes=str(GIB))),
}


@pytest.mark.parametrize("case", sorted(STATUS_CASES))
def test_status_validates_against_the_xrd_in_every_phase(case):
    args = dict(STATUS_CASES[case])
    xr = hydration_xr(token=True)
    if args.pop("first_call", False):
        outcome = compose(hydration_request(xr))
    elif "states" in args:
        outcome = settle(xr, **args)
    else:
        outcome = compose(hydration_request(xr, **args))
    assert 0 <= outcome.status["progress"]["percent"] <= 100
    assert outcome.status["progress"]["filesDone"] <= outcome.status["progress"]["filesTotal"]
    assert_valid(with_status(xr, **outcome.status))


def test_same_request_gives_the_same_outcome():
    observed = observed_after(hydration_xr(token=True), states={JOB_KEY: job_running()})
    first = compose(hydration_request(hydration_xr(token=True), observed=observed))
    second = compose(hydration_request(hydration_xr(token=True), observed=observed))
    assert json.dumps(naming.canonical(first.desired)) == json.dumps(naming.canonical(second.desired))
    assert first.status == second.status and first.conditions == second.conditions


# --- hostile input ------------------------------------------------------------------------


def xr_with(path: str, value: object) -> dict:
    xr = hydration_xr()
    node = xr
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is KeyError:
        node.pop(last, None)
    else:
        node[last] = value
    return xr


@pytest.mark.parametrize("path,value,named", [
    ("spec", KeyError, "spec is required"),
    ("spec", ["not", "a", "map"], "spec: list must be an object"),
    ("spec.commit", KeyError, "spec.commit"),
    ("spec.commit", 12345, "spec.commit"),
    ("spec.commit", "main", "spec.commit"),
    ("spec.commit", COMMIT.upper(), "spec.commit"),
    ("spec.clusterName", KeyError, "spec.clusterName"),
    ("spec.clusterName", "x" * 300, "spec.clusterName"),
    ("spec.clusterName", "gpü-øst", "spec.clusterName"),
    ("spec.modelCacheName", None, "spec.modelCacheName"),
    ("spec.modelCacheName", "Qwen 3", "spec.modelCacheName"),
    ("spec.source", KeyError, "spec.source is required"),
    ("spec.source", "Qwen/Qwen3-0.6B", "spec.source: 'Qwen/Qwen3-0.6B' must be an object"),
    ("spec.source.huggingFace.repo", "no-slash", "spec.source.huggingFace.repo"),
    ("spec.source.huggingFace.endpoint", "ftp://mirror", "spec.source.huggingFace.endpoint"),
    ("spec.source.huggingFace.tokenSecretRef", "hf-token", "tokenSecretRef"),
    ("spec.source.allowPatterns", "*.json", "spec.source.allowPatterns"),
    ("spec.storage", "20Gi", "spec.storage"),
    ("spec.storage.size", "twenty gigs", "spec.storage.size"),
    ("spec.storage.size", "-1Gi", "spec.storage.size"),
    ("spec.storage.accessMode", "ReadWriteSometimes", "spec.storage.accessMode"),
    ("spec.storage.storageClassName", 7, "spec.storage.storageClassName"),
    ("spec.bytes", "3GiB", "spec.bytes"),
    ("spec.job", 3, "spec.job"),
    ("spec.job.backoffLimit", "3", "spec.job.backoffLimit"),
    ("spec.job.backoffLimit", -1, "spec.job.backoffLimit"),
    ("spec.job.activeDeadlineSeconds", 59, "spec.job.activeDeadlineSeconds"),
    ("spec.job.ttlSecondsAfterFinished", True, "spec.job.ttlSecondsAfterFinished"),
    ("spec.job.ttlSecondsAfterFinished", float("inf"), "spec.job.ttlSecondsAfterFinished"),
    ("spec.agent.concurrency", 0, "spec.agent.concurrency"),
    ("spec.agent.bandwidth", "fast", "spec.agent.bandwidth"),
    ("spec.retention.pinned", "yes", "spec.retention.pinned"),
    ("spec.retention.ttlAfterLastUse", "3d", "spec.retention.ttlAfterLastUse"),
    ("spec.retention.ttlAfterLastUse", "0h", "spec.retention.ttlAfterLastUse"),
    ("spec.removal.since", "yesterday", "spec.removal.since"),
    ("spec.removal", {"since": "2026-01-01T00:00:00Z"}, "spec.removal.until"),
    ("metadata.name", "h" * 300, "metadata.name"),
    ("metadata.name", "hydratiön", "metadata.name"),
    ("metadata.namespace", KeyError, "metadata.namespace"),
    ("metadata.namespace", "a.b", "metadata.namespace"),
    ("metadata", "nope", "metadata.name"),
])
def test_bad_input_is_an_input_error_naming_the_field(path, value, named):
    with pytest.raises(specs.InputError) as err:
        compose(hydration_request(xr_with(path, value)))
    assert named in str(err.value)


def test_retention_and_removal_written_by_the_model_cache_are_accepted():
    xr = hydration_xr(retention={"pinned": True, "ttlAfterLastUse": "72h"},
                      removal={"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T01:00:00Z"})
    assert compose(hydration_request(xr)).status["phase"] == "Pending"


def test_an_empty_composite_is_an_input_error():
    with pytest.raises(specs.InputError):
        compose(protocol.Request(composite={}))


def test_a_long_but_valid_model_cache_name_gives_valid_names_and_labels():
    long_name = "a" * 31 + "." + "a" * 31  # 63 characters: the longest the XRD admits
    xr = hydration_xr(modelCacheName=long_name)
    outcome = settle(xr, states={JOB_KEY: job_running(), **BOUND})
    for _, manifest in iter_remote_manifests(outcome):
        assert_valid_k8s(manifest)
    assert all(len(o["metadata"]["name"]) <= 63 for o, _ in outcome.desired.values())


def test_unicode_in_the_source_reaches_args_unchanged_and_manifests_stay_valid():
    xr = hydration_xr()
    xr["spec"]["source"]["allowPatterns"] = ["模型/*.safetensors"]
    outcome = settle(xr, states=BOUND)
    assert "模型/*.safetensors" in pod_spec(outcome)["containers"][0]["args"]
    assert_valid_k8s(remote(outcome, JOB_KEY))


def test_a_hostile_observed_status_does_not_break_composing():
    xr = hydration_xr()
    xr["status"] = {"phase": ["Ready"], "resolved": "nope", "progress": 7}
    outcome = compose(hydration_request(xr))
    assert outcome.status["phase"] == "Pending"


# --- the Pod Security `restricted` checker itself -----------------------------------------


def good_pod() -> dict:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "i", "securityContext": {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }


def changed(where: str, **fields) -> dict:
    """good_pod() with fields set (None: removed) on the pod spec, its securityContext
    ("pod-sc") or its container's securityContext ("sc")."""
    pod = good_pod()
    target = {"pod": pod, "pod-sc": pod["securityContext"],
              "sc": pod["containers"][0]["securityContext"]}[where]
    for key, value in fields.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return pod


HOST_PORT = [{**good_pod()["containers"][0], "ports": [{"containerPort": 80, "hostPort": 80}]}]
VIOLATIONS = {  # one violating pod per rule, and the rule it must be caught by
    "hostProcess": (changed("sc", windowsOptions={"hostProcess": True}), "hostProcess"),
    "hostNetwork": (changed("pod", hostNetwork=True), "host namespaces"),
    "hostPID": (changed("pod", hostPID=True), "host namespaces"),
    "hostIPC": (changed("pod", hostIPC=True), "host namespaces"),
    "privileged": (changed("sc", privileged=True), "privileged"),
    "capabilities-add": (changed("sc", capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
                         "capabilities"),
    "capabilities-add-baseline-only": (changed("sc", capabilities={"drop": ["ALL"],
                                                                   "add": ["CHOWN"]}),
                                       "capabilities"),
    "capabilities-no-drop-all": (changed("sc", capabilities={"drop": ["NET_RAW"]}),
                                 "capabilities"),
    "hostPath": (changed("pod", volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
                 ("hostPath volumes", "volume types")),  # restricted lists it twice
    "hostPort": (changed("pod", containers=HOST_PORT), "host ports"),
    "apparmor": (changed("sc", appArmorProfile={"type": "Unconfined"}), "AppArmor"),
    "selinux-type": (changed("sc", seLinuxOptions={"type": "spc_t"}), "SELinux"),
    "selinux-user": (changed("pod-sc", seLinuxOptions={"user": "root"}), "SELinux"),
    "procMount": (changed("sc", procMount="Unmasked"), "/proc mount"),
    "seccomp-unconfined": (changed("pod-sc", seccompProfile={"type": "Unconfined"}),
                           "seccomp"),
    "seccomp-container-unconfined": (changed("sc", seccompProfile={"type": "Unconfined"}),
                                     "seccomp"),
    "seccomp-unset": (changed("pod-sc", seccompProfile=None), "seccomp"),
    "sysctls": (changed("pod-sc", sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
                "sysctls"),
    "volume-types": (changed("pod", volumes=[{"name": "n", "nfs": {"server": "s",
                                                                   "path": "/"}}]),
                     "volume types"),
    "allowPrivilegeEscalation-true": (changed("sc", allowPrivilegeEscalation=True),
                                      "privilege escalation"),
    "allowPrivilegeEscalation-unset": (changed("sc", allowPrivilegeEscalation=None),
                                       "privilege escalation"),
    "runAsNonRoot-unset": (changed("pod-sc", runAsNonRoot=None), "running as non-root:"),
    "runAsNonRoot-false-in-container": (changed("sc", runAsNonRoot=False),
                                        "running as non-root:"),
    "runAsUser-0": (changed("pod-sc", runAsUser=0), "running as non-root user"),
    "runAsUser-0-in-container": (changed("sc", runAsUser=0), "running as non-root user"),
}


def test_restricted_checker_passes_a_good_pod():
    assert restricted_violations(good_pod()) == []


@pytest.mark.parametrize("rule", sorted(VIOLATIONS))
def test_restricted_checker_catches_each_rule_and_only_that_rule(rule):
    pod, expected = VIOLATIONS[rule]
    expected = expected if isinstance(expected, tuple) else (expected,)
    found = restricted_violations(pod)
    assert any(f.startswith(expected[0]) for f in found), f"{rule} not caught: {found}"
    assert all(f.startswith(expected) for f in found), found


def test_restricted_checker_allows_container_level_settings_instead_of_pod_level():
    pod = changed("pod-sc", runAsNonRoot=None, seccompProfile=None)
    pod["containers"][0]["securityContext"].update(
        runAsNonRoot=True, seccompProfile={"type": "Localhost", "localhostProfile": "p"})
    assert restricted_violations(pod) == []


def test_restricted_checker_catches_the_apparmor_annotation():
    found = restricted_violations(good_pod(), annotations={
        "container.apparmor.security.beta.kubernetes.io/c": "unconfined"})
    assert any(f.startswith("AppArmor") for f in found)


def test_restricted_checker_looks_at_init_containers_too():
    pod = good_pod()
    pod["initContainers"] = [{"name": "init", "image": "i"}]
    found = restricted_violations(pod)
    assert any("initContainers[init]" in f for f in found)


# --- hostile observed state ---------------------------------------------------------------


@pytest.mark.parametrize("status", ["broken", ["Ready"], {"progress": "lots"},
                                    {"progress": ["a"], "servingCommit": 7},
                                    {"servingCommit": "x" * 100_000}],
                         ids=["string", "list", "progress-string", "progress-list",
                              "serving-hostile"])
def test_a_malformed_own_status_reads_as_absent(status):
    xr = hydration_xr()
    xr["status"] = status
    outcome = compose(hydration_request(xr))
    assert outcome.status["phase"] == "Pending"
    assert outcome.status["progress"]["bytesDone"] == 0
    assert outcome.status["servingCommit"] == ""


@pytest.mark.parametrize("record", [
    {"bytesDone": "Infinity", "bytesTotal": "NaN", "filesDone": "-inf", "filesTotal": "9" * 400},
    {"bytesDone": "1e999999999", "bytesTotal": "1e30"},
], ids=["non-finite", "beyond-int64"])
def test_non_finite_or_huge_numbers_in_the_progress_record_read_as_zero(record):
    outcome = settle(states={JOB_KEY: job_running(), **BOUND}, data={"progress": record})
    assert outcome.status["progress"] == {"bytesDone": 0, "bytesTotal": 3 * GIB, "filesDone": 0,
                                          "filesTotal": 0, "percent": 0}


def test_a_hostile_retried_reason_and_message_are_left_out_or_cut():
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(1, 10, reason="not a reason " * 100, message="m" * 100_000))
    assert "last attempt" not in outcome.status["message"]
    outcome = settle(states={JOB_KEY: job_running(), **BOUND},
                     data=progress(1, 10, reason="RateLimited", message="m" * 100_000))
    assert "RateLimited: " + "m" * 100 in outcome.status["message"]
    assert len(outcome.status["message"]) < 2 * messages.SHOWN_LIMIT + 200


def test_a_five_thousand_digit_exit_code_in_the_job_message_fails_on_the_jobs_reason():
    message = f"Container agent failed with exit code {'7' * 5000} matching FailJob rule"
    outcome = settle(states={JOB_KEY: job_failed("PodFailurePolicy", message), **BOUND})
    assert (outcome.status["phase"], outcome.status["reason"]) == \
        ("Failed", "BackoffLimitExceeded")
    assert len(outcome.status["message"]) < messages.MESSAGE_LIMIT


@pytest.mark.parametrize("pvc_spec", [
    {"resources": {"requests": {"storage": "Infinity"}}, "accessModes": "ReadWriteOnce",
     "storageClassName": ["a"]},
    {"resources": "big", "accessModes": ["ReadOnlyMany"], "storageClassName": 7},
], ids=["bad-size-mode-class", "bad-resources"])
def test_an_observed_volume_with_malformed_fields_reads_them_as_absent(pvc_spec):
    observed = observe(compose(hydration_request(hydration_xr(storage={"size": "4Gi"}))),
                       states=BOUND)
    observed["volume"]["status"]["atProvider"]["manifest"]["spec"] = pvc_spec
    spec = remote(compose(hydration_request(hydration_xr(storage={"size": "4Gi"}),
                                            observed=observed)), "volume")["spec"]
    assert spec["resources"]["requests"]["storage"] == "4Gi"
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert "storageClassName" not in spec


def test_a_hostile_volume_phase_reads_as_not_bound():
    outcome = settle(states={JOB_KEY: job_running(), "volume": {"phase": ["Bound"]}})
    assert outcome.status["reason"] == "VolumeNotBound"


@pytest.mark.parametrize("case", ["volume-not-expandable", "pruning", "pruned"])
def test_status_of_updates_validates_against_the_xrd(case):
    if case == "volume-not-expandable":
        outcome, xr = grown(), hydration_xr(commit=NEW_COMMIT, storage={"size": "9Gi"})
    else:
        states = {prune_keys(updated([]))[0]: job_complete()} if case == "pruned" else {}
        outcome, xr = updated([], states=states), hydration_xr(commit=NEW_COMMIT)
    assert_valid(with_status(xr, **outcome.status))
