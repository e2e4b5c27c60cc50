"""compose-model-cache, as a specification: plain requests in, plain outcomes out."""

from __future__ import annotations

import copy
import json

import pytest

from fleetcache import exitcodes, messages, reasons
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_cache
from fleetcache.functions.decisions import cache_rollup
from fleetcache.functions.views import model_cache as model_cache_view
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS
from tests.support.builders import composed_key
from tests.support.fleet import (
    COMMIT,
    GIB,
    condition,
    fleet_cluster,
    grant_admitting,
    hydrations,
    model_cache_xr,
    observed_hydration,
    observed_object,
    resolved_status,
    with_resolved,
)
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations

FLEET = [fleet_cluster("gpu-west-1"), fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2")]


def compose(xr: dict, fleet: list[dict] | None = None, observed: dict | None = None,
            secrets: list[dict] | None = None) -> protocol.Outcome:
    """The cache composed under a grant that admitted it (tests/test_model_cache_admission.py
    specifies the admission)."""
    required = {"fleet-clusters": FLEET if fleet is None else fleet,
                "model-cache-grant": [grant_admitting(xr)]}
    if secrets is not None:
        required["token-secret"] = secrets
    return model_cache.compose(protocol.Request(composite=xr, observed=observed or {},
                                           required=required))


def clusters(outcome: protocol.Outcome) -> dict[str, dict]:
    return {c["name"]: c for c in outcome.status["clusters"]}


def resolved_record(**overrides: str) -> dict:
    record = {"phase": "Resolved", "commit": COMMIT, "bytes": str(3 * GIB), "files": "5",
              "manifestDigest": "ab" * 32, "reason": "", "message": ""}
    record.update(overrides)
    return record


def first_round_observed(xr: dict, record: dict | None = None, job_status: dict | None = None
                         ) -> dict:
    """The resolve step as composed in round one, observed with the agent's record."""
    first = compose(xr)
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    if record is not None:
        key = composed_key(first, "resolve-configmap-")
        observed[key] = observed_object(first.desired[key][0], data=record)
    if job_status is not None:
        key = composed_key(first, "resolve-job-")
        observed[key] = observed_object(first.desired[key][0], remote_status=job_status)
    return observed


# --- inputs -----------------------------------------------------------------------------


def test_asks_for_every_fleet_cluster_and_composes_nothing_new_until_they_arrive():
    xr = model_cache_xr()
    kept = {"hydration-gpu-east-1": {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
                                     "metadata": {"name": "keep"}, "spec": {}}}
    outcome = model_cache.compose(protocol.Request(composite=xr, observed=kept))
    assert outcome.requirements["fleet-clusters"] == FLEET_CLUSTERS
    assert set(outcome.desired) == {"hydration-gpu-east-1"}


def test_asks_for_the_token_secret_by_name_in_its_own_namespace():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}})
    outcome = compose(xr, secrets=[])
    assert outcome.requirements["token-secret"] == protocol.Requirement(
        "v1", "Secret", match_name="hf-token", namespace="ml")


@pytest.mark.parametrize("spec, field", [
    ({}, "spec.source is required"),
    ({"source": {"huggingFace": {"repo": "no-slash"}}}, "spec.source.huggingFace.repo"),
    ({"source": {"huggingFace": {"repo": 42}}}, "spec.source.huggingFace.repo"),
    ({"placement": {}}, "spec.placement"),
    ({"placement": {"clusterNames": ["a"], "clusterSelector": {}}}, "spec.placement"),
    ({"placement": {"clusterNames": "gpu-east-1"}}, "spec.placement.clusterNames"),
    ({"rollout": {"maxConcurrent": 0}}, "spec.rollout.maxConcurrent"),
    ({"rollout": {"maxConcurrent": "ten"}}, "spec.rollout.maxConcurrent"),
    ({"minReady": -1}, "spec.minReady"),
    ({"storage": {"size": "lots"}}, "spec.storage.size"),
    ({"source": {"huggingFace": {"repo": "a/b"}, "allowPatterns": "*.json"}},
     "spec.source.allowPatterns"),
])
def test_bad_spec_is_an_input_error_naming_the_field(spec, field):
    xr = model_cache_xr(**spec)
    if spec == {}:
        xr["spec"] = {"grantRef": {"name": "team-a"}}
    with pytest.raises(specs.InputError, match=field.replace(".", r"\.")):
        compose(xr)


# --- targets ----------------------------------------------------------------------------


def test_selector_targets_the_matching_clusters_in_name_order():
    fleet = FLEET + [fleet_cluster("cpu-1", labels={"gpu": "none"})]
    outcome = compose(with_resolved(model_cache_xr()), fleet)
    assert [c["name"] for c in outcome.status["clusters"]] == ["gpu-east-1", "gpu-east-2",
                                                               "gpu-west-1"]


def test_match_expressions_select_by_operator():
    fleet = [fleet_cluster("a", labels={"region": "east"}),
             fleet_cluster("b", labels={"region": "west"}),
             fleet_cluster("c", labels={})]
    selector = {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["west"]}]}
    outcome = compose(with_resolved(model_cache_xr(placement={"clusterSelector": selector})), fleet)
    assert set(clusters(outcome)) == {"a", "c"}


