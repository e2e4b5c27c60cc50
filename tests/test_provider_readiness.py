"""What the composers tell provider-kubernetes (design/provider-timing.md): an Object whose
remote state a composer waits on is not Ready until that state is final, so the provider
re-reads it every 30 s rather than every 10 minutes, and asks to be watched; a Job is named
for its template, which the API server never lets change; a resolve Job that resolved is
only observed, so a TTL that collects it does not resolve the source again."""

from __future__ import annotations

import copy

import celpy

from fleetcache.functions import protocol
from fleetcache.functions.k8s import hydration_objects, objects
from fleetcache.functions.k8s.resolve_job import RESOLVE_PREFIX
from fleetcache.functions.node_tier import node_agent, warmer_names
from tests.support.builders import (
    COMMIT,
    DIGEST,
    composed_key,
    fleet_cluster,
    hydration_request,
    job_complete,
    job_failed_exit,
    job_running,
    observe,
)
from tests.support.fleet import model_cache_xr
from tests.test_fleet_cluster_node_cache import cluster_xr
from tests.test_fleet_cluster_node_cache import run as run_fleet_cluster
from tests.test_model_cache import compose as compose_cache
from tests.test_model_cache import first_round_observed, resolved_record
from tests.test_model_cache_hydration import compose
from tests.test_node_tier_hydration import node_xr
from tests.test_node_tier_hydration import run as run_node_tier

JOB = hydration_objects.job_prefix(COMMIT, DIGEST)
RESOLVE_JOB = f"{RESOLVE_PREFIX}job-"


def spec_of(outcome: protocol.Outcome, key: str) -> dict:
    return outcome.desired[composed_key(outcome, key)][0]["spec"]


def ready(query: str, remote: dict) -> bool:
    """The Object's readiness as provider-kubernetes evaluates its CEL query."""
    env = celpy.Environment()
    try:
        return bool(env.program(env.compile(query)).evaluate({"object": celpy.json_to_cel(remote)}))
    except celpy.CELEvalError:
        return False


def with_job() -> protocol.Outcome:
    first = compose(hydration_request())
    return compose(hydration_request(observed=observe(first)))


# --- the fetch Job and its record ------------------------------------------------------------


def test_the_fetch_jobs_object_is_ready_only_once_the_job_completed_or_failed():
    query = spec_of(with_job(), JOB)["readiness"]["celQuery"]
    assert [ready(query, {"status": state}) for state in
            (job_running(), job_complete(), job_failed_exit(12))] == [False, True, True]


def test_the_fetch_jobs_object_is_watched():
    assert spec_of(with_job(), JOB)["watch"] is True


def test_the_progress_record_is_final_only_for_this_commit_once_its_fetch_ended():
    query = spec_of(with_job(), "progress")["readiness"]["celQuery"]
    assert [ready(query, {"data": data}) for data in (
        {"phase": "Pending"}, {"phase": "Hydrating", "commit": COMMIT},
        {"phase": "Ready", "commit": "b" * 40}, {"phase": "Ready", "commit": COMMIT},
        {"phase": "Failed", "commit": COMMIT})] == [False, False, False, True, True]


def test_what_the_hydration_waits_on_is_watched_and_nothing_else():
    outcome = with_job()
    watched = {key for key, (obj, _) in outcome.desired.items() if obj["spec"].get("watch")}
    assert watched == {"volume", "progress", composed_key(outcome, JOB)}


# --- a Job is never patched in place ----------------------------------------------------------


def after_new_image(first: protocol.Outcome) -> protocol.Outcome:
    """The hydration once its FleetCluster sets another agent image, the Job `first`
    composed observed failed."""
    cluster = fleet_cluster("gpu-east-1")
    cluster["spec"]["agent"] = {"image": "registry.example/fleetcache-agent:fixed"}
    observed = observe(first, states={JOB: job_failed_exit(12)})
    return compose(hydration_request(observed=observed, cluster=cluster))


def remote_name(outcome: protocol.Outcome, key: str) -> str:
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]["metadata"]["name"]


def test_a_new_agent_image_is_a_new_fetch_job_and_the_old_one_is_no_longer_composed():
    first = with_job()
    outcome = after_new_image(first)
    keys = [k for k in outcome.desired if k.startswith(JOB)]
    assert len(keys) == 1 and keys[0] != composed_key(first, JOB)
    assert remote_name(outcome, keys[0]) != remote_name(first, composed_key(first, JOB))


# --- the resolve step -------------------------------------------------------------------------


