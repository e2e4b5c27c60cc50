"""compose-model-replica, Node delivery: the engine reads its node's copy, else the volume.

The environment contract on Node, both PVCs read-only, the select init container (the
cluster's agent image, restricted, small), Pod Security `restricted` for the whole pod,
every remote manifest valid Kubernetes, placement on the warm-node label (Prefer, Require,
none without a label key), Require reverted to Prefer once after requireTimeout measured
with the request's now, the status, hostile input, and a gRPC render from ModelDeployment
to the Node replica's pod.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.apis import specs
from fleetcache.devtools import render
from fleetcache.functions import naming, protocol, times
from fleetcache.functions.composers import model_deployment
from fleetcache.functions.composers import model_replica as composer
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s.engine import LABEL_DELIVERY
from fleetcache.functions.node_tier import delivery, warmer_names
from tests.support import xrd
from tests.support.deployments import (
    CACHE,
    CLUSTER,
    NAMESPACE,
    REPLICA_ENGINE,
    cache_required,
    cache_row,
    deployment,
    replica_xr,
)
from tests.support.fleet import COMMIT, DIGEST, fleet_cluster, observed_object
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations
from tests.test_model_replica import env_of, pod_spec, remote

LABEL_KEY = "node-cache.fleetcache.dev/" + hashlib.sha256(
    f"{NAMESPACE}/{CACHE}".encode()).hexdigest()[:16]
CLAIM = f"{CACHE}-node-1a2b3c4d"
AGENT_IMAGE = "registry.example.com/fleetcache/fleetcache-agent:v9"
NOW = datetime.datetime(2026, 12, 3, 10, 0, tzinfo=datetime.UTC)
LINKED = f"{delivery.LINK_PATH}/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}"


def node_xr(**node: Any) -> dict:
    """A Node ModelReplica as compose-model-deployment composes it."""
    spec_node = {"claimName": CLAIM, "labelKey": LABEL_KEY, "commit": COMMIT,
                 "manifestDigest": DIGEST, "policy": "Prefer", "requireTimeout": "15m"}
    spec_node.update(node)
    mount = warmer_names.VOLUME_MOUNT
    xr = replica_xr("Cache", nodeCache={k: v for k, v in spec_node.items() if v is not None},
                    deliveryReason=f"NodeReady: 3/3 nodes warm on {COMMIT[:12]}",
                    cache={"modelCacheName": CACHE, "volumeName": naming.cache_volume_name(CACHE),
                           "mountPath": mount, "commit": COMMIT,
                           "snapshotPath": f"{mount}/hub/models--Qwen--Qwen3-0.6B/snapshots/"
                                           f"{COMMIT}"})
    xr["spec"]["delivery"] = "Node"
    return xr


def cluster() -> dict:
    found = fleet_cluster(CLUSTER)
    found["spec"]["agent"] = {"image": AGENT_IMAGE}
    return found


def compose(xr: dict, observed: dict | None = None, now: datetime.datetime = NOW
            ) -> protocol.Outcome:
    return composer.compose(protocol.Request(
        composite=xr, observed=observed or {}, now=now,
        required={composer.FLEET_CLUSTER_KEY: [cluster()],
                  composer.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)]}))


def select_of(outcome: protocol.Outcome) -> dict:
    (init,) = pod_spec(outcome)["initContainers"]
    return init


# --- the environment contract and the mounts ----------------------------------------------


def test_a_node_replica_carries_the_node_contract():
    env = env_of(compose(node_xr()))
    assert env["HF_HUB_CACHE"] == "/var/run/fleetcache/cache"
    assert env["FLEETCACHE_MODEL"] == LINKED
    assert env["FLEETCACHE_MODEL_REVISION"] == COMMIT
    assert env["FLEETCACHE_DELIVERY"] == "node"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_both_pvcs_are_mounted_read_only_at_the_pod_and_the_engine():
    spec = pod_spec(compose(node_xr()))
    claims = {v["name"]: v["persistentVolumeClaim"] for v in spec["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims == {
        delivery.NODE_VOLUME: {"claimName": CLAIM, "readOnly": True},
        delivery.VOLUME_VOLUME: {"claimName": naming.cache_volume_name(CACHE),
                                      "readOnly": True}}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[delivery.NODE_VOLUME] == {
        "name": delivery.NODE_VOLUME, "mountPath": "/var/cache/fleetcache-node",
        "readOnly": True}
    assert mounts[delivery.VOLUME_VOLUME] == {
        "name": delivery.VOLUME_VOLUME, "mountPath": "/var/cache/fleetcache-volume",
        "readOnly": True}


def test_the_link_lives_in_an_emptydir_the_engine_only_reads():
    spec = pod_spec(compose(node_xr()))
    run = next(v for v in spec["volumes"] if v["name"] == delivery.RUN_VOLUME)
    assert "emptyDir" in run
    engine = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    select = {m["name"]: m for m in select_of(compose(node_xr()))["volumeMounts"]}
    assert engine[delivery.RUN_VOLUME] == {
        "name": delivery.RUN_VOLUME, "mountPath": "/var/run/fleetcache", "readOnly": True}
    assert select[delivery.RUN_VOLUME]["readOnly"] is False
    assert select[delivery.NODE_VOLUME]["readOnly"] is True
    assert select[delivery.VOLUME_VOLUME]["readOnly"] is True


def test_the_select_step_checks_the_node_copy_and_links_it():
    select = select_of(compose(node_xr()))
    assert select["command"] == ["fleetcache-agent"]
    assert select["args"] == [
        "select", "--node", "/var/cache/fleetcache-node",
        "--volume", "/var/cache/fleetcache-volume", "--repo", "Qwen/Qwen3-0.6B",
        "--commit", COMMIT, "--manifest-digest", DIGEST, "--link", "/var/run/fleetcache/cache"]


def test_the_select_step_runs_the_clusters_agent_image_with_small_resources():
    select = select_of(compose(node_xr()))
    assert select["image"] == AGENT_IMAGE
    assert select["resources"] == {"requests": {"cpu": "10m", "memory": "32Mi"},
                                   "limits": {"memory": "64Mi"}}


@pytest.mark.parametrize("policy", ["Prefer", "Require"])
def test_the_node_pod_passes_restricted(policy):
    spec = pod_spec(compose(node_xr(policy=policy)))
    assert restricted_violations(spec) == []
    assert select_of(compose(node_xr()))["securityContext"] == agent_job.RESTRICTED_CONTAINER_SECURITY
    assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("policy", ["Prefer", "Require"])
def test_every_remote_manifest_is_valid_kubernetes(policy):
    kinds = []
    for _, manifest in iter_remote_manifests(compose(node_xr(policy=policy))):
        assert_valid_k8s(manifest)
        kinds.append(manifest["kind"])
    assert sorted(kinds) == ["Deployment", "Namespace", "Service"]


def test_a_node_replica_holds_its_model_cache_like_a_cache_replica():
    usage, _ = compose(node_xr()).desired[composer.CACHE_USAGE_KEY]
    assert usage["spec"]["of"]["resourceRef"] == {"name": CACHE}


def test_volume_to_node_changes_the_pod_template_and_not_the_selector():
    volume = remote(compose(replica_xr("Cache")), "deployment")
    node = remote(compose(node_xr()), "deployment")
    assert volume["spec"]["template"] != node["spec"]["template"]
    assert volume["spec"]["selector"] == node["spec"]["selector"]
    assert node["spec"]["template"]["metadata"]["labels"][LABEL_DELIVERY] == "node"


# --- placement on warm nodes --------------------------------------------------------------

WARM = {"matchExpressions": [{"key": LABEL_KEY, "operator": "In", "values": [COMMIT]}]}


def test_prefer_scores_warm_nodes_with_weight_100():
    assert pod_spec(compose(node_xr()))["affinity"] == {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                                                             "preference": WARM}]}}


def test_require_places_only_on_warm_nodes():
    assert pod_spec(compose(node_xr(policy="Require")))["affinity"] == {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [WARM]}}}


def test_without_warm_labels_the_pod_goes_anywhere_in_the_pool():
    assert "affinity" not in pod_spec(compose(node_xr(labelKey="", policy="Require")))


# --- Require, then Prefer once ----------------------------------------------------------------


def started(minutes_ago: int, reverted: str = "") -> dict:
    """The replica's own status as latched at the last compose."""
    moment = times.format_time(NOW - datetime.timedelta(minutes=minutes_ago))
    return {"nodeCache": {"commit": COMMIT, "placement": "Require", "startedAt": moment,
                          "revertedAt": reverted}}


