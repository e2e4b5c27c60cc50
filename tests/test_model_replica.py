"""compose-model-replica: the engine on its cluster, told where the model is by env only.

The environment contract of DESIGN.md §3, the read-only cache mount, Pod Security
`restricted`, every remote manifest valid against Kubernetes 1.37, the CEL readiness
query, Wait and Fail composing nothing, determinism and hostile input.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache import messages, reasons
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol, server
from fleetcache.functions.composers import model_deployment
from fleetcache.functions.composers import model_replica as composer
from fleetcache.functions.k8s import agent_job, objects
from fleetcache.functions.k8s.engine import ENGINE_HOME
from fleetcache.functions.views.fleet_cluster import fleet_cluster_requirement
from tests.support import xrd
from tests.support.deployments import (
    CACHE,
    CLUSTER,
    NAMESPACE,
    REPLICA_ENGINE,
    SNAPSHOT,
    deployment,
    engine_digest,
    replica_xr,
)
from tests.support.fleet import COMMIT, fleet_cluster, observed_object
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations

# What a Cache replica keeps composed while an input is missing: the engine on its cluster
# and the Usage that holds its ModelCache.
KEPT_ON_CACHE = sorted([*composer.REMOTE_KEYS, composer.CACHE_USAGE_KEY])


def compose(xr: dict, clusters: list[dict] | None = None, observed: dict | None = None,
            owners: list | None = None) -> protocol.Outcome:
    """Compose with its FleetCluster and its ModelDeployment (running REPLICA_ENGINE)
    fetched, unless given."""
    required = {composer.FLEET_CLUSTER_KEY: [fleet_cluster(CLUSTER)] if clusters is None
                else clusters,
                composer.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)] if owners is None
                else owners}
    return composer.compose(protocol.Request(composite=xr, observed=observed or {},
                                        required=required))


def running(delivery: str, engine: dict) -> protocol.Outcome:
    """A replica of a ModelDeployment whose spec.engine is `engine`."""
    return compose(replica_xr(delivery, engineDigest=engine_digest(engine)),
                   owners=[deployment(engine=engine)])


def remote(outcome: protocol.Outcome, key: str) -> dict:
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


def pod_spec(outcome: protocol.Outcome) -> dict:
    return remote(outcome, "deployment")["spec"]["template"]["spec"]


def env_of(outcome: protocol.Outcome) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_spec(outcome)["containers"][0]["env"]}


# --- the environment contract -------------------------------------------------------------


def test_cache_replica_carries_the_cache_contract():
    env = env_of(compose(replica_xr("Cache")))
    assert env["FLEETCACHE_MODEL"] == SNAPSHOT
    assert env["FLEETCACHE_MODEL_REVISION"] == COMMIT
    assert env["FLEETCACHE_DELIVERY"] == "cache"
    assert env["HF_HUB_CACHE"] == f"{agent_job.CACHE_MOUNT_PATH}/hub"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_source_replica_carries_the_source_contract_and_the_caches_commit():
    env = env_of(compose(replica_xr("Source")))
    assert env["FLEETCACHE_MODEL"] == "Qwen/Qwen3-0.6B"
    assert env["FLEETCACHE_MODEL_REVISION"] == COMMIT
    assert env["FLEETCACHE_DELIVERY"] == "source"
    assert "HF_HUB_CACHE" not in env and "HF_HUB_OFFLINE" not in env


def test_source_replica_without_a_commit_loads_the_revision():
    xr = replica_xr("Source", model={"repo": "Qwen/Qwen3-0.6B", "revision": "v2", "commit": ""})
    assert env_of(compose(xr))["FLEETCACHE_MODEL_REVISION"] == "v2"


def test_user_env_follows_the_contract_and_may_override_writable_paths():
    outcome = running("Cache", {**REPLICA_ENGINE, "env": [
        {"name": "HOME", "value": "/data"}, {"name": "MODEL_DIR", "value": "$(FLEETCACHE_MODEL)"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]})
    names = [e["name"] for e in pod_spec(outcome)["containers"][0]["env"]]
    assert names.index("MODEL_DIR") > names.index("FLEETCACHE_MODEL")
    assert names.count("HOME") == 1 and env_of(outcome)["HOME"] == "/data"
    assert names[:5] == ["FLEETCACHE_MODEL", "FLEETCACHE_MODEL_REVISION", "FLEETCACHE_DELIVERY",
                         "HF_HUB_CACHE", "HF_HUB_OFFLINE"]


def test_the_engine_runs_its_own_command_line_unchanged():
    outcome = running("Cache", {
        "image": "lmsysorg/sglang:v0.5.3", "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path=$(FLEETCACHE_MODEL)"], "port": 30000, "readinessPath": "/ready"})
    container = pod_spec(outcome)["containers"][0]
    assert container["command"] == ["python3", "-m", "sglang.launch_server"]
    assert container["args"] == ["--model-path=$(FLEETCACHE_MODEL)"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 30000, "protocol": "TCP"}]
    assert remote(outcome, "service")["spec"]["ports"][0]["port"] == 30000


# --- the cache mount and pod security -----------------------------------------------------


def test_cache_is_mounted_read_only_from_the_caches_pvc():
    spec = pod_spec(compose(replica_xr("Cache")))
    volume = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"] == {"claimName": naming.cache_volume_name(CACHE),
                                               "readOnly": True}
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": agent_job.CACHE_MOUNT_PATH, "readOnly": True}


def test_source_replica_mounts_no_cache():
    spec = pod_spec(compose(replica_xr("Source")))
    assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]


def test_writable_tmp_home_and_memory_backed_shm_under_a_read_only_root():
    spec = pod_spec(running("Cache", {"image": "x", "sharedMemorySize": "8Gi"}))
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts[ENGINE_HOME]]
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("delivery", ["Cache", "Source"])
def test_pod_passes_restricted_and_runs_as_the_agents_uid(delivery):
    deployment = remote(compose(replica_xr(delivery)), "deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []
    assert spec["securityContext"]["runAsUser"] == agent_job.AGENT_UID
    assert spec["securityContext"]["fsGroup"] == agent_job.AGENT_UID
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False  # a Service named vllm would set VLLM_PORT


@pytest.mark.parametrize("delivery", ["Cache", "Source"])
def test_every_remote_manifest_is_valid_kubernetes(delivery):
    outcome = running(delivery, {
        "image": "x", "env": [{"name": "A", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.name"}}}],
        "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "24Gi"}},
        "sharedMemorySize": "1Gi"})
    kinds = []
    for _, manifest in iter_remote_manifests(outcome):
        assert_valid_k8s(manifest)
        kinds.append(manifest["kind"])
    assert sorted(kinds) == ["Deployment", "Namespace", "Service"]


def test_remote_objects_target_the_clusters_provider_config_and_keep_the_namespace():
    outcome = compose(replica_xr("Cache"))
    for key in composer.REMOTE_KEYS:
        obj = outcome.desired[key][0]
        assert obj["apiVersion"] == objects.OBJECT_API_VERSION
        assert obj["spec"]["providerConfigRef"] == {"kind": objects.PROVIDER_CONFIG_KIND,
                                                    "name": CLUSTER}
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert remote(outcome, key).get("metadata", {}).get("namespace", NAMESPACE) == NAMESPACE
    assert outcome.desired["namespace"][0]["spec"]["managementPolicies"] == ["Observe", "Create"]
    assert remote(outcome, "namespace")["metadata"]["name"] == NAMESPACE


def test_one_pod_per_replica_rolled_without_a_serving_gap():
    spec = remote(compose(replica_xr("Cache")), "deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()


def test_switching_source_to_cache_changes_the_pod_template_and_not_the_selector():
    source = remote(compose(replica_xr("Source")), "deployment")
    cache = remote(compose(replica_xr("Cache")), "deployment")
    assert source["spec"]["template"] != cache["spec"]["template"]
    assert source["spec"]["selector"] == cache["spec"]["selector"]
    assert remote(compose(replica_xr("Source")), "service") == remote(
        compose(replica_xr("Cache")), "service")


# --- readiness ---------------------------------------------------------------------------


def cel(query: str, obj: dict) -> bool:
    env = celpy.Environment()
    return bool(env.program(env.compile(query)).evaluate({"object": celpy.json_to_cel(obj)}))


def test_the_readiness_query_is_true_only_for_an_available_deployment():
    outcome = compose(replica_xr("Cache"))
    query = outcome.desired["deployment"][0]["spec"]["readiness"]
    assert query["policy"] == "DeriveFromCelQuery"
    deployment = remote(outcome, "deployment")
    assert cel(query["celQuery"], deployment) is False
    assert cel(query["celQuery"], {**deployment, "status": {}}) is False
    assert cel(query["celQuery"], {**deployment, "status": {"conditions": [
        {"type": "Available", "status": "False"}]}}) is False
    assert cel(query["celQuery"], {**deployment, "status": {"conditions": [
        {"type": "Progressing", "status": "True"}, {"type": "Available", "status": "True"}]}})


def test_ready_when_the_deployment_object_is_ready():
    first = compose(replica_xr("Cache"))
    assert first.composite_ready is False and first.status["phase"] == "Pending"
    observed = {"deployment": observed_object(first.desired["deployment"][0])}
    outcome = compose(replica_xr("Cache"), observed=observed)
    assert outcome.composite_ready is True
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Ready", "Available")
    assert outcome.status["endpoint"].endswith(f".{NAMESPACE}.svc:8000")


def test_a_stuck_rollout_says_so():
    first = compose(replica_xr("Cache"))
    observed = observed_object(first.desired["deployment"][0], remote_status={"conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet has timed out progressing."}]})
    observed["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    outcome = compose(replica_xr("Cache"), observed={"deployment": observed})
    assert outcome.status["reason"] == "ProgressDeadlineExceeded"
    assert "timed out" in outcome.status["message"]


# --- Wait, Fail and the cluster -----------------------------------------------------------


def test_wait_composes_nothing_and_shows_the_hydrations_progress():
    outcome = compose(replica_xr("Wait"))
    assert outcome.desired == {}
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Waiting", "Hydrating")
    assert "1.0GiB of 4.0GiB (25%)" in outcome.status["message"]
    assert outcome.composite_ready is False


def test_fail_composes_nothing_and_carries_the_hydrations_remedy():
    remedy = reasons.remedy("AuthFailed")
    xr = replica_xr("Fail", hydration={"phase": "Failed", "reason": "AuthFailed",
                                       "message": f"401 from the hub. {remedy}"})
    outcome = compose(xr)
    assert outcome.desired == {}
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Failed", "HydrationFailed")
    assert remedy in outcome.status["message"] and "AuthFailed" in outcome.status["message"]
    bare = compose(replica_xr("Fail", hydration={"phase": "Failed", "reason": "AuthFailed"}))
    assert remedy in bare.status["message"]


@pytest.mark.parametrize("delivery", ["Wait", "Fail"])
def test_a_huge_hydration_message_is_cut_in_the_status(delivery):
    xr = replica_xr(delivery, hydration={"phase": "x" * 5000, "reason": "r" * 5000,
                                         "message": "m" * 50_000})
    assert len(compose(xr).status["message"]) < 2 * messages.MESSAGE_LIMIT


def test_a_running_replica_is_kept_while_its_cluster_is_not_ready():
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    for clusters, reason in (([fleet_cluster(CLUSTER, ready=False)], "ClusterNotReady"),
                             ([], "ClusterNotFound")):
        outcome = compose(replica_xr("Cache"), clusters, observed)
        assert sorted(outcome.desired) == KEPT_ON_CACHE
        assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", reason)
        assert reasons.remedy(reason) in outcome.status["message"]


def test_nothing_is_deleted_before_the_cluster_and_deployment_are_fetched():
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    outcome = composer.compose(protocol.Request(composite=replica_xr("Cache"), observed=observed))
    assert sorted(outcome.desired) == KEPT_ON_CACHE
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "Resolving")


# --- holding the cache -----------------------------------------------------------------------


def test_a_cache_replica_holds_its_cache_with_a_usage_by_its_engine_object_that_replays_deletion():
    """`by` is the engine's Deployment Object, not the replica that owns the Usage: a Usage
    by its own owner never goes under foreground deletion (design/deployments.md)."""
    desired = compose(replica_xr("Cache")).desired
    usage, ready = desired[composer.CACHE_USAGE_KEY]
    engine, _ = desired[composer.ENGINE_KEY]
    assert usage["spec"] == {
        "of": {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
               "resourceRef": {"name": CACHE}},
        "by": {"apiVersion": engine["apiVersion"], "kind": "Object",
               "resourceRef": {"name": engine["metadata"]["name"]}},
        "replayDeletion": True}
    assert (usage["apiVersion"], usage["kind"], ready) == (composer.USAGE_API_VERSION, "Usage",
                                                          True)


@pytest.mark.parametrize("delivery", ["Source", "Wait", "Fail"])
def test_a_replica_that_does_not_mount_the_cache_does_not_hold_it(delivery):
    assert composer.CACHE_USAGE_KEY not in compose(replica_xr(delivery)).desired


# --- the engine, by reference to the ModelDeployment ----------------------------------------


def test_asks_for_its_fleet_cluster_and_its_model_deployment_by_name():
    outcome = composer.compose(protocol.Request(composite=replica_xr("Source")))
    assert outcome.requirements == {
        composer.FLEET_CLUSTER_KEY: fleet_cluster_requirement(CLUSTER),
        composer.DEPLOYMENT_KEY: protocol.Requirement(naming.API_VERSION, "ModelDeployment",
                                                 match_name="chat", namespace=NAMESPACE)}


@pytest.mark.parametrize("delivery", ["Wait", "Fail"])
def test_a_replica_that_runs_nothing_asks_for_nothing(delivery):
    assert composer.compose(protocol.Request(composite=replica_xr(delivery))).requirements == {}


def test_runs_the_engine_its_model_deployment_names():
    container = pod_spec(running("Source", {"image": "vllm/vllm-openai:v0.11.0",
                                            "args": ["--max-model-len=8192"]}))["containers"][0]
    assert (container["image"], container["args"]) == ("vllm/vllm-openai:v0.11.0",
                                                       ["--max-model-len=8192"])


def test_a_missing_model_deployment_keeps_what_runs_and_says_so():
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    outcome = compose(replica_xr("Cache"), observed=observed, owners=[])
    assert sorted(outcome.desired) == KEPT_ON_CACHE
    assert naming.canonical(outcome.desired["deployment"][0]) == naming.canonical(
        objects.strip_observed(observed["deployment"]))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending",
                                                                   "DeploymentNotFound")
    assert f"ModelDeployment {NAMESPACE}/chat does not exist" in outcome.status["message"]
    assert reasons.DeploymentNotFound.remedy in outcome.status["message"]


@pytest.mark.parametrize("engine", [None, "vllm", {"image": ""}, {"image": "x", "port": "80"},
                                    {"image": "x", "args": "x" * 5000}],
                         ids=["absent", "string", "no-image", "port-string", "huge-args"])
def test_a_malformed_engine_on_the_deployment_keeps_what_runs_with_a_warning(engine):
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    owner = deployment()
    owner["spec"]["engine"] = engine
    outcome = compose(replica_xr("Cache"), observed=observed, owners=[owner])
    assert sorted(outcome.desired) == KEPT_ON_CACHE
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "InvalidSpec")
    assert f"ModelDeployment {NAMESPACE}/chat spec.engine" in outcome.status["message"]
    assert len(outcome.status["message"]) < 600 and outcome.warnings


def test_a_required_deployment_that_is_not_an_object_reads_as_missing():
    outcome = compose(replica_xr("Cache"), owners=["chat"])
    assert outcome.status["reason"] == "DeploymentNotFound"
    assert list(outcome.desired) == [composer.CACHE_USAGE_KEY]


def test_an_engine_changed_since_composing_keeps_the_running_one():
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    observed["deployment"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    newer = deployment(engine={**REPLICA_ENGINE, "args": ["--new-flag"]})
    outcome = compose(replica_xr("Cache"), observed=observed, owners=[newer])
    assert naming.canonical(outcome.desired["deployment"][0]) == naming.canonical(
        objects.strip_observed(observed["deployment"]))
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "EngineChanging")


def test_an_engine_changed_since_composing_keeps_a_ready_replica_ready():
    first = compose(replica_xr("Cache"))
    observed = {"deployment": observed_object(first.desired["deployment"][0])}
    newer = deployment(engine={**REPLICA_ENGINE, "args": ["--new-flag"]})
    outcome = compose(replica_xr("Cache"), observed=observed, owners=[newer])
    assert (outcome.status["phase"], outcome.composite_ready) == ("Ready", True)


def test_the_new_engine_runs_once_the_deployment_recomposed_the_replica():
    newer = {**REPLICA_ENGINE, "args": ["--new-flag"]}
    first = compose(replica_xr("Cache"))
    observed = {k: observed_object(r) for k, (r, _) in first.desired.items()}
    outcome = compose(replica_xr("Cache", engineDigest=engine_digest(newer)), observed=observed,
                      owners=[deployment(engine=newer)])
    assert pod_spec(outcome)["containers"][0]["args"] == ["--new-flag"]


def test_the_request_with_a_4kib_engine_and_1000_replicas_stays_small():
    """What Crossplane sends compose-model-replica for one of 1,000 replicas of a 4 KiB
    engine: the replica, its three Objects as observed, its FleetCluster and its
    ModelDeployment with that deployment's whole status."""
    engine = {**REPLICA_ENGINE, "args": ["--model=$(FLEETCACHE_MODEL)", "x" * 4096]}
    xr = replica_xr("Cache", engineDigest=engine_digest(engine))
    owner = deployment(engine=engine, replicas=1000)
    owner["status"] = {"placements": [
        {"replica": i, "cluster": f"gpu-{i % 500:03d}", "delivery": "Cache",
         "reason": "PreviousCommitWhileHydrating", "commit": COMMIT}
        for i in range(model_deployment.LISTED_PLACEMENTS)]}
    first = compose(xr, owners=[owner])
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, xr)
    for key, (desired, _) in first.desired.items():
        resource.update(req.observed.resources[key], observed_object(desired))
    for key, items in {composer.FLEET_CLUSTER_KEY: [fleet_cluster(CLUSTER)],
                       composer.DEPLOYMENT_KEY: [owner]}.items():
        for item in items:
            req.required_resources[key].items.add().resource.CopyFrom(
                resource.dict_to_struct(item))
    assert req.ByteSize() < 64 * 1024