def test_a_named_cluster_that_does_not_exist_is_reported_cluster_not_found():
    xr = with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]}))
    report = clusters(compose(xr))
    assert report["gpu-ghost"]["phase"] == "Pending"
    assert report["gpu-ghost"]["reason"] == "ClusterNotFound"
    assert "spec.placement.clusterNames" in report["gpu-ghost"]["message"]


def test_a_cluster_that_is_not_ready_counts_pending_with_cluster_not_ready():
    fleet = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2", ready=False)]
    outcome = compose(with_resolved(model_cache_xr()), fleet)
    assert clusters(outcome)["gpu-east-2"]["reason"] == "ClusterNotReady"
    assert "gpu-east-2" not in hydrations(outcome)
    assert outcome.status["pendingClusters"] == 2


def test_no_target_at_all_is_not_progressing_with_no_clusters():
    outcome = compose(model_cache_xr(), fleet=[])
    progressing = condition(outcome, "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "NoClusters")
    assert outcome.desired == {}
    assert outcome.composite_ready is False


# --- resolve ----------------------------------------------------------------------------


def test_resolve_runs_on_the_first_ready_target_cluster_by_name():
    fleet = [fleet_cluster("gpu-a", ready=False), *FLEET]
    outcome = compose(model_cache_xr(), fleet)
    job = outcome.desired[composed_key(outcome, "resolve-job")][0]
    assert job["spec"]["providerConfigRef"] == {"kind": "ClusterProviderConfig",
                                                "name": "gpu-east-1"}
    args = job["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["resolve", "--revision", "main"]
    assert "--progress-configmap" in args
    assert hydrations(outcome) == {}
    assert condition(outcome, "Resolved").reason == "Resolving"


def test_every_resolve_step_manifest_is_valid_kubernetes():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
              "data": {"HF_TOKEN": "eA=="}}
    outcome = compose(xr, secrets=[secret])
    manifests = dict(iter_remote_manifests(outcome))
    assert sorted(m["kind"] for m in manifests.values()) == [
        "ConfigMap", "Job", "Namespace", "Role", "RoleBinding", "Secret", "ServiceAccount"]
    for manifest in manifests.values():
        assert_valid_k8s(manifest)


def test_the_resolve_job_passes_pod_security_restricted():
    outcome = compose(model_cache_xr())
    job = dict(iter_remote_manifests(outcome))[composed_key(outcome, "resolve-job-")]
    assert restricted_violations(job["spec"]["template"]["spec"]) == []


def test_the_resolver_may_only_get_and_patch_its_own_configmap():
    outcome = compose(model_cache_xr())
    manifests = dict(iter_remote_manifests(outcome))
    rules = manifests[composed_key(outcome, "resolve-role-")]["rules"]
    record = manifests[composed_key(outcome, "resolve-configmap-")]
    assert rules == [{"apiGroups": [""], "resources": ["configmaps"],
                      "resourceNames": [record["metadata"]["name"]],
                      "verbs": ["get", "patch"]}]


def test_resolve_result_configmap_is_observe_create_delete_only():
    outcome = compose(model_cache_xr())
    configmap = outcome.desired[composed_key(outcome, "resolve-configmap-")][0]
    assert configmap["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"]


def test_resolved_result_is_latched_and_the_resolve_step_is_no_longer_composed():
    xr = model_cache_xr()
    outcome = compose(xr, observed=first_round_observed(xr, resolved_record()))
    assert outcome.status["resolved"] == resolved_status(xr)
    assert not any(k.startswith("resolve-") for k in outcome.desired)
    assert condition(outcome, "Resolved").status == "True"
    assert outcome.status["commitShort"] == COMMIT[:8]


def test_a_failed_resolve_reports_the_agents_reason_and_remedy():
    xr = model_cache_xr()
    record = resolved_record(phase="Failed", commit="", reason="AuthFailed",
                             message="the Hub refused the token")
    outcome = compose(xr, observed=first_round_observed(xr, record))
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", "AuthFailed")
    assert exitcodes.BY_REASON["AuthFailed"].remedy in resolved.message


def test_a_resolve_job_failed_on_an_exit_code_reports_that_code_reason():
    xr = model_cache_xr()
    job_status = {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                                  "message": "Container agent for pod ml/x failed with exit "
                                             "code 11 matching FailJob rule at index 0"}]}
    outcome = compose(xr, observed=first_round_observed(xr, None, job_status))
    assert condition(outcome, "Resolved").reason == "SourceNotFound"


def test_token_secret_missing_composes_no_job_and_deletes_nothing():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}})
    already = {"hydration-gpu-east-1": {"apiVersion": naming.API_VERSION,
                                        "kind": "ModelCacheHydration",
                                        "metadata": {"name": "h"}, "spec": {"commit": "old"}}}
    outcome = compose(xr, observed=already, secrets=[])
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", "TokenSecretMissing")
    assert not composed_key(outcome, "resolve-job")
    assert set(outcome.desired) == {"hydration-gpu-east-1"}


def test_token_secret_without_the_named_key_is_token_secret_missing():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token",
                                                                   "key": "TOKEN"}}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
              "data": {"HF_TOKEN": "c2VjcmV0"}}
    resolved = condition(compose(xr, secrets=[secret]), "Resolved")
    assert resolved.reason == "TokenSecretMissing"
    assert "'TOKEN'" in resolved.message


