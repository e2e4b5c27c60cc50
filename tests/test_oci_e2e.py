"""Issue 22's "Done when", first clause: a ModelCache from an OCI registry, end to end on a
simulated fleet of three clusters. A ModelPack artifact (raw layers, pushed by hand) resolves
to one `oci-` commit and every cluster holds exactly the pushed bytes; a tag moved after
resolve changes nothing for a cluster added later; a pull secret (htpasswd auth) is copied to
the clusters from the ModelCache's namespace, and without it the cache says which field names
the missing Secret; a Flat cache (a new cache: it resolves the moved tag) keeps its commit's
files in `commits/<commit>`, where its replicas load them. The registry's access log counts the
blob bytes it served: one copy per cluster that fetched.

Real function server, real agents (the resolve and fetch Jobs) against the CNCF distribution
registry on loopback (tests/support/registry.py), fleetcache.simulation for Crossplane and the
clusters. The fleet is played once (the `story` fixture); each test reads one behaviour of it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleetcache import reasons
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.functions import naming, read
from fleetcache.functions.k8s import agent_job
from fleetcache.volume import flat_commit_path, hf_snapshot_path
from tests.support.oci_fleet import (
    REPOSITORY,
    Engine,
    docker_config_secret,
    engines,
    files_under,
    model_deployment,
    model_files,
    oci_cache,
    simulated_fleet,
)
from tests.support.registry import LoopbackRegistry

CLUSTERS = ("gpu-a", "gpu-b", "gpu-c")
FIRST = CLUSTERS[:2]  # the first cache's placement before gpu-c joins it
USER, PASSWORD = "puller", "pull-secret-password"
PUBLIC, PRIVATE, FLAT = "tiny", "private-tiny", "flat-tiny"
PULL_SECRET = "regcred"
DEADLINE = 120.0  # a hang guard: the story takes seconds
PUSHED, MOVED_TO = model_files(1), model_files(2)


@dataclass
class Settled:
    """One cache as it stood once every cluster's hydration of its commit settled."""

    status: dict
    phases: dict[str, str]
    files: dict[str, dict[str, bytes]]  # per cluster: the files where FLEETCACHE_MODEL points
    served: int  # blob bytes the registry served while it settled (resolve and every fetch)
    rounds: int


@dataclass
class Story:
    caches: dict[str, Settled] = field(default_factory=dict)  # by step
    pushed_digest: str = ""  # the manifest digest of the first push
    missing_secret: dict = field(default_factory=dict)  # the cache's Resolved condition
    replicas: dict[str, Engine] = field(default_factory=dict)  # by cluster: the Flat replicas' engines


def settle(stage: Stage, registry: LoopbackRegistry, name: str, clusters, flat: bool = False) -> Settled:
    started, served = stage.rounds, registry.blob_bytes_served()
    assert act.settle(stage, name, clusters) == ""
    status = act.status_of(stage.control, name)
    commit, repo = status["resolved"]["commit"], status["resolved"]["repo"]
    found = {}
    for cluster in clusters:
        volume = str(stage.clusters[cluster].volume_dir(act.NAMESPACE, naming.cache_volume_name(name)))
        found[cluster] = files_under(Path(flat_commit_path(volume, commit) if flat
                                          else hf_snapshot_path(volume, repo, commit)))
    return Settled(status, act.phases(stage.control, name, clusters), found,
                   registry.blob_bytes_served() - served, stage.rounds - started)


def resolved_condition(stage: Stage, name: str) -> dict:
    conditions = read.get_path(act.status_of(stage.control, name), "conditions", []) or []
    return next((c for c in conditions if c["type"] == "Resolved"), {})


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    told = Story()
    with LoopbackRegistry() as public, LoopbackRegistry(users={USER: PASSWORD}) as private, \
            simulated_fleet(tmp_path_factory.mktemp("oci"), CLUSTERS, DEADLINE) as stage:
        control = stage.control

        # 1. an anonymous registry, a ModelPack artifact of raw layers, two clusters
        told.pushed_digest = public.push_modelpack(REPOSITORY, "v1", PUSHED)
        control.apply(oci_cache(PUBLIC, public, FIRST))
        told.caches["resolved"] = settle(stage, public, PUBLIC, FIRST)

        # 2. the tag moves to other content; then gpu-c joins the placement
        public.push_modelpack(REPOSITORY, "v1", MOVED_TO)
        control.apply(oci_cache(PUBLIC, public, CLUSTERS))
        told.caches["after the move"] = settle(stage, public, PUBLIC, CLUSTERS)

        # 3. htpasswd auth: first without the pull Secret, then with it
        private.push_modelpack(REPOSITORY, "v1", PUSHED)
        control.apply(oci_cache(PRIVATE, private, CLUSTERS, pullSecretRef={"name": PULL_SECRET}))
        assert stage.until(lambda: resolved_condition(stage, PRIVATE).get("status") == "False",
                           "the missing pull Secret to be reported") == ""
        told.missing_secret = resolved_condition(stage, PRIVATE)
        control.apply(docker_config_secret(PULL_SECRET, private.host, USER, PASSWORD))
        told.caches["pull secret"] = settle(stage, private, PRIVATE, CLUSTERS)

        # 4. layout Flat, and a ModelDeployment of it: a replica per cluster
        control.apply(oci_cache(FLAT, public, CLUSTERS, layout="Flat"))
        told.caches["flat"] = settle(stage, public, FLAT, CLUSTERS, flat=True)
        control.apply(model_deployment(FLAT, FLAT, CLUSTERS))
        assert stage.until(lambda: read.get_path(
            control.xrs.get(("ModelDeployment", act.NAMESPACE, FLAT), {}),
            "status.replicas.ready") == len(CLUSTERS), "the Flat replicas to be Ready") == ""
        told.replicas = engines(stage, FLAT)
    return told