@pytest.mark.parametrize("delivery", ["Cache", "Source", "Wait", "Fail"])
def test_status_is_valid_against_the_xrd(delivery):
    xr = replica_xr(delivery)
    xr["status"] = compose(xr).status
    xrd.assert_valid(xr)


# --- determinism and hostile input ----------------------------------------------------------


def test_same_request_gives_the_same_output():
    a, b = compose(replica_xr("Cache")), compose(replica_xr("Cache"))
    assert naming.canonical(a.desired) == naming.canonical(b.desired) and a.status == b.status


def test_names_are_valid_for_long_dotted_and_digit_leading_replicas():
    for name in ("r" * 253, "chat.0", "7b-chat-0"):
        xr = replica_xr("Cache", deploymentName="d" * 253)
        xr["metadata"]["name"] = name
        outcome = compose(xr)
        for _, manifest in iter_remote_manifests(outcome):
            assert_valid_k8s(manifest)
        assert remote(outcome, "service")["metadata"]["name"][0].isalpha()
        for composed, _ in outcome.desired.values():
            assert len(composed["metadata"]["name"]) <= 63


def spec_with(**changes: Any) -> dict:
    xr = replica_xr("Cache")
    for path, value in changes.items():
        target = xr["spec"]
        *parents, leaf = path.split("__")
        for part in parents:
            target = target[part]
        if value is ...:
            del target[leaf]
        else:
            target[leaf] = value
    return xr