def test_token_secret_is_copied_by_reference_never_by_value():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
              "data": {"HF_TOKEN": "c2VjcmV0LXRva2Vu"}}
    outcome = compose(xr, secrets=[secret])
    token = outcome.desired[composed_key(outcome, "resolve-token-")][0]
    assert token["spec"]["references"][0]["patchesFrom"]["fieldPath"] == "data.HF_TOKEN"
    assert "c2VjcmV0LXRva2Vu" not in repr(outcome)


def test_a_changed_source_resolves_again_and_keeps_the_existing_hydrations():
    xr = with_resolved(model_cache_xr())
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(xr).desired.items()}
    changed = copy.deepcopy(xr)
    changed["spec"]["source"]["huggingFace"]["revision"] = "v2"
    outcome = compose(changed, observed=observed)
    assert composed_key(outcome, "resolve-job")
    assert set(hydrations(outcome)) == {"gpu-east-1", "gpu-east-2", "gpu-west-1"}
    assert all(h["spec"]["commit"] == COMMIT for h in hydrations(outcome).values())


def test_while_resolving_again_the_status_still_shows_the_commit_the_fleet_has():
    xr = with_resolved(model_cache_xr())
    xr["spec"]["source"]["huggingFace"]["revision"] = "v2"
    status = compose(xr).status
    assert status["resolved"]["commit"] == COMMIT
    assert (status["commitShort"], status["sizeHuman"]) == (COMMIT[:8], "3.0GiB")


# --- hydrations -------------------------------------------------------------------------


def test_one_hydration_per_target_carrying_the_pinned_commit_and_source():
    xr = with_resolved(model_cache_xr())
    made = hydrations(compose(xr))
    assert set(made) == {"gpu-east-1", "gpu-east-2", "gpu-west-1"}
    east = made["gpu-east-1"]
    assert east["metadata"]["name"] == naming.child_name("qwen", "gpu-east-1")
    assert east["spec"]["commit"] == COMMIT
    assert east["spec"]["source"]["allowPatterns"] == ["*.safetensors", "*.json"]
    assert east["spec"]["modelCacheName"] == "qwen"


def test_volume_size_is_resolved_bytes_plus_ten_percent_rounded_up_to_whole_gib():
    xr = with_resolved(model_cache_xr(), size=10 * GIB)
    assert hydrations(compose(xr))["gpu-east-1"]["spec"]["storage"]["size"] == "11Gi"


def test_spec_storage_size_wins_over_the_computed_size():
    xr = with_resolved(model_cache_xr(storage={"size": "50Gi", "storageClassName": "fast"}))
    storage = hydrations(compose(xr))["gpu-east-1"]["spec"]["storage"]
    assert storage == {"size": "50Gi", "storageClassName": "fast"}


def test_agent_tuning_is_passed_to_every_hydration():
    xr = with_resolved(model_cache_xr(agent={"concurrency": 4, "bandwidth": "200Mi"}))
    made = hydrations(compose(xr))
    assert {h["spec"]["agent"]["bandwidth"] for h in made.values()} == {"200Mi"}
    assert made["gpu-east-1"]["spec"]["agent"]["concurrency"] == 4


def test_the_token_reference_is_passed_to_every_hydration():
    xr = with_resolved(model_cache_xr(source={"huggingFace": {
        "repo": "org/private", "tokenSecretRef": {"name": "hf-token"}}}))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
              "data": {"HF_TOKEN": "eA=="}}
    made = hydrations(compose(xr, secrets=[secret]))
    assert made["gpu-west-1"]["spec"]["source"]["huggingFace"]["tokenSecretRef"] == {
        "name": "hf-token", "key": "HF_TOKEN"}


def test_at_most_max_concurrent_hydrations_not_ready_in_name_order():
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(5)]
    xr = with_resolved(model_cache_xr(rollout={"maxConcurrent": 2}))
    outcome = compose(xr, fleet)
    assert sorted(hydrations(outcome)) == ["gpu-0", "gpu-1"]
    assert clusters(outcome)["gpu-4"]["reason"] == "RolloutQueued"


def test_ready_hydrations_free_their_rollout_slot():
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(5)]
    xr = with_resolved(model_cache_xr(rollout={"maxConcurrent": 2}))
    first = compose(xr, fleet)
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in first.desired.items()}
    assert sorted(hydrations(compose(xr, fleet, observed))) == ["gpu-0", "gpu-1", "gpu-2",
                                                                 "gpu-3"]


def test_failed_hydrations_hold_their_slot_so_a_bad_source_stops_the_rollout():
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(4)]
    xr = with_resolved(model_cache_xr(rollout={"maxConcurrent": 2}))
    observed = {k: observed_hydration(r, "Failed", reason="DigestMismatch")
                for k, (r, _) in compose(xr, fleet).desired.items()}
    assert sorted(hydrations(compose(xr, fleet, observed))) == ["gpu-0", "gpu-1"]