def with_status(xr: dict, status: dict) -> dict:
    out = copy.deepcopy(xr)
    out["status"] = status
    return out


def not_available(xr: dict) -> dict:
    first = compose(xr)
    observed = observed_object(first.desired["deployment"][0])
    observed["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return {"deployment": observed}


def placed(outcome: protocol.Outcome) -> str:
    return next(iter(pod_spec(outcome)["affinity"]["nodeAffinity"])).split("During")[0]


def test_the_node_delivery_start_is_latched_at_the_first_compose():
    outcome = compose(node_xr(policy="Require"))
    assert outcome.status["nodeCache"] == {"commit": COMMIT, "placement": "Require",
                                           "startedAt": "2026-12-03T10:00:00Z",
                                           "revertedAt": ""}


def test_require_holds_before_the_timeout():
    xr = node_xr(policy="Require")
    outcome = compose(with_status(xr, started(14)), not_available(xr))
    assert placed(outcome) == "required"
    assert outcome.status["nodeCache"]["startedAt"] == started(14)["nodeCache"]["startedAt"]


def test_an_unavailable_replica_reverts_to_prefer_at_the_timeout():
    xr = node_xr(policy="Require")
    outcome = compose(with_status(xr, started(15)), not_available(xr))
    assert placed(outcome) == "preferred"
    assert outcome.status["nodeCache"]["revertedAt"] == "2026-12-03T10:00:00Z"
    assert outcome.status["deliveryReason"].startswith(
        "NodeRequireReverted: not available 15m after its Node delivery started")


def test_an_available_replica_keeps_require_past_the_timeout():
    xr = node_xr(policy="Require")
    first = compose(xr)
    available = {"deployment": observed_object(first.desired["deployment"][0])}
    assert placed(compose(with_status(xr, started(60)), available)) == "required"


def test_a_latched_revert_never_goes_back_to_require():
    xr = node_xr(policy="Require")
    first = compose(xr)
    available = {"deployment": observed_object(first.desired["deployment"][0])}
    outcome = compose(with_status(xr, started(60, reverted="2026-12-03T09:30:00Z")), available)
    assert placed(outcome) == "preferred"
    assert outcome.status["nodeCache"]["revertedAt"] == "2026-12-03T09:30:00Z"


def test_a_revert_in_the_spec_places_by_preference_from_the_first_compose():
    outcome = compose(node_xr(policy="Require", revertedAt="2026-12-03T09:30:00Z"))
    assert placed(outcome) == "preferred"


def test_the_timer_restarts_for_a_new_commit():
    xr = node_xr(policy="Require")
    older = started(60)
    older["nodeCache"]["commit"] = "0" * 40
    outcome = compose(with_status(xr, older), not_available(xr))
    assert placed(outcome) == "required"
    assert outcome.status["nodeCache"]["startedAt"] == "2026-12-03T10:00:00Z"


def test_the_timeout_is_the_replicas_own():
    xr = node_xr(policy="Require", requireTimeout="1h")
    assert placed(compose(with_status(xr, started(59)), not_available(xr))) == "required"
    assert placed(compose(with_status(xr, started(60)), not_available(xr))) == "preferred"


# --- status -----------------------------------------------------------------------------------


def test_status_says_what_it_got_and_why():
    outcome = compose(node_xr())
    assert (outcome.status["delivery"], outcome.status["deliveryReason"]) == (
        "Node", f"NodeReady: 3/3 nodes warm on {COMMIT[:12]}")
    assert outcome.status["model"] == {"name": LINKED, "revision": COMMIT}


@pytest.mark.parametrize("policy", ["Prefer", "Require"])
def test_status_is_valid_against_the_xrd(policy):
    xr = node_xr(policy=policy)
    outcome = compose(with_status(xr, started(30)), not_available(xr))
    xr["status"] = outcome.status
    xrd.assert_valid(xr)


# --- hostile input ----------------------------------------------------------------------------


def node_spec_with(**changes: Any) -> dict:
    xr = node_xr()
    for key, value in changes.items():
        if key.startswith("cache__"):
            xr["spec"]["cache"][key[len("cache__"):]] = value
        elif value is ...:
            del xr["spec"]["nodeCache"][key]
        else:
            xr["spec"]["nodeCache"][key] = value
    return xr


HOSTILE = [
    {**node_xr(), "spec": {k: v for k, v in node_xr()["spec"].items() if k != "nodeCache"}},
    {**node_xr(), "spec": {k: v for k, v in node_xr()["spec"].items() if k != "cache"}},
    node_spec_with(claimName="../etc"),
    node_spec_with(claimName=...),
    node_spec_with(labelKey="kubernetes.io/hostname"),
    node_spec_with(commit="not a commit"),
    node_spec_with(manifestDigest="sha256:abc"),
    node_spec_with(policy="Never"),
    node_spec_with(requireTimeout="soon"),
    node_spec_with(revertedAt="yesterday"),
    node_spec_with(cache__mountPath="/var/cache/fleetcache",
                   cache__snapshotPath=f"/var/cache/fleetcache/hub/x/snapshots/{COMMIT}"),
]


@pytest.mark.parametrize("xr", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_node_input_is_an_input_error(xr):
    with pytest.raises(specs.InputError):
        compose(copy.deepcopy(xr))


def test_a_malformed_latched_status_restarts_the_timer():
    xr = node_xr(policy="Require")
    outcome = compose(with_status(xr, {"nodeCache": {"commit": COMMIT, "startedAt": 7,
                                                     "revertedAt": ["x"]}}), not_available(xr))
    assert placed(outcome) == "required"
    assert outcome.status["nodeCache"]["startedAt"] == "2026-12-03T10:00:00Z"


# --- end to end through the function server ---------------------------------------------------


def test_render_from_the_deployment_to_a_node_pod():
    """The ModelDeployment's pipeline composes a Node replica on a cluster whose nodes are
    warm; the replica's pipeline, over gRPC, composes its pod reading the node copy."""
    fleet = [cluster()]
    cache = cache_required(cache_row(CLUSTER, "Ready"))
    hydration = cache[model_deployment.HYDRATIONS_KEY][0]
    hydration["spec"]["tier"] = "Node"
    hydration["status"]["nodeTier"] = {
        "phase": "Ready", "commit": COMMIT, "claimName": CLAIM, "labelKey": LABEL_KEY,
        "desiredNodes": 2, "readyNodes": 2}
    compositions = {p.stem: xrd.load_yaml_docs(p)[0] for p in xrd.COMPOSITIONS.glob("*.yaml")}
    xr = deployment(engine=REPLICA_ENGINE, placement={"clusterNames": [CLUSTER]},
                    delivery={"node": {"policy": "Require"}})
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        xr = xrd.xrd_for(xr).with_defaults(xr)
        rendered = render.run_pipeline(stub, xr, compositions["modeldeployments"], [],
                                       fleet + [i for items in cache.values() for i in items])
        assert not rendered.fatal, rendered.fatal
        (replica,) = rendered.by_kind("ModelReplica")
        xrd.assert_valid(replica)
        assert replica["spec"]["delivery"] == "Node"
        inner = render.run_pipeline(stub, replica, compositions["modelreplicas"], [],
                                    fleet + [xr])
        assert not inner.fatal, inner.fatal
    manifests = [o["spec"]["forProvider"]["manifest"] for o in inner.by_kind("Object")]
    (engine_deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    assert_valid_k8s(engine_deployment)
    pod = engine_deployment["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["initContainers"][0]["image"] == AGENT_IMAGE
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["nodeAffinity"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert (env["FLEETCACHE_DELIVERY"], env["FLEETCACHE_MODEL"]) == ("node", LINKED)
    assert inner.composite["status"]["delivery"] == "Node"


def test_the_latched_start_is_kept_while_the_cluster_is_not_ready():
    xr = with_status(node_xr(policy="Require"), started(10))
    outcome = composer.compose(protocol.Request(
        composite=xr, now=NOW,
        required={composer.FLEET_CLUSTER_KEY: [], composer.DEPLOYMENT_KEY: [deployment()]}))
    assert outcome.status["reason"] == "ClusterNotFound"
    assert outcome.status["nodeCache"] == started(10)["nodeCache"]