def test_the_resolve_jobs_object_is_not_ready_until_the_job_ended_and_is_watched():
    spec = spec_of(compose_cache(model_cache_xr()), RESOLVE_JOB)
    assert spec["watch"] is True
    assert ready(spec["readiness"]["celQuery"], {"status": job_complete()})
    assert not ready(spec["readiness"]["celQuery"], {"status": job_running()})


def test_the_resolve_record_is_final_once_resolved_or_failed():
    query = spec_of(compose_cache(model_cache_xr()), "resolve-configmap-")["readiness"]["celQuery"]
    assert [ready(query, {"data": {"phase": phase}})
            for phase in ("Pending", "Resolving", "Resolved", "Failed")] == \
        [False, False, True, True]


def test_a_running_resolve_job_may_be_created_again():
    xr = model_cache_xr()
    outcome = compose_cache(xr, observed=first_round_observed(xr, job_status=job_running()))
    assert "managementPolicies" not in spec_of(outcome, RESOLVE_JOB)


def test_a_completed_resolve_job_is_only_observed_so_its_ttl_does_not_rerun_it():
    xr = model_cache_xr()
    record = resolved_record(files="0", bytes="0")  # kept composed: it selected nothing
    outcome = compose_cache(xr, observed=first_round_observed(xr, record, job_complete()))
    assert spec_of(outcome, RESOLVE_JOB)["managementPolicies"] == ["Observe", "Delete"]


def test_a_completed_resolve_job_whose_record_was_lost_is_created_again_once_collected():
    """Its record ConfigMap deleted and created again empty: only a new run writes it."""
    xr = model_cache_xr()
    outcome = compose_cache(xr, observed=first_round_observed(xr, {"phase": "Pending"}, job_complete()))
    assert "managementPolicies" not in spec_of(outcome, RESOLVE_JOB)


def test_a_failed_resolve_job_is_created_again_once_its_ttl_collected_it():
    """As a failed hydration's: the TTL is the retry interval (design/composers.md)."""
    xr = model_cache_xr()
    outcome = compose_cache(xr, observed=first_round_observed(
        xr, {"phase": "Failed", "reason": "AuthFailed"}, job_failed_exit(10)))
    assert "managementPolicies" not in spec_of(outcome, RESOLVE_JOB)


def test_a_changed_source_resolves_in_a_new_job_though_the_last_sources_job_completed():
    xr = model_cache_xr()
    observed = first_round_observed(xr, resolved_record(files="0", bytes="0"), job_complete())
    changed = copy.deepcopy(xr)
    changed["spec"]["source"]["huggingFace"]["revision"] = "v2"
    outcome = compose_cache(changed, observed=observed)
    key = composed_key(outcome, RESOLVE_JOB)
    assert key not in observed and "managementPolicies" not in spec_of(outcome, key)


# --- the node tier -----------------------------------------------------------------------------


def test_the_warmer_daemonset_is_ready_only_once_rolled_out_and_is_watched():
    spec = run_node_tier().desired[warmer_names.WARMER_KEY][0]["spec"]
    assert spec["watch"] is True
    query = spec["readiness"]["celQuery"]
    rolled = {"metadata": {"generation": 2}, "status": {
        "desiredNumberScheduled": 2, "numberReady": 2, "updatedNumberScheduled": 2,
        "observedGeneration": 2}}
    behind = copy.deepcopy(rolled)
    behind["status"]["observedGeneration"] = 1
    warming = copy.deepcopy(rolled)
    warming["status"]["numberReady"] = 1
    assert [ready(query, o) for o in (rolled, behind, warming)] == [True, False, False]


def test_the_warmers_records_are_reread_every_30_s_until_the_tier_is_ready():
    waiting = run_node_tier().desired[warmer_names.STATUS_KEY][0]["spec"]
    settled_xr = node_xr()
    settled_xr["status"]["nodeTier"] = {"phase": "Ready"}
    settled = run_node_tier(settled_xr).desired[warmer_names.STATUS_KEY][0]["spec"]
    assert (waiting["readiness"]["celQuery"], settled["readiness"]["celQuery"]) == \
        ("false", "true")
    assert waiting["watch"] is True


def test_the_node_agent_daemonset_is_ready_only_once_rolled_out_and_is_watched():
    outcome = run_fleet_cluster(cluster_xr())
    spec = outcome.desired[node_agent.AGENT_KEY][0]["spec"]
    assert spec["watch"] is True
    assert spec["readiness"]["celQuery"] == objects.ROLLED_OUT_QUERY