def test_a_cluster_leaving_the_target_set_loses_its_hydration_once_nothing_keeps_it():
    xr = with_resolved(model_cache_xr(retention={"afterRemoval": "0h"}))
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(xr).desired.items()}
    for hydration in observed.values():
        hydration["status"].update(mountedBy=0, pinned=False)
    fleet = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-west-1", labels={"gpu": "a10"})]
    assert set(hydrations(compose(xr, fleet, observed))) == {"gpu-east-1"}


def test_a_cluster_on_an_older_commit_keeps_its_cache_until_a_slot_frees():
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(3)]
    old = with_resolved(model_cache_xr(rollout={"maxConcurrent": 1}), commit="0" * 40)
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(old, fleet, {}).desired.items()}
    for key in ("hydration-gpu-1", "hydration-gpu-2"):
        observed[key] = observed_hydration(
            model_cache.hydration(protocol.Request(composite=old), model_cache.read_spec(old["spec"]),
                                  old["status"]["resolved"], key.removeprefix("hydration-")),
            "Ready", done=3 * GIB)
    new = with_resolved(model_cache_xr(rollout={"maxConcurrent": 1}))
    made = hydrations(compose(new, fleet, observed))
    assert [made[c]["spec"]["commit"] for c in ("gpu-0", "gpu-1", "gpu-2")] == [
        COMMIT, "0" * 40, "0" * 40]


# --- the commit each cluster serves -------------------------------------------------------

OLD_COMMIT = "0" * 40


def serving(observed: dict, commit: str = OLD_COMMIT, repo: str = "Qwen/Qwen3-0.6B") -> dict:
    """An observed hydration whose status latched `commit` of `repo` as its servingCommit."""
    out = copy.deepcopy(observed)
    out["status"].update({"servingRepo": repo, "servingCommit": commit,
                          "servingManifestDigest": "cd" * 32})
    return out


def old_commit_fleet(phase: str = "Ready", **kwargs) -> tuple[list[dict], dict]:
    """Three clusters whose hydrations are still pinned to OLD_COMMIT, in `phase`."""
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(3)]
    old = with_resolved(model_cache_xr(), commit=OLD_COMMIT)
    return fleet, {k: serving(observed_hydration(r, phase, done=3 * GIB, **kwargs))
                   for k, (r, _) in compose(old, fleet, {}).desired.items()}


def new_commit_xr(**spec) -> dict:
    return with_resolved(model_cache_xr(rollout={"maxConcurrent": 1}, **spec))


def repinned(observed: dict, cluster: str, phase: str, **kwargs) -> None:
    """The cluster's hydration re-pinned to COMMIT, in `phase`, still serving OLD_COMMIT."""
    key = f"hydration-{cluster}"
    spec = copy.deepcopy(observed[key]["spec"])
    spec["commit"] = COMMIT
    observed[key] = serving(observed_hydration({**observed[key], "spec": spec}, phase, **kwargs))


def test_a_cluster_copies_the_serving_commit_of_its_hydration():
    xr = with_resolved(model_cache_xr())
    observed = {k: serving(observed_hydration(r, "Ready", done=3 * GIB), COMMIT)
                for k, (r, _) in compose(xr).desired.items()}
    assert {c["servingCommit"] for c in compose(xr, observed=observed).status["clusters"]} \
        == {COMMIT}


def test_a_cluster_never_ready_has_no_serving_commit():
    assert {c["servingCommit"] for c in three_phase_outcome().status["clusters"]} == {""}


def test_a_cluster_hydrating_a_new_commit_keeps_serving_the_old_one():
    fleet, observed = old_commit_fleet()
    repinned(observed, "gpu-0", "Hydrating", done=GIB)
    row = clusters(compose(new_commit_xr(), fleet, observed))["gpu-0"]
    assert (row["phase"], row["servingCommit"]) == ("Hydrating", OLD_COMMIT)


def test_a_cluster_whose_new_commit_failed_keeps_serving_the_old_one():
    fleet, observed = old_commit_fleet()
    repinned(observed, "gpu-0", "Failed", reason="DigestMismatch")
    row = clusters(compose(new_commit_xr(), fleet, observed))["gpu-0"]
    assert (row["phase"], row["servingCommit"]) == ("Failed", OLD_COMMIT)


def test_a_cluster_queued_on_an_older_commit_is_pending_not_ready():
    """Its Ready is about the old snapshot: replicas of the new commit must not mount it."""
    fleet, observed = old_commit_fleet()
    rows = clusters(compose(new_commit_xr(), fleet, observed))
    assert (rows["gpu-2"]["phase"], rows["gpu-2"]["reason"]) == ("Pending", "RolloutQueued")
    assert rows["gpu-2"]["servingCommit"] == OLD_COMMIT
    assert f"serving {OLD_COMMIT[:10]}" in rows["gpu-2"]["message"]


def test_a_cluster_re_pinned_in_this_call_is_pending_and_keeps_serving():
    fleet, observed = old_commit_fleet()
    row = clusters(compose(new_commit_xr(), fleet, observed))["gpu-0"]
    assert (row["phase"], row["bytesDone"], row["servingCommit"]) == ("Pending", 0, OLD_COMMIT)


def test_a_serving_commit_of_another_repo_is_not_offered():
    fleet, observed = old_commit_fleet()
    for key in observed:
        observed[key] = serving(observed[key], repo="Qwen/Qwen3-8B")
    rows = compose(new_commit_xr(), fleet, observed).status["clusters"]
    assert {r["servingCommit"] for r in rows} == {""}


