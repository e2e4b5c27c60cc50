"""The fleet mirror in an OCI registry (design/oci.md, "Publish once"): the publisher pushes the
verified commit once as a ModelPack artifact by digest, readers take every byte from it verified
against the resolved manifest, falling back to the origin per file.

The plan is tested without a network; the rest runs the agent against two CNCF distribution
registries on loopback (tests/support/registry.py): one the origin (an OCI source, pushed by
hand), one the fleet's mirror."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

import pytest

from fleetcache.agent.oci_mirror import (
    DIGEST,
    DOC,
    TITLE,
    WEIGHT,
    WEIGHT_CONFIG,
    Layer,
    media_type,
    plan_artifact,
    read_artifact,
)
from fleetcache.manifest import GIT_SHA1, SHA256, Entry, manifest_digest
from tests.agent.conftest import run_agent
from tests.agent.test_oci import docker_config, files_under, pinned, snapshot
from tests.support.registry import LoopbackRegistry

SOURCE, MIRROR = "models/tiny", "fleet/oci/models/tiny"
USER, PASSWORD = "pusher", "push-Pa55word"
ENV = {"FLEETCACHE_READ_TIMEOUT": "5"}
FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": random.Random(3).randbytes(300_001),
         "tokenizer/vocab.json": json.dumps(list(range(100))).encode()}
SHARD = "model.safetensors"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def layers(files: dict[str, bytes]) -> list[Layer]:
    return [Layer(Entry(p, len(d), sha(d), SHA256), "sha256:" + sha(d)) for p, d in files.items()]


# -- the plan, without a network --------------------------------------------------------------

def digest_of(files: dict[str, bytes]) -> str:
    return manifest_digest(tuple(layer.entry for layer in layers(files)))


def test_the_same_commit_plans_the_same_artifact_digest_in_any_order():
    one = plan_artifact("Org/tiny", "c" * 40, digest_of(FILES), layers(FILES))
    other = plan_artifact("Org/tiny", "c" * 40, digest_of(FILES), list(reversed(layers(FILES))))
    assert one.digest == other.digest and one.manifest == other.manifest


def test_each_file_is_one_raw_modelpack_layer_titled_by_its_path():
    manifest = json.loads(plan_artifact("Org/tiny", "c" * 40, digest_of(FILES), layers(FILES)).manifest)
    assert [(d["annotations"][TITLE], d["digest"], d["size"]) for d in manifest["layers"]] == \
        [(p, "sha256:" + sha(FILES[p]), len(FILES[p])) for p in sorted(FILES)]
    assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"


def test_the_config_records_the_source_the_commit_and_the_manifest_digest():
    artifact = plan_artifact("Org/tiny", "c" * 40, digest_of(FILES), layers(FILES))
    assert json.loads(artifact.config)["fleetcache"] == {"source": "Org/tiny", "commit": "c" * 40,
                                                         "manifestDigest": digest_of(FILES)}


@pytest.mark.parametrize("path,kind", [("model-00001.safetensors", WEIGHT), ("config.json", WEIGHT_CONFIG),
                                       ("README.md", DOC), ("tokenizer/vocab.json", WEIGHT_CONFIG)])
def test_a_files_layer_type_follows_its_name(path, kind):
    assert media_type(path) == kind


def test_a_hub_file_known_by_its_git_sha1_keeps_that_digest_for_readers():
    entry = Entry("config.json", 23, "a" * 40, GIT_SHA1)
    artifact = plan_artifact("Org/tiny", "c" * 40, manifest_digest((entry,)), [Layer(entry, "sha256:" + "b" * 64)])
    descriptor = json.loads(artifact.manifest)["layers"][0]
    assert descriptor["annotations"][DIGEST] == f"{GIT_SHA1}:{'a' * 40}"
    assert read_artifact(json.loads(artifact.manifest), manifest_digest((entry,)))[1] == (entry,)


def test_an_artifact_read_back_gives_each_files_blob_and_the_resolved_entries():
    artifact = plan_artifact("Org/tiny", "c" * 40, digest_of(FILES), layers(FILES))
    blobs, entries, why = read_artifact(json.loads(artifact.manifest), digest_of(FILES))
    assert why == "" and entries == tuple(sorted((layer.entry for layer in layers(FILES)), key=lambda e: e.path))
    assert blobs == {p: "sha256:" + sha(d) for p, d in FILES.items()}


def test_an_artifact_of_other_files_is_refused_by_the_resolved_digest():
    other = {**FILES, "config.json": b"{}"}
    artifact = plan_artifact("Org/tiny", "c" * 40, digest_of(other), layers(other))
    assert read_artifact(json.loads(artifact.manifest), digest_of(FILES))[1] == ()


# -- against docker-registry on loopback ------------------------------------------------------

@pytest.fixture(scope="module")
def origin():
    with LoopbackRegistry() as running:
        running.push_modelpack(SOURCE, "v1", FILES)
        yield running


@pytest.fixture(scope="module")
def resolved(origin) -> dict:
    run = run_agent("resolve", "--oci-reference", f"{origin.host}/{SOURCE}:v1", "--plain-http", env=ENV)
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)


def fetch(origin, resolved: dict, tmp_path: Path, mirror, role: str, *extra: str, dest: str = "dest"):
    run = run_agent("fetch", "--oci-reference", f"{origin.host}/{SOURCE}:v1", "--plain-http",
                    "--dest", str(tmp_path / dest), *pinned(resolved, tmp_path),
                    "--mirror-oci-repository", f"{mirror.host}/{MIRROR}", "--mirror-plain-http",
                    "--mirror-role", role, *extra, env=ENV)
    return run, (json.loads(run.stdout) if run.code == 0 else {})


@pytest.fixture
def mirror():
    with LoopbackRegistry() as running:
        yield running


def test_the_publisher_pushes_the_commit_by_digest_tagged_with_the_manifest_digest(origin, resolved, mirror,
                                                                                     tmp_path):
    run, record = fetch(origin, resolved, tmp_path, mirror, "publisher")
    assert run.code == 0, run.stderr
    digest, body = mirror.manifest(MIRROR, resolved["manifestDigest"])
    assert record["artifact"] == f"{mirror.host}/{MIRROR}@{digest}"
    assert mirror.manifest(MIRROR, digest)[0] == digest
    assert {layer["annotations"][TITLE]: mirror.blob(MIRROR, layer["digest"]) for layer in body["layers"]} == FILES


def test_the_published_artifact_is_an_oci_source_of_the_same_files(origin, resolved, mirror, tmp_path):
    _, record = fetch(origin, resolved, tmp_path, mirror, "publisher")
    again = run_agent("resolve", "--oci-reference", record["artifact"], "--plain-http", env=ENV)
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["manifestDigest"] == resolved["manifestDigest"]


def test_pushing_the_same_commit_again_uploads_nothing(origin, resolved, mirror, tmp_path):
    fetch(origin, resolved, tmp_path, mirror, "publisher")
    uploads, puts = mirror.requests_logged("POST", "/blobs/uploads/"), mirror.requests_logged("PUT", "/manifests/")
    run, _ = fetch(origin, resolved, tmp_path, mirror, "publisher", dest="other")
    assert run.code == 0, run.stderr
    assert mirror.requests_logged("POST", "/blobs/uploads/") == uploads
    assert mirror.requests_logged("PUT", "/manifests/") == puts


def test_a_reader_in_another_process_takes_every_byte_from_the_mirror(origin, resolved, mirror, tmp_path):
    fetch(origin, resolved, tmp_path, mirror, "publisher")
    served = origin.blob_bytes_served()
    run, record = fetch(origin, resolved, tmp_path, mirror, "reader", dest="reader")
    assert run.code == 0, run.stderr
    assert (record["bytesFrom"], record["originBytes"]) == ("Mirror", 0)
    assert record["mirrorBytes"] == sum(map(len, FILES.values()))
    assert origin.blob_bytes_served() == served
    assert files_under(snapshot(tmp_path / "reader", resolved)) == FILES


def test_a_corrupt_mirror_blob_is_taken_from_the_origin_for_that_file_only(origin, resolved, mirror, tmp_path):
    fetch(origin, resolved, tmp_path, mirror, "publisher")
    stored = mirror.blob_file("sha256:" + sha(FILES[SHARD]))
    stored.write_bytes(bytes([FILES[SHARD][0] ^ 0xFF]) + FILES[SHARD][1:])
    run, record = fetch(origin, resolved, tmp_path, mirror, "reader", dest="reader")
    assert run.code == 0, run.stderr
    assert record["originBytes"] == len(FILES[SHARD])
    assert files_under(snapshot(tmp_path / "reader", resolved)) == FILES


def test_a_reader_before_anything_was_published_reads_the_origin(origin, resolved, mirror, tmp_path):
    run, record = fetch(origin, resolved, tmp_path, mirror, "reader", dest="reader")
    assert run.code == 0, run.stderr
    assert (record["bytesFrom"], record["mirrorBytes"]) == ("Origin", 0)


def test_a_reader_with_on_missing_fail_before_anything_was_published_is_mirror_incomplete(origin, resolved,
                                                                                            mirror, tmp_path):
    run, _ = fetch(origin, resolved, tmp_path, mirror, "reader", "--mirror-on-missing", "fail", dest="reader")
    assert run.code == 20, run.stderr


@pytest.fixture
def private_mirror():
    with LoopbackRegistry(users={USER: PASSWORD}) as running:
        yield running


def test_a_push_with_credentials_the_registry_refuses_is_auth_failed_naming_the_push_secret(
        origin, resolved, private_mirror, tmp_path):
    config = docker_config(tmp_path, private_mirror.host, password="read-only-or-wrong")
    run, _ = fetch(origin, resolved, tmp_path, private_mirror, "publisher", "--mirror-registry-config", str(config))
    assert run.code == 10, run.stderr
    assert "spec.distribution.mirror.oci.pushSecretRef" in run.stderr
    assert "read-only-or-wrong" not in run.stderr + run.stdout


def test_a_push_with_the_push_secret_publishes_to_an_authenticated_registry(origin, resolved, private_mirror,
                                                                            tmp_path):
    config = tmp_path / "push.json"
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    config.write_text(json.dumps({"auths": {private_mirror.host: {"auth": auth}}}))
    run, record = fetch(origin, resolved, tmp_path, private_mirror, "publisher", "--mirror-registry-config",
                        str(config))
    assert run.code == 0, run.stderr
    assert record["artifact"].startswith(f"{private_mirror.host}/{MIRROR}@sha256:")
