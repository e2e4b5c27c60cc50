"""Issue 22, "Publish once": an OCI ModelCache published once into the fleet's own registry as a
ModelPack artifact, end to end on three simulated clusters. One docker-registry on loopback is the
origin (an OCI source pushed by hand), a second one the fleet mirror
(`spec.distribution.mirror.oci`). The first Ready cluster publishes, the others wait and read the
artifact; the push Secret reaches the publisher's cluster only; `status.resolved.artifact` names
the artifact by digest. Origin bytes for the fleet are measured with and without the mirror in one
run, from the origin registry's access log (design/oci.md, "Publish once").

Real function server, real agents (resolve and fetch Jobs), fleetcache.simulation for Crossplane
and the clusters. The fleet is played once (the `story` fixture); each test reads one behaviour.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.simulation import Cluster
from fleetcache.functions import naming, read
from fleetcache.functions.decisions.mirror import artifact_name
from fleetcache.volume import hf_snapshot_path
from tests.support import oci_fleet
from tests.support.oci_fleet import REPOSITORY, docker_config_secret, files_under, model_files, simulated_fleet
from tests.support.registry import LoopbackRegistry

CLUSTERS = ("gpu-a", "gpu-b", "gpu-c")
DIRECT, MIRRORED = "tiny-direct", "tiny-mirrored"
FLEET_REPOSITORY = "fleet-models"
PUSH_SECRET = "regpush"
PUSH_PASSWORD = "push-secret-password"
DEADLINE = 90.0  # a hang guard: the story takes seconds
MODEL = model_files(5)
MODEL_BYTES = sum(map(len, MODEL.values()))


def oci_cache(name: str, origin: LoopbackRegistry, mirror: LoopbackRegistry | None) -> dict:
    spec = {"distribution": {"mirror": {"oci": {"repository": f"{mirror.host}/{FLEET_REPOSITORY}",
                                                "pushSecretRef": {"name": PUSH_SECRET}, "plainHTTP": True}}}} \
        if mirror else {}
    return oci_fleet.oci_cache(name, origin, CLUSTERS, spec=spec)


@dataclass
class Settled:
    status: dict
    hydrations: dict[str, dict]  # by cluster
    files: dict[str, dict[str, bytes]]
    origin_bytes: int  # blob bytes the origin registry served while it settled
    mirror_bytes: int  # blob bytes the mirror registry served
    seconds: float


@dataclass
class Story:
    caches: dict[str, Settled] = field(default_factory=dict)
    push_secret_on: set[str] = field(default_factory=set)  # clusters that ever held the copied push Secret
    artifact: tuple[str, dict] = ("", {})  # the mirror's manifest by tag: its digest and body
    mirror_host: str = ""


def secret_holders(clusters: dict[str, Cluster], cache: str) -> set[str]:
    remote = naming.child_name(cache, "mirror-credentials")
    return {name for name, cluster in clusters.items()
            if any(kind == "Secret" and obj_name == remote for kind, _, obj_name in cluster.objects)}


def settle(stage: Stage, origin: LoopbackRegistry, mirror: LoopbackRegistry, name: str, story: Story,
           artifact: bool) -> Settled:
    started, before, mirrored = time.monotonic(), origin.blob_bytes_served(), mirror.blob_bytes_served()

    def done() -> bool:
        story.push_secret_on |= secret_holders(stage.clusters, name)
        latched = read.get_path(act.status_of(stage.control, name), "resolved.artifact") or not artifact
        return act.settled(stage.control, name, CLUSTERS) and bool(latched)

    assert stage.until(done, f"{name} to settle") == ""
    stage.round()
    status = act.status_of(stage.control, name)
    commit, repo = status["resolved"]["commit"], status["resolved"]["repo"]
    files = {c: files_under(Path(hf_snapshot_path(str(stage.clusters[c].volume_dir(
        act.NAMESPACE, naming.cache_volume_name(name))), repo, commit))) for c in CLUSTERS}
    return Settled(status, {c: act.hydration_of(stage.control, name, c) for c in CLUSTERS}, files,
                   origin.blob_bytes_served() - before, mirror.blob_bytes_served() - mirrored,
                   time.monotonic() - started)


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    told = Story()
    with LoopbackRegistry() as origin, LoopbackRegistry() as mirror, \
            simulated_fleet(tmp_path_factory.mktemp("oci-mirror"), CLUSTERS, DEADLINE) as stage:
        origin.push_modelpack(REPOSITORY, "v1", MODEL)
        stage.control.apply(oci_cache(DIRECT, origin, None))
        told.caches[DIRECT] = settle(stage, origin, mirror, DIRECT, told, artifact=False)
        stage.control.apply(docker_config_secret(PUSH_SECRET, mirror.host, "pusher", PUSH_PASSWORD))
        stage.control.apply(oci_cache(MIRRORED, origin, mirror))
        told.caches[MIRRORED] = settle(stage, origin, mirror, MIRRORED, told, artifact=True)
        digest = told.caches[MIRRORED].status["resolved"]["manifestDigest"]
        name = told.caches[MIRRORED].status["resolved"]["artifact"]["reference"].split("@")[0]
        told.mirror_host = mirror.host
        told.artifact = mirror.manifest(name.removeprefix(f"{mirror.host}/"), digest)
    return told


def test_without_the_mirror_the_origin_serves_one_copy_per_cluster(story):
    assert story.caches[DIRECT].origin_bytes == len(CLUSTERS) * MODEL_BYTES


def test_with_the_oci_mirror_the_origin_serves_the_model_once_for_the_fleet(story):
    assert story.caches[MIRRORED].origin_bytes == MODEL_BYTES


def test_the_readers_take_their_copies_from_the_mirror_registry(story):
    assert story.caches[MIRRORED].mirror_bytes == (len(CLUSTERS) - 1) * MODEL_BYTES


def test_the_first_cluster_publishes_and_the_others_read_the_mirror(story):
    hydrations = story.caches[MIRRORED].hydrations
    assert {c: read.get_path(h, "spec.mirror.role") for c, h in hydrations.items()} == \
        {CLUSTERS[0]: "Publisher", **{c: "Reader" for c in CLUSTERS[1:]}}
    assert {c: read.get_path(h, "status.bytesFrom") for c, h in hydrations.items()} == \
        {CLUSTERS[0]: "Origin", **{c: "Mirror" for c in CLUSTERS[1:]}}


def test_every_cluster_holds_exactly_the_resolved_bytes(story):
    settled = story.caches[MIRRORED]
    assert {c: h["status"]["phase"] for c, h in settled.hydrations.items()} == {c: "Ready" for c in CLUSTERS}
    assert settled.files == {c: MODEL for c in CLUSTERS}


def test_the_status_names_the_published_artifact_by_digest_under_the_sources_name(story):
    resolved = story.caches[MIRRORED].status["resolved"]
    digest, _ = story.artifact
    assert resolved["artifact"] == {
        "reference": f"{story.mirror_host}/{FLEET_REPOSITORY}/{artifact_name(resolved['repo'])}@{digest}",
        "digest": digest}


def test_the_artifact_holds_one_titled_layer_per_file_of_the_model(story):
    _, body = story.artifact
    assert sorted(layer["annotations"]["org.opencontainers.image.title"] for layer in body["layers"]) == \
        sorted(MODEL)


def test_the_push_secret_reaches_the_publishers_cluster_only(story):
    assert story.push_secret_on == {CLUSTERS[0]}


def test_no_status_carries_the_push_credentials(story):
    said = json.dumps(story.caches[MIRRORED].status) + json.dumps(story.caches[MIRRORED].hydrations)
    assert PUSH_PASSWORD not in said