def test_while_resolving_again_clusters_speak_of_the_commit_still_shown():
    fleet, observed = old_commit_fleet()
    repinned(observed, "gpu-0", "Ready", done=3 * GIB)  # rolled out before the next change
    xr = new_commit_xr()
    xr["spec"]["source"]["huggingFace"]["revision"] = "v3"
    rows = clusters(compose(xr, fleet, observed))
    assert [rows[c]["phase"] for c in ("gpu-0", "gpu-1", "gpu-2")] == [
        "Ready", "Pending", "Pending"]
    assert rows["gpu-1"]["servingCommit"] == OLD_COMMIT


def test_clusters_serving_the_previous_commit_keep_the_cache_available():
    fleet, observed = old_commit_fleet()
    repinned(observed, "gpu-0", "Hydrating", done=GIB)
    outcome = compose(new_commit_xr(), fleet, observed)
    assert outcome.status["readyClusters"] == 0
    available = condition(outcome, "Available")
    assert available.status == "True" and "3 serving the previous commit" in available.message


def test_new_patterns_on_the_same_commit_roll_out_as_new_content():
    old = with_resolved(model_cache_xr(rollout={"maxConcurrent": 1}))
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(old).desired.items()}
    for key in ("hydration-gpu-east-2", "hydration-gpu-west-1"):
        observed[key] = observed_hydration(model_cache.hydration(
            protocol.Request(composite=old), model_cache.read_spec(old["spec"]),
            old["status"]["resolved"], key.removeprefix("hydration-")), "Ready", done=3 * GIB)
    new = model_cache_xr(rollout={"maxConcurrent": 1})
    new["spec"]["source"]["allowPatterns"] = ["*.safetensors", "*.json", "*.txt"]
    new["status"] = {"resolved": {**resolved_status(new), "manifestDigest": "cd" * 32}}
    made = hydrations(compose(new, observed=observed))
    assert [made[c]["spec"]["manifestDigest"] for c in ("gpu-east-1", "gpu-east-2",
                                                        "gpu-west-1")] == ["cd" * 32,
                                                                           "ab" * 32, "ab" * 32]


# --- status -----------------------------------------------------------------------------


def three_phase_outcome(min_ready: int = 0) -> protocol.Outcome:
    xr = with_resolved(model_cache_xr(minReady=min_ready))
    desired = compose(xr).desired
    observed = {
        "hydration-gpu-east-1": observed_hydration(desired["hydration-gpu-east-1"][0], "Ready",
                                                   done=3 * GIB),
        "hydration-gpu-east-2": observed_hydration(desired["hydration-gpu-east-2"][0],
                                                   "Hydrating", done=int(1.2 * GIB)),
        "hydration-gpu-west-1": observed_hydration(desired["hydration-gpu-west-1"][0], "Pending"),
    }
    return compose(xr, observed=observed)


def test_status_counts_clusters_by_phase_and_summarizes_ready_over_desired():
    status = three_phase_outcome().status
    assert (status["desiredClusters"], status["readyClusters"], status["hydratingClusters"],
            status["pendingClusters"], status["failedClusters"]) == (3, 1, 1, 1, 0)
    assert status["summary"] == "1/3"


def test_progress_is_the_percent_of_the_fleets_bytes():
    assert three_phase_outcome().status["progressPercent"] == 46  # (3 + 1.2) / 9 GiB


def test_clusters_report_name_phase_bytes_reason_and_message():
    east2 = clusters(three_phase_outcome())["gpu-east-2"]
    assert east2 == {"name": "gpu-east-2", "phase": "Hydrating", "bytesDone": int(1.2 * GIB),
                     "bytesTotal": 3 * GIB, "reason": "", "message": "", "servingCommit": "",
                     "lapsed": False}


def test_available_needs_every_cluster_when_min_ready_is_zero():
    outcome = three_phase_outcome()
    assert condition(outcome, "Available").status == "False"
    assert outcome.composite_ready is False


def test_available_when_ready_clusters_reach_min_ready():
    outcome = three_phase_outcome(min_ready=1)
    assert condition(outcome, "Available").status == "True"
    assert outcome.composite_ready is True


def test_degraded_names_the_failed_clusters_and_the_first_remedy():
    xr = with_resolved(model_cache_xr())
    observed = {k: observed_hydration(r, "Failed", reason="DigestMismatch", message="bad bytes")
                for k, (r, _) in compose(xr).desired.items()
                if k in ("hydration-gpu-east-2", "hydration-gpu-west-1")}
    degraded = condition(compose(xr, observed=observed), "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "HydrationFailed")
    assert "gpu-east-2 (DigestMismatch), gpu-west-1 (DigestMismatch)" in degraded.message
    assert exitcodes.BY_REASON["DigestMismatch"].remedy in degraded.message


def test_all_clusters_ready_is_available_and_no_longer_progressing():
    xr = with_resolved(model_cache_xr())
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(xr).desired.items()}
    outcome = compose(xr, observed=observed)
    assert condition(outcome, "Progressing").reason == "Complete"
    assert outcome.composite_ready is True
    assert all(ready for _, ready in outcome.desired.values())