# --- 1. a ModelPack artifact resolves once and lands verified on every cluster ---------------


def test_the_artifact_resolves_to_one_oci_commit_of_its_manifest(story):
    resolved = story.caches["resolved"].status["resolved"]
    assert resolved["commit"] == "oci-" + story.pushed_digest.removeprefix("sha256:")[:40]
    assert resolved["files"] == len(PUSHED)


def test_the_status_names_the_artifact_pinned_by_its_digest(story):
    resolved = story.caches["resolved"].status["resolved"]
    assert resolved["reference"].endswith(f"/{REPOSITORY}@{story.pushed_digest}")


def test_every_clusters_hydration_is_ready_holding_exactly_the_pushed_bytes(story):
    settled = story.caches["resolved"]
    assert settled.phases == {c: "Ready" for c in FIRST}
    assert settled.files == {c: PUSHED for c in FIRST}


def test_the_latched_manifest_says_which_blob_holds_each_file(story):
    manifest = story.caches["resolved"].status["resolved"]["manifest"]
    assert sorted(manifest, key=lambda e: e["path"]) == [
        {"path": path, "size": len(data), "sha256": act.manifest_of({path: data})[0]["sha256"],
         "blob": "sha256:" + act.manifest_of({path: data})[0]["sha256"]}
        for path, data in sorted(PUSHED.items())]


def test_each_cluster_reads_the_model_from_the_registry_once(story):
    settled = story.caches["resolved"]
    assert settled.served == len(FIRST) * sum(map(len, PUSHED.values()))


# --- 2. a tag moved after resolve ----------------------------------------------------------


def test_a_tag_moved_after_resolve_keeps_the_fleet_on_the_resolved_commit(story):
    before, after = story.caches["resolved"], story.caches["after the move"]
    assert after.status["resolved"]["commit"] == before.status["resolved"]["commit"]
    assert after.status["resolved"]["manifestDigest"] == before.status["resolved"]["manifestDigest"]


def test_a_cluster_added_after_the_tag_moved_gets_the_resolved_bytes(story):
    after = story.caches["after the move"]
    assert after.phases == {c: "Ready" for c in CLUSTERS}
    assert after.files == {c: PUSHED for c in CLUSTERS}


def test_a_cluster_added_later_reads_only_its_own_copy_from_the_registry(story):
    assert story.caches["after the move"].served == sum(map(len, PUSHED.values()))


# --- 3. a pull secret ----------------------------------------------------------------------


def test_without_its_pull_secret_the_cache_is_not_resolved_naming_the_field(story):
    condition = story.missing_secret
    assert (condition["status"], condition["reason"]) == ("False", str(reasons.CredentialsSecretMissing))
    assert "spec.source.oci.pullSecretRef" in condition["message"]
    assert PULL_SECRET in condition["message"]


def test_with_its_pull_secret_an_authenticated_registry_resolves_and_hydrates(story):
    settled = story.caches["pull secret"]
    assert settled.status["resolved"]["commit"] == story.caches["resolved"].status["resolved"]["commit"]
    assert settled.phases == {c: "Ready" for c in CLUSTERS}
    assert settled.files == {c: PUSHED for c in CLUSTERS}


def test_no_status_carries_the_registry_credentials(story):
    said = json.dumps(story.caches["pull secret"].status)
    assert PASSWORD not in said and base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode() not in said


# --- 4. layout Flat ------------------------------------------------------------------------


def test_a_flat_cache_keeps_the_commits_files_in_its_own_directory(story):
    settled = story.caches["flat"]
    assert settled.phases == {c: "Ready" for c in CLUSTERS}
    assert settled.files == {c: MOVED_TO for c in CLUSTERS}


def test_flat_replicas_load_the_commits_directory_holding_the_models_files(story):
    commit = story.caches["flat"].status["resolved"]["commit"]
    assert sorted(story.replicas) == list(CLUSTERS)
    for engine in story.replicas.values():
        assert engine.env["FLEETCACHE_MODEL"] == flat_commit_path(agent_job.CACHE_MOUNT_PATH, commit)
        assert engine.env["FLEETCACHE_MODEL_REVISION"] == commit
        assert engine.files == MOVED_TO
