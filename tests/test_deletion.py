"""Deleting replicas, deployments and caches, with the control plane deleting as upstream
does (design/simulation.md): Crossplane v2.2+ deletes a composed resource it no longer
desires in the foreground, its controller references block their owner's deletion, and a
composed Usage waits for its `by` before it lets go (crossplane#5962). A Cache replica's
Usage of its ModelCache must neither deadlock that nor let the cache go while an engine
mounts it (design/deployments.md, "Holding the cache").

First the control plane itself, on hand-made composites (a stand-in pipeline): a Usage by
the replica that composes it holds a foreground deletion for ever, a Usage by the replica's
engine Object does not. Then the real thing: the function server, real agents and the
test hub, a cached ModelDeployment scaled from 2 to 1, deleted with `--cascade=foreground`,
and its ModelCache deleted before its replicas and going after them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Cluster, ControlPlane, Provider, step
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read
from fleetcache.functions.k8s import objects
from tests.support.plane import control_plane

NAMESPACE = "ml"
ROUNDS = 12  # every deletion here completes in fewer; a deadlock never does
DEPLOYMENT = ("ModelDeployment", NAMESPACE, "chat")
CACHE = ("ModelCache", NAMESPACE, "chat")


def terminating(control: ControlPlane, kind: str) -> list[str]:
    return [xr["metadata"]["name"] for xr in control.of_kind(kind)
            if "deletionTimestamp" in xr["metadata"]]


def rounds_until(control: ControlPlane, done: Callable[[], bool],
                 clusters: Iterable[Cluster] = ()) -> int | None:
    """How many rounds until `done`, or None if it still is not after ROUNDS."""
    for count in range(ROUNDS + 1):
        if done():
            return count
        step(control, clusters)
    return None


# --- the control plane, on stand-in composites -------------------------------------------------


def stand_in_pipeline(usage_by_replica: bool):
    """A ModelDeployment composes `spec.replicas` ModelReplicas; each composes its engine's
    Object and a Usage of the ModelCache by itself (the shape fleetcache had) or by that
    Object."""

    def desired(xr: dict) -> list[tuple[str, dict]]:
        name = xr["metadata"]["name"]
        if xr["kind"] == "ModelDeployment":
            return [(f"replica-{i}", {"apiVersion": naming.API_VERSION, "kind": "ModelReplica",
                                      "metadata": {"name": f"{name}-{i}"}, "spec": {}})
                    for i in range(xr["spec"]["replicas"])]
        if xr["kind"] != "ModelReplica":
            return []
        engine = {"apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
                  "metadata": {"name": f"{name}-deployment"}, "spec": {"forProvider": {}}}
        by = xr if usage_by_replica else engine
        usage = {"apiVersion": "protection.crossplane.io/v1beta1", "kind": "Usage",
                 "metadata": {"name": f"{name}-uses-cache"},
                 "spec": {"of": {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
                                 "resourceRef": {"name": "chat"}},
                          "by": {"apiVersion": by["apiVersion"], "kind": by["kind"],
                                 "resourceRef": {"name": by["metadata"]["name"]}},
                          "replayDeletion": True}}
        return [("deployment", engine), ("cache-usage", usage)]

    def pipeline(xr, _composition, _observed, _required) -> rendering.Rendered:
        return rendering.Rendered(composite=xr, resources=[
            rendering.composed(xr, key, fnv1.Resource(resource=resource.dict_to_struct(res)))
            for key, res in desired(xr)])

    return pipeline


def stand_in_plane(usage_by_replica: bool) -> ControlPlane:
    """The ModelCache and a ModelDeployment of 2 replicas, settled."""
    control = ControlPlane(stand_in_pipeline(usage_by_replica),
                           {kind: {} for kind in ("ModelCache", "ModelDeployment", "ModelReplica")},
                           {}, Provider({}, lambda: []))
    control.apply({"apiVersion": naming.API_VERSION, "kind": "ModelCache",
                   "metadata": {"name": "chat", "namespace": NAMESPACE}, "spec": {}})
    control.apply(stand_in_deployment(2))
    for _ in range(3):
        step(control, ())
    return control


def stand_in_deployment(replicas: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE}, "spec": {"replicas": replicas}}


def played(control: ControlPlane) -> list[set[tuple[str, str, str]]]:
    """What exists on the control plane after each of ROUNDS rounds."""
    seen = []
    for _ in range(ROUNDS):
        step(control, ())
        seen.append(set(control.xrs) | set(control.others))
    return seen


def kinds(keys: set[tuple[str, str, str]]) -> set[str]:
    return {key[0] for key in keys}


def test_a_usage_by_the_replica_that_composes_it_holds_a_foreground_deletion_for_ever():
    """crossplane#5962: the replica waits for the Usage it owns (blockOwnerDeletion), the
    Usage for the replica, its `by`."""
    control = stand_in_plane(usage_by_replica=True)
    control.apply(stand_in_deployment(1))
    assert all(("ModelReplica", NAMESPACE, "chat-1") in keys for keys in played(control))
    assert terminating(control, "ModelReplica") == ["chat-1"]
    assert ("Usage", NAMESPACE, "chat-1-uses-cache") in control.others


def test_a_background_deletion_removes_the_replica_before_its_usage_so_a_usage_by_it_goes_too():
    control = stand_in_plane(usage_by_replica=True)
    assert control.delete(DEPLOYMENT) == ""
    seen = played(control)
    assert any("Usage" in kinds(keys) and "ModelReplica" not in kinds(keys) for keys in seen)
    assert seen[-1] == {CACHE}


def test_a_usage_by_the_replicas_engine_object_lets_a_foreground_deletion_through():
    control = stand_in_plane(usage_by_replica=False)
    control.apply(stand_in_deployment(1))
    assert rounds_until(control, lambda: len(control.of_kind("ModelReplica")) == 1) is not None
    assert control.delete(DEPLOYMENT, "Foreground") == ""
    assert played(control)[-1] == {CACHE}


def test_a_foreground_deletion_keeps_the_deployment_until_its_replicas_are_gone():
    control = stand_in_plane(usage_by_replica=False)
    control.delete(DEPLOYMENT, "Foreground")
    seen = played(control)
    assert all(DEPLOYMENT in keys for keys in seen if "ModelReplica" in kinds(keys))
    assert any(DEPLOYMENT in keys and "ModelReplica" not in kinds(keys) for keys in seen)


def test_deleting_a_used_composite_is_refused_in_the_webhooks_words():
    control = stand_in_plane(usage_by_replica=False)
    assert control.delete(CACHE) == (
        'This resource is in-use by 2 usage(s), including the *v1beta1.Usage "chat-0-uses-cache" '
        '(in namespace "ml") by resource Object/chat-0-deployment.')
    assert CACHE in control.xrs


def test_a_refused_deletion_replays_with_its_propagation_once_the_last_usage_is_gone():
    control = stand_in_plane(usage_by_replica=False)
    control.delete(CACHE, "Foreground")
    control.delete(DEPLOYMENT)
    assert rounds_until(control, lambda: terminating(control, "ModelCache") == ["chat"]) is not None
    assert not any(key[0] == "Usage" for key in control.others)
    assert "foregroundDeletion" in control.xrs[CACHE]["metadata"]["finalizers"]
    assert rounds_until(control, lambda: CACHE not in control.xrs) is not None


# --- the real composers ------------------------------------------------------------------------


CLUSTERS = ("gpu-a", "gpu-b")
REPO = "fleetcache-test/deletion"
DEADLINE = 60.0


def manifests(endpoint: str) -> list[dict]:
    """Both clusters, a grant, a ModelCache on both and a ModelDeployment of 2 replicas on it."""
    fleet = [{"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
              "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                               "name": f"{name}-kubeconfig"}}}
             for name in CLUSTERS]
    return [*fleet,
            {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
             "metadata": {"name": "team", "namespace": NAMESPACE},
             "spec": {"clusters": {"clusterNames": list(CLUSTERS)}, "quota": {"bytes": "1Gi"}}},
            {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
             "metadata": {"name": "chat", "namespace": NAMESPACE},
             "spec": {"grantRef": {"name": "team"},
                      "source": {"huggingFace": {"repo": REPO, "revision": "v1",
                                                 "endpoint": endpoint}},
                      "placement": {"clusterNames": list(CLUSTERS)}}},
            deployment(2)]


def deployment(replicas: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": "chat"}, "replicas": replicas,
                     "maxReplicasPerCluster": 1, "placement": {"clusterNames": list(CLUSTERS)},
                     "engine": {"image": "vllm/vllm-openai:v0.11.0",
                                "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


@dataclass
class Story:
    """What the fixture observed: rounds each deletion took (None: not within ROUNDS), and
    every round in which the ModelCache was deleted while an engine mounted its volume."""

    refusal: str = ""
    scale_down: int | None = None
    foreground: int | None = None
    cache: int | None = None
    volumes_gone: bool = False
    unprotected: list[str] = field(default_factory=list)


def mounting(clusters: dict[str, Cluster]) -> list[str]:
    """The engine Deployments, on any cluster, whose pod mounts the ModelCache's volume."""
    claim = naming.cache_volume_name("chat")
    return [f"{cluster.name}/{key[2]}" for cluster in clusters.values()
            for key, obj in cluster.objects.items() if key[0] == "Deployment" and any(
                read.get_path(volume, "persistentVolumeClaim.claimName") == claim
                for volume in read.get_path(obj, "spec.template.spec.volumes", []))]


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    root = tmp_path_factory.mktemp("deletion")
    with TestHub() as hub, rendering.function_process() as address, \
            rendering.channel_to(address) as channel:
        hub.add_repo(REPO, make_model(2**20, shards=1, seed=3), revision="v1")
        clusters = {name: Cluster(name, root / name) for name in CLUSTERS}
        control = control_plane(channel, clusters)
        told = Story()

        def watched() -> None:
            cache = control.xrs.get(CACHE)
            if (cache is None or "deletionTimestamp" in cache["metadata"]) and mounting(clusters):
                told.unprotected.append(", ".join(mounting(clusters)))

        def rounds(done: Callable[[], bool]) -> int | None:
            def checked() -> bool:
                watched()
                return done()
            return rounds_until(control, checked, clusters.values())

        try:
            for manifest in manifests(hub.endpoint):
                control.apply(manifest)
            started = time.monotonic()
            while len(mounting(clusters)) < 2:
                assert time.monotonic() - started < DEADLINE, "timed out waiting for 2 Cache replicas"
                step(control, clusters.values())
            told.refusal = control.delete(CACHE)
            control.apply(deployment(1))
            told.scale_down = rounds(lambda: len(control.of_kind("ModelReplica")) == 1)
            control.delete(DEPLOYMENT, "Foreground")
            told.foreground = rounds(lambda: not control.of_kind("ModelDeployment")
                                     and not control.of_kind("ModelReplica"))
            told.cache = rounds(lambda: CACHE not in control.xrs)
            volumes = [c.volume_dir(NAMESPACE, naming.cache_volume_name("chat"))
                       for c in clusters.values()]
            told.volumes_gone = rounds(lambda: not any(v.exists() for v in volumes)) is not None
            yield told
        finally:
            for cluster in clusters.values():
                cluster.stop()


def test_deleting_a_model_cache_two_engines_mount_is_refused(story):
    assert story.refusal.startswith("This resource is in-use by 2 usage(s)")


def test_scaling_a_cached_deployment_from_2_to_1_deletes_the_replica(story):
    assert story.scale_down is not None


def test_a_foreground_deletion_of_a_cached_deployment_completes(story):
    assert story.foreground is not None


def test_the_refused_deletion_of_the_model_cache_replays_and_completes(story):
    assert story.cache is not None
    assert story.volumes_gone


def test_the_model_cache_is_never_deleted_while_an_engine_mounts_its_volume(story):
    assert story.unprotected == []