def test_a_missing_named_cluster_degrades_the_cache_with_cluster_not_found():
    xr = with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]}))
    degraded = condition(compose(xr), "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "ClusterNotFound")
    assert "gpu-ghost" in degraded.message and "spec.placement.clusterNames" in degraded.message


def test_a_missing_named_cluster_stops_progressing_once_the_rest_is_ready():
    xr = with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]}))
    observed = {k: observed_hydration(r, "Ready", done=3 * GIB)
                for k, (r, _) in compose(xr).desired.items()}
    progressing = condition(compose(xr, observed=observed), "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "ClusterNotFound")


def test_only_missing_named_clusters_is_resolved_false_with_cluster_not_found():
    outcome = compose(model_cache_xr(placement={"clusterNames": ["gpu-ghost"]}))
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", "ClusterNotFound")
    assert "gpu-ghost" in resolved.message


def test_degraded_names_both_missing_clusters_and_failed_hydrations():
    xr = with_resolved(model_cache_xr(placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]}))
    observed = {k: observed_hydration(r, "Failed", reason="DigestMismatch")
                for k, (r, _) in compose(xr).desired.items()}
    degraded = condition(compose(xr, observed=observed), "Degraded")
    assert degraded.reason == "ClusterNotFound"
    assert "gpu-ghost" in degraded.message and "gpu-east-1 (DigestMismatch)" in degraded.message


@pytest.mark.parametrize("files, size", [("0", str(3 * GIB)), ("5", "0"), ("0", "0")],
                         ids=["no-files", "no-bytes", "nothing"])
def test_a_resolve_that_selects_nothing_is_invalid_source_and_fans_out_nothing(files, size):
    xr = model_cache_xr()
    outcome = compose(xr, observed=first_round_observed(
        xr, resolved_record(files=files, bytes=size)))
    resolved = condition(outcome, "Resolved")
    assert (resolved.status, resolved.reason) == ("False", "InvalidSource")
    assert "spec.source.allowPatterns" in resolved.message
    assert not hydrations(outcome)
    assert composed_key(outcome, "resolve-job")  # kept: no resolve Job reruns in a loop
    assert "resolved" not in outcome.status


def test_a_latched_resolve_of_nothing_is_not_fanned_out():
    xr = with_resolved(model_cache_xr(), size=0)
    outcome = compose(xr)
    assert not hydrations(outcome)
    assert condition(outcome, "Resolved").status == "False"


@pytest.mark.parametrize("resolved", [
    "oops", ["a"], {}, {"commit": 7}, {"commit": "not-a-commit"},
    {"commit": "x" * 5000},
], ids=["string", "list", "empty", "numeric-commit", "bad-commit", "huge-commit"])
def test_a_malformed_status_resolved_reads_as_absent_with_a_warning(resolved):
    xr = model_cache_xr()
    xr["status"] = {"resolved": resolved}
    outcome = compose(xr)
    assert condition(outcome, "Resolved").reason == "Resolving"
    assert composed_key(outcome, "resolve-job")
    assert any("status.resolved" in w and len(w) < 400 for w in outcome.warnings)


def test_a_status_resolved_missing_keys_reads_them_as_zero_and_empty():
    xr = with_resolved(model_cache_xr())
    xr["status"]["resolved"] = {k: v for k, v in xr["status"]["resolved"].items()
                                if k in ("commit", "sourceDigest", "bytes", "files")}
    outcome = compose(xr)
    assert hydrations(outcome)["gpu-east-1"]["spec"]["manifestDigest"] == ""
    assert outcome.status["resolved"]["repo"] == ""


def test_a_resolve_record_with_a_malformed_commit_is_not_latched():
    xr = model_cache_xr()
    outcome = compose(xr, observed=first_round_observed(xr, resolved_record(commit="zz" * 999)))
    assert condition(outcome, "Resolved").reason == "Resolving"
    assert any("not a 40-hex commit" in w for w in outcome.warnings)


@pytest.mark.parametrize("status", [
    "broken", ["Ready"], {"phase": ["Ready"]}, {"phase": "Exploded"},
    {"phase": "Hydrating", "progress": "lots"},
    {"phase": "Hydrating", "progress": {"bytesDone": "Infinity", "bytesTotal": "NaN"}},
    {"phase": "Hydrating", "progress": {"bytesDone": "9" * 400, "bytesTotal": -5}},
    {"phase": "Failed", "reason": "not a reason!" * 100, "message": "m" * 100_000},
], ids=["string", "list", "list-phase", "unknown-phase", "string-progress", "non-finite",
        "huge-and-negative", "hostile-reason-and-message"])
def test_a_malformed_hydration_status_reads_as_pending_or_bounded(status):
    xr = with_resolved(model_cache_xr())
    desired = compose(xr).desired["hydration-gpu-east-1"][0]
    observed = {"hydration-gpu-east-1": {**desired, "status": status}}
    row = clusters(compose(xr, observed=observed))["gpu-east-1"]
    assert row["phase"] in ("Pending", "Hydrating", "Failed")
    assert 0 <= row["bytesDone"] <= 10 ** 400 and row["bytesTotal"] >= 0
    assert len(row["message"]) <= messages.SHOWN_LIMIT
    assert row["reason"] == "" or reasons.REASON_SHAPE.match(row["reason"])