HOSTILE = [
    {k: v for k, v in replica_xr().items() if k != "spec"},
    {**replica_xr(), "spec": "Cache"},
    spec_with(clusterName=...),
    spec_with(clusterName=7),
    spec_with(clusterName="Not_A_Name"),
    spec_with(delivery="Maybe"),
    spec_with(delivery=None),
    spec_with(cache=...),
    spec_with(cache__snapshotPath="/etc/passwd"),
    spec_with(cache__commit=3),
    spec_with(engineDigest=...),
    spec_with(engineDigest=7),
    spec_with(deploymentName=...),
    spec_with(deploymentName="Not A Name"),
    spec_with(model__repo=""),
    spec_with(replica=-1),
    spec_with(replica=True),
    spec_with(model="Qwen/Qwen3-0.6B"),
    spec_with(model__repo=["a"]),
    spec_with(hydration="lots"),
]


@pytest.mark.parametrize("xr", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_is_an_input_error(xr):
    with pytest.raises(specs.InputError):
        compose(copy.deepcopy(xr))


def test_hostile_required_and_observed_resources_do_not_break_compose():
    weird_cluster = {"metadata": {"name": CLUSTER, "labels": "x"}, "status": "Ready"}
    outcome = compose(replica_xr("Cache"), [weird_cluster],
                      {"deployment": {"status": {"atProvider": {"manifest": "broken"}}}})
    assert outcome.status["reason"] == "ClusterNotReady"
    outcome = compose(replica_xr("Cache"), None,
                      {"deployment": {"status": {"atProvider": {"manifest": {
                          "status": {"conditions": "nope"}}}}}})
    assert outcome.status["phase"] == "Pending"


@pytest.mark.parametrize("xr", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_is_a_fatal_result_through_the_server(xr):
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, copy.deepcopy(xr))
    req.required_resources[composer.FLEET_CLUSTER_KEY].items.add().resource.CopyFrom(
        resource.dict_to_struct(fleet_cluster(CLUSTER)))
    req.required_resources[composer.DEPLOYMENT_KEY].items.add().resource.CopyFrom(
        resource.dict_to_struct(deployment(engine=REPLICA_ENGINE)))
    rsp = server.run(req, protocol.Request(composite={}).now)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal and "internal error" not in fatal[0], fatal