def test_a_token_secret_whose_data_is_not_an_object_lacks_the_key():
    xr = model_cache_xr(source={"huggingFace": {"repo": "org/private",
                                                "tokenSecretRef": {"name": "hf-token"}}})
    outcome = compose(xr, secrets=[{"apiVersion": "v1", "kind": "Secret", "data": "x"}])
    assert condition(outcome, "Resolved").reason == "TokenSecretMissing"


# --- status size ------------------------------------------------------------------------


def phased_fleet(n: int) -> tuple[dict, list[dict], dict]:
    """n clusters with a hydration each, phases cycling Ready, Hydrating, Pending, Failed."""
    fleet = [fleet_cluster(f"gpu-{i:05d}") for i in range(n)]
    xr = with_resolved(model_cache_xr(rollout={"maxConcurrent": n}))
    desired = compose(xr, fleet).desired
    phases = ("Ready", "Hydrating", "Pending", "Failed")
    observed = {f"hydration-gpu-{i:05d}": observed_hydration(
        desired[f"hydration-gpu-{i:05d}"][0], phases[i % 4], reason="DigestMismatch"
        if phases[i % 4] == "Failed" else "") for i in range(n)}
    return xr, fleet, observed


def test_status_lists_at_most_100_clusters_failed_then_hydrating_pending_ready():
    xr, fleet, observed = phased_fleet(400)
    rows = compose(xr, fleet, observed).status["clusters"]
    assert len(rows) == cache_rollup.LISTED_CLUSTERS == 100
    assert {r["phase"] for r in rows} == {"Failed"}
    assert [r["name"] for r in rows] == sorted(r["name"] for r in rows)
    xr, fleet, observed = phased_fleet(12)
    assert [r["phase"] for r in compose(xr, fleet, observed).status["clusters"]] == \
        ["Failed"] * 3 + ["Hydrating"] * 3 + ["Pending"] * 3 + ["Ready"] * 3


def test_status_counts_the_clusters_left_out_and_says_where_every_cluster_is():
    xr, fleet, observed = phased_fleet(400)
    status = compose(xr, fleet, observed).status
    assert status["clustersOmitted"] == 300
    assert status["everyCluster"] == \
        "kubectl get modelcachehydrations -n ml -l fleetcache.dev/model-cache=qwen"
    assert (status["desiredClusters"], status["failedClusters"]) == (400, 100)


def test_degraded_names_at_most_ten_failed_clusters_and_counts_the_rest():
    xr, fleet, observed = phased_fleet(400)
    degraded = condition(compose(xr, fleet, observed), "Degraded")
    assert degraded.message.count("(DigestMismatch)") == messages.NAMED_IN_MESSAGE
    assert "and 90 more" in degraded.message


def test_the_status_stays_under_100_kb_at_ten_thousand_clusters():
    fleet = [fleet_cluster(f"gpu-{i:05d}") for i in range(10_000)]
    status = compose(with_resolved(model_cache_xr()), fleet).status
    assert len(json.dumps(status)) < 100_000


# --- robustness -------------------------------------------------------------------------


def test_the_same_request_composes_the_same_outcome():
    assert repr(three_phase_outcome()) == repr(three_phase_outcome())


def test_a_300_character_unicode_name_composes_valid_child_names():
    xr = with_resolved(model_cache_xr())
    xr["metadata"]["name"] = "модель-" + "x" * 293
    for resource, _ in compose(xr).desired.values():
        assert len(resource["metadata"]["name"]) <= 63


def test_five_thousand_clusters_compose_within_the_rollout_budget():
    fleet = [fleet_cluster(f"gpu-{i:05d}") for i in range(5000)]
    outcome = compose(with_resolved(model_cache_xr()), fleet)
    assert outcome.status["desiredClusters"] == 5000
    assert len(hydrations(outcome)) == 10


# --- updates that fit: compare with the served commits, size for both -----------------------

SECOND_COMMIT = "1" * 40


def compared_row(commit: str = OLD_COMMIT, size: int = 3 * GIB, shared: int = 0,
                 **more) -> dict:
    return {"commit": commit, "bytes": size, "files": 5, "sharedBytes": shared, **more}


def resolving_update(observed: dict, fleet: list[dict]) -> protocol.Outcome:
    """A changed revision on a fleet whose hydrations serve what `observed` says."""
    xr = with_resolved(model_cache_xr(), commit=OLD_COMMIT)
    xr["spec"]["source"]["huggingFace"]["revision"] = "v2"
    return compose(xr, fleet, observed)


def compare_args(outcome: protocol.Outcome) -> list[str]:
    args = outcome.desired[composed_key(outcome, "resolve-job")][0]["spec"]["forProvider"]["manifest"]["spec"][
        "template"]["spec"]["containers"][0]["args"]
    return [b for a, b in zip(args, args[1:], strict=False) if a == "--compare"]


def test_a_resolve_compares_with_the_commit_the_clusters_serve():
    fleet, observed = old_commit_fleet()
    assert compare_args(resolving_update(observed, fleet)) == [OLD_COMMIT]


def test_a_resolve_compares_the_most_served_commit_first():
    fleet, observed = old_commit_fleet()
    observed["hydration-gpu-2"] = serving(observed["hydration-gpu-2"], SECOND_COMMIT)
    observed["hydration-gpu-2"]["spec"]["commit"] = SECOND_COMMIT
    assert compare_args(resolving_update(observed, fleet)) == [OLD_COMMIT, SECOND_COMMIT]


def test_a_resolve_compares_with_at_most_eight_commits():
    fleet = [fleet_cluster(f"gpu-{i}") for i in range(10)]
    old = with_resolved(model_cache_xr(), commit=OLD_COMMIT)
    observed = {}
    for i, (key, (resource, _)) in enumerate(sorted(compose(old, fleet, {}).desired.items())):
        commit = f"{i:x}" * 40
        observed[key] = serving(observed_hydration(resource, "Ready"), commit)
        observed[key]["spec"]["commit"] = commit
    assert len(compare_args(resolving_update(observed, fleet))) == model_cache_view.COMPARED_MAX


def test_a_first_resolve_compares_with_nothing():
    assert compare_args(compose(model_cache_xr())) == []


def test_a_composed_resolve_job_keeps_its_compare_commits_while_the_fleet_moves():
    """A Job is immutable: its args must not change under provider-kubernetes."""
    fleet, observed = old_commit_fleet()
    first = resolving_update(observed, fleet)
    key = composed_key(first, "resolve-job-")
    observed[key] = observed_object(first.desired[key][0])
    for key in ("hydration-gpu-0", "hydration-gpu-1", "hydration-gpu-2"):
        observed[key] = serving(observed[key], SECOND_COMMIT)
        observed[key]["spec"]["commit"] = SECOND_COMMIT
    assert compare_args(resolving_update(observed, fleet)) == [OLD_COMMIT]


def test_the_compared_commits_are_latched_with_the_resolve_result():
    xr = model_cache_xr()
    record = resolved_record(compared=json.dumps([compared_row(shared=GIB)]))
    latched = compose(xr, observed=first_round_observed(xr, record)).status["resolved"]
    assert latched["compared"] == [{**compared_row(shared=GIB), "missing": False}]


def test_a_compared_commit_the_hub_no_longer_has_is_latched_as_missing():
    xr = model_cache_xr()
    record = resolved_record(compared=json.dumps([compared_row(size=0, missing=True)]))
    latched = compose(xr, observed=first_round_observed(xr, record)).status["resolved"]
    assert latched["compared"][0]["missing"] is True


@pytest.mark.parametrize("compared", ["not json", json.dumps({"commit": OLD_COMMIT}),
                                      json.dumps([{"commit": "main", "bytes": 1}]),
                                      json.dumps(["row"])])
def test_a_malformed_compared_record_latches_no_rows(compared):
    xr = model_cache_xr()
    record = resolved_record(compared=compared)
    assert compose(xr, observed=first_round_observed(xr, record)).status["resolved"][
        "compared"] == []


def test_latched_compared_rows_are_bounded_and_shared_bytes_never_exceed_bytes():
    rows = [compared_row(f"{i:x}" * 40, size=GIB, shared=2 * GIB) for i in range(12)]
    kept = model_cache_view.read_compared(rows)
    assert len(kept) == model_cache_view.COMPARED_MAX
    assert {r["sharedBytes"] for r in kept} == {GIB}


def updated_fleet(compared: list[dict], **spec) -> tuple[list[dict], dict, dict]:
    """The fleet serving OLD_COMMIT, and the ModelCache resolved to COMMIT with `compared`."""
    fleet, observed = old_commit_fleet()
    xr = new_commit_xr(**spec)
    xr["status"]["resolved"]["compared"] = compared
    return fleet, observed, xr


def test_a_cluster_serving_a_compared_commit_gets_a_volume_for_both_commits():
    fleet, observed, xr = updated_fleet([compared_row(size=3 * GIB, shared=GIB)])
    # (3 GiB resolved + 3 GiB served - 1 GiB shared) x 1.10 = 5.5 GiB -> 6Gi
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "6Gi"


def test_an_update_that_changes_every_shard_asks_for_twice_the_model():
    fleet, observed, xr = updated_fleet([compared_row(size=10 * GIB)])
    xr["status"]["resolved"]["bytes"] = 10 * GIB
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "22Gi"


def test_a_cluster_serving_a_commit_not_compared_gets_the_resolved_size():
    fleet, observed, xr = updated_fleet([compared_row(SECOND_COMMIT, shared=0)])
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "4Gi"


def test_a_served_commit_the_hub_no_longer_has_adds_nothing_to_the_size():
    fleet, observed, xr = updated_fleet([compared_row(size=0, missing=True)])
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "4Gi"


def test_a_cluster_serving_the_resolved_commit_gets_the_resolved_size():
    fleet, observed, xr = updated_fleet([compared_row(size=3 * GIB)])
    repinned(observed, "gpu-0", "Ready", done=3 * GIB)
    observed["hydration-gpu-0"] = serving(observed["hydration-gpu-0"], COMMIT)
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "4Gi"


def test_spec_storage_size_wins_over_the_size_for_both_commits():
    fleet, observed, xr = updated_fleet([compared_row(size=3 * GIB)], storage={"size": "5Gi"})
    assert hydrations(compose(xr, fleet, observed))["gpu-0"]["spec"]["storage"]["size"] == "5Gi"
