"""The OCI source: resolve pins a manifest digest, fetch takes its files through the one engine verified,
and each registry failure ends in its row of the exit-code table (design/oci.md).

Planning is tested without a network; the rest against the CNCF distribution registry on loopback
(tests/support/registry.py, artifacts pushed by hand over its API), and against a small fake where a
test must see or inject what a real registry will not show: the bearer token flow, a CDN redirect,
429 and 503, the ranges asked for."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fleetcache.agent.errors import AgentError
from fleetcache.agent.oci import Manifest, parse_reference, read_registry_config
from fleetcache.agent.oci_source import (
    MODELCAR_ROOT,
    RAW,
    TAR,
    index_child,
    located_manifest,
    manifest_layers,
    member_path,
)
from fleetcache.manifest import SHA256, Entry, manifest_digest
from tests.agent.conftest import AGENT, run_agent
from tests.support.registry import (
    EMPTY_CONFIG,
    PASSWORD,
    USER,
    FakeRegistry,
    descriptor,
    modelpack_config,
    modelpack_layers,
    sha256,
    tar_of,
)

REPOSITORY = "models/tiny"
ENV = {"FLEETCACHE_READ_TIMEOUT": "5"}
TAR_TYPE = "application/vnd.cncf.model.weight.v1.tar"
IMAGE_TAR = "application/vnd.oci.image.layer.v1.tar"


def model_files(seed: int = 7) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {"config.json": b'{"model_type": "llama"}', "model.safetensors": rng.randbytes(700_001),
            "tokenizer/vocab.json": json.dumps(list(range(200))).encode()}


FILES = model_files()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest(layers: list[dict], config_type: str = EMPTY_CONFIG) -> Manifest:
    body = {"schemaVersion": 2, "config": descriptor(config_type, b"{}"), "layers": layers}
    return Manifest("sha256:" + "0" * 64, "application/vnd.oci.image.manifest.v1+json", body)


# -- planning, without a network --------------------------------------------------------------

@pytest.mark.parametrize("value,registry,repository,tag,digest", [
    ("registry.example.com/models/qwen3:v1", "registry.example.com", "models/qwen3", "v1", None),
    ("localhost:5000/qwen@sha256:" + "a" * 64, "localhost:5000", "qwen", None, "sha256:" + "a" * 64),
    ("127.0.0.1:5000/a/b/c:1.0-rc", "127.0.0.1:5000", "a/b/c", "1.0-rc", None),
])
def test_a_reference_names_its_registry_repository_and_tag_or_digest(value, registry, repository, tag, digest):
    ref = parse_reference(value)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)


@pytest.mark.parametrize("value,says", [
    ("registry.example.com/models/qwen3", "neither a tag nor a digest"),
    ("models/qwen3:v1", "registry host"),
    ("registry.example.com/qwen@sha256:abc", "not sha256:<64"),
    ("registry.example.com/Qwen:v1", "malformed repository"),
    ("registry.example.com/qwen:v1@sha256:" + "a" * 64, "names both a tag and a digest"),
    ("registry.example.com/qwen:-v1", "malformed tag"),
    ("-bad.example.com/qwen:v1", "registry host"),
])
def test_a_malformed_reference_is_refused_naming_the_flag_and_the_fix(value, says):
    with pytest.raises(AgentError) as err:
        parse_reference(value)
    assert err.value.reason == "InvalidConfiguration"
    assert err.value.what.startswith("--oci-reference:") and says in err.value.what
    assert "host[:port]/repository:tag" in err.value.what


def test_the_layout_name_of_a_reference_keeps_its_port_without_a_colon():
    assert parse_reference("127.0.0.1:5000/models/tiny:v1").repo == "oci/127.0.0.1_5000/models/tiny"


@pytest.mark.parametrize("flavor", ["cncf", "cnai"])
def test_a_modelpack_raw_layer_is_one_file_at_its_annotated_path(flavor):
    layers = manifest_layers(manifest([d for d, _ in modelpack_layers({"sub/w.bin": b"w"}, flavor)]))
    assert [(layer.kind, layer.path, layer.digest) for layer in layers] == [(RAW, "sub/w.bin", sha256(b"w"))]


def test_a_raw_layer_without_a_path_annotation_is_refused():
    with pytest.raises(AgentError, match="org.cncf.model.filepath"):
        manifest_layers(manifest([descriptor("application/vnd.cncf.model.weight.v1.raw", b"w")]))


def test_a_raw_layer_path_that_leaves_the_model_is_refused():
    layer = descriptor("application/vnd.cncf.model.weight.v1.raw", b"w", {"org.cncf.model.filepath": "../etc/x"})
    with pytest.raises(AgentError) as err:
        manifest_layers(manifest([layer]))
    assert err.value.reason == "InvalidSource"


def test_a_modelpack_tar_layer_holds_files_at_their_member_paths():
    (layer,) = manifest_layers(manifest([descriptor(TAR_TYPE, b"t")]))
    assert (layer.kind, layer.root) == (TAR, "")


def test_a_plain_image_layer_holds_the_model_under_models_as_modelcars_do():
    (layer,) = manifest_layers(manifest([descriptor(IMAGE_TAR, b"t")]))
    assert (layer.kind, layer.root) == (TAR, MODELCAR_ROOT)


@pytest.mark.parametrize("media_type", ["application/vnd.cncf.model.weight.v1.tar+gzip",
                                        "application/vnd.oci.image.layer.v1.tar+gzip",
                                        "application/vnd.docker.image.rootfs.diff.tar.gzip"])
def test_a_compressed_layer_is_refused_since_its_files_cannot_be_read_by_range(media_type):
    with pytest.raises(AgentError, match="compressed"):
        manifest_layers(manifest([descriptor(media_type, b"t")]))


def test_a_layer_of_an_unknown_media_type_is_refused_naming_it():
    with pytest.raises(AgentError, match="application/x-unknown"):
        manifest_layers(manifest([descriptor("application/x-unknown", b"t")]))


@pytest.mark.parametrize("name,root,path", [
    ("models/config.json", MODELCAR_ROOT, "config.json"),
    ("./models/sub/a.bin", MODELCAR_ROOT, "sub/a.bin"),
    ("bin/sh", MODELCAR_ROOT, None),
    ("models/", MODELCAR_ROOT, None),
    ("./weights/a.bin", "", "weights/a.bin"),
])
def test_a_tar_member_path_is_taken_below_its_layer_root(name, root, path):
    assert member_path(name, root) == path


def test_an_index_of_one_manifest_names_that_manifest():
    child = "sha256:" + "b" * 64
    index = Manifest("sha256:" + "c" * 64, "application/vnd.oci.image.index.v1+json",
                     {"manifests": [{"mediaType": "x", "digest": child, "size": 10}]})
    assert index_child(index) == child


def test_an_index_of_several_manifests_is_refused():
    index = Manifest("sha256:" + "c" * 64, "application/vnd.oci.image.index.v1+json",
                     {"manifests": [{"mediaType": "x", "digest": "sha256:" + h * 64, "size": 1} for h in "de"]})
    with pytest.raises(AgentError, match="index of 2 manifests"):
        index_child(index)


def test_a_pinned_manifest_entry_names_its_blob_and_for_a_tar_member_its_range():
    raw = {"path": "w.bin", "size": 1, "sha256": sha(b"w"), "blob": sha256(b"w")}
    member = {"path": "a/t.bin", "size": 3, "sha256": "1" * 64, "blob": "sha256:" + "2" * 64, "offset": 512,
              "blobSize": 2048}
    located = located_manifest([raw, member])
    assert [(i.path, i.digest, i.offset, i.blob_size) for i in located] == \
        [("a/t.bin", "sha256:" + "2" * 64, 512, 2048), ("w.bin", sha256(b"w"), 0, 1)]
    assert [i.row for i in located] == [member, raw]


@pytest.mark.parametrize("locator,says", [
    ({}, "has no blob"),
    ({"blob": "sha256:" + "9" * 64}, "not the file's own digest"),
    ({"blob": "sha256:" + "9" * 64, "offset": 512, "blobSize": 600}, "not a range of 100 bytes inside its blob"),
    ({"blob": "sha256:" + "9" * 64, "offset": -1, "blobSize": 600}, "not a range"),
])
def test_a_pinned_manifest_entry_without_a_usable_locator_is_refused(locator, says):
    with pytest.raises(AgentError) as err:
        located_manifest([{"path": "w.bin", "size": 100, "sha256": "1" * 64, **locator}])
    assert err.value.reason == "InvalidSource" and says in err.value.what


@pytest.mark.parametrize("entry", [
    {"auth": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()},
    {"username": USER, "password": PASSWORD},
])
def test_credentials_come_from_a_docker_config_json(tmp_path, entry):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"https://reg.example.com/v1/": entry}}))
    creds = read_registry_config(str(config), "reg.example.com")
    assert creds is not None and (creds.username, creds.password) == (USER, PASSWORD)


def test_a_docker_config_without_the_registry_means_anonymous_access(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"other.example.com": {"auth": "eDp5"}}}))
    assert read_registry_config(str(config), "reg.example.com") is None


def test_a_docker_config_with_a_malformed_auth_is_refused_naming_the_flag(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"reg.example.com": {"auth": "not base64!"}}}))
    with pytest.raises(AgentError, match=r"--registry-config: auths\['reg.example.com'\].auth"):
        read_registry_config(str(config), "reg.example.com")


# -- against docker-registry on loopback ------------------------------------------------------

def oci(ref: str, *extra: str, config: Path | None = None) -> list[str]:
    return ["--oci-reference", ref, "--plain-http", *(["--registry-config", str(config)] if config else []), *extra]


def resolve(ref: str, *extra: str, config: Path | None = None):
    return run_agent("resolve", *oci(ref, *extra, config=config), env=ENV)


def fetch(ref: str, dest: Path, *extra: str, config: Path | None = None):
    return run_agent("fetch", *oci(ref, "--dest", str(dest), *extra, config=config), env=ENV)


def snapshot(dest: Path, record: dict) -> Path:
    return dest / "hub" / ("models--" + record["repo"].replace("/", "--")) / "snapshots" / record["commit"]


def pinned(record: dict, tmp_path: Path) -> list[str]:
    """The flags a hydration Job passes with the resolve record: its commit, digest and manifest file."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(record["manifest"]))
    return ["--commit", record["commit"], "--manifest-digest", record["manifestDigest"],
            "--manifest-file", str(manifest)]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def docker_config(tmp_path: Path, host: str, password: str = PASSWORD) -> Path:
    config = tmp_path / "dockerconfig.json"
    auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
    config.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return config


def test_resolve_by_tag_and_by_digest_pin_the_same_commit(registry):
    digest = registry.push_modelpack(REPOSITORY, "pin", FILES)
    by_tag = resolve(f"{registry.host}/{REPOSITORY}:pin")
    by_digest = resolve(f"{registry.host}/{REPOSITORY}@{digest}")
    assert by_tag.code == by_digest.code == 0, by_tag.stderr + by_digest.stderr
    assert by_tag.json["commit"] == by_digest.json["commit"] == "oci-" + digest[7:47]
    assert by_tag.json["reference"] == by_digest.json["reference"] == f"{registry.host}/{REPOSITORY}@{digest}"
    assert by_tag.json["manifestDigest"] == by_digest.json["manifestDigest"]


@pytest.mark.parametrize("flavor", ["cncf", "cnai"])
def test_resolve_lists_a_modelpack_artifacts_files_with_their_sha256(registry, flavor):
    registry.push_modelpack(REPOSITORY, flavor, FILES, flavor=flavor)
    result = resolve(f"{registry.host}/{REPOSITORY}:{flavor}")
    assert result.code == 0, result.stderr
    assert result.json["manifest"] == [{"path": p, "size": len(d), "sha256": sha(d), "blob": sha256(d)}
                                       for p, d in sorted(FILES.items())]


def test_resolve_hashes_the_files_of_a_tar_layer_and_records_where_each_is_in_the_blob(registry):
    layer = tar_of(FILES)
    registry.push_image(REPOSITORY, "tar", [(descriptor(TAR_TYPE, layer), layer)], modelpack_config())
    result = resolve(f"{registry.host}/{REPOSITORY}:tar")
    assert result.code == 0, result.stderr
    manifest = result.json["manifest"]
    assert [(i["path"], i["size"], i["sha256"], i["blob"], i["blobSize"]) for i in manifest] == \
        [(p, len(d), sha(d), sha256(layer), len(layer)) for p, d in sorted(FILES.items())]
    assert all(layer[i["offset"]:i["offset"] + i["size"]] == FILES[i["path"]] for i in manifest)


def test_the_manifest_digest_covers_the_files_and_not_where_they_are(registry):
    registry.push_modelpack(REPOSITORY, "digest", FILES)
    record = resolve(f"{registry.host}/{REPOSITORY}:digest").json
    assert record["manifestDigest"] == manifest_digest(
        tuple(Entry(i["path"], i["size"], i["sha256"], SHA256) for i in record["manifest"]))


def test_fetch_writes_a_modelpack_artifact_verified_from_the_pinned_manifest(registry, tmp_path):
    digest = registry.push_modelpack(REPOSITORY, "fetch", FILES)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:fetch").json
    result = fetch(f"{registry.host}/{REPOSITORY}:fetch", tmp_path / "d", *pinned(resolved, tmp_path))
    assert result.code == 0, result.stderr
    assert result.json["phase"] == "Ready" and result.json["commit"] == "oci-" + digest[7:47]
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_fetch_without_the_pinned_manifest_resolves_the_reference_first(registry, tmp_path):
    registry.push_modelpack(REPOSITORY, "by-hand", FILES)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:by-hand").json
    result = fetch(f"{registry.host}/{REPOSITORY}:by-hand", tmp_path / "d")
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_prune_keeps_a_fetched_oci_commit_by_its_repo_and_commit(registry, tmp_path):
    registry.push_modelpack(REPOSITORY, "prune", FILES)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:prune").json
    assert fetch(resolved["reference"], tmp_path / "d").code == 0
    result = run_agent("prune", "--dest", str(tmp_path / "d"), "--repo", resolved["repo"], "--keep", resolved["commit"])
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_fetch_extracts_a_modelcar_images_files_from_its_tar_layers(registry, tmp_path):
    base = tar_of({"bin/sh": b"#!busybox"})
    model = tar_of(FILES, prefix="models/")
    registry.push_image(REPOSITORY, "modelcar", [(descriptor(IMAGE_TAR, base), base),
                                                 (descriptor(IMAGE_TAR, model), model)])
    resolved = resolve(f"{registry.host}/{REPOSITORY}:modelcar").json
    result = fetch(resolved["reference"], tmp_path / "d")
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_a_fetch_of_the_pinned_manifest_keeps_the_resolved_bytes_after_the_tag_moved(registry, tmp_path):
    registry.push_modelpack(REPOSITORY, "moving", FILES)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:moving").json
    registry.push_modelpack(REPOSITORY, "moving", model_files(seed=8))
    assert resolve(f"{registry.host}/{REPOSITORY}:moving").json["commit"] != resolved["commit"]
    result = fetch(f"{registry.host}/{REPOSITORY}:moving", tmp_path / "d", *pinned(resolved, tmp_path))
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_a_fetch_by_the_pinned_digest_keeps_the_old_bytes_after_the_tag_moved(registry, tmp_path):
    registry.push_modelpack(REPOSITORY, "moved", FILES)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:moved").json
    registry.push_modelpack(REPOSITORY, "moved", model_files(seed=8))
    result = fetch(resolved["reference"], tmp_path / "d")
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_a_missing_tag_is_source_not_found(registry):
    result = resolve(f"{registry.host}/{REPOSITORY}:no-such-tag")
    assert result.code == 11, result.stderr
    assert "SourceNotFound" in result.stderr and "spec.source.oci.reference" in result.stderr


def test_a_blob_whose_bytes_do_not_match_its_digest_is_a_digest_mismatch_with_nothing_published(registry, tmp_path):
    files = {"weights.bin": random.Random(3).randbytes(50_000)}
    registry.push_modelpack(REPOSITORY, "corrupt", files)
    resolved = resolve(f"{registry.host}/{REPOSITORY}:corrupt").json
    blob = registry.blob_file(sha256(files["weights.bin"]))
    blob.write_bytes(b"X" * blob.stat().st_size)
    result = fetch(resolved["reference"], tmp_path / "d")
    assert result.code == 12, result.stderr
    assert not snapshot(tmp_path / "d", resolved).exists()
    assert not any(p.is_file() and p.stat().st_size == 50_000 and not p.name.startswith(".")
                   for p in (tmp_path / "d").rglob("*"))


def test_a_private_registry_without_credentials_is_auth_failed(private_registry):
    private_registry.push_modelpack(REPOSITORY, "private", FILES)
    result = resolve(f"{private_registry.host}/{REPOSITORY}:private")
    assert result.code == 10, result.stderr
    assert "none were given" in result.stderr and "pullSecretRef" in result.stderr


def test_a_private_registry_with_wrong_credentials_is_auth_failed(private_registry, tmp_path):
    private_registry.push_modelpack(REPOSITORY, "private", FILES)
    config = docker_config(tmp_path, private_registry.host, password="wrong")
    result = resolve(f"{private_registry.host}/{REPOSITORY}:private", config=config)
    assert result.code == 10, result.stderr
    assert "refused the credentials" in result.stderr


def test_basic_credentials_from_a_docker_config_fetch_from_a_private_registry(private_registry, tmp_path):
    private_registry.push_modelpack(REPOSITORY, "private", FILES)
    config = docker_config(tmp_path, private_registry.host)
    resolved = resolve(f"{private_registry.host}/{REPOSITORY}:private", config=config)
    assert resolved.code == 0, resolved.stderr
    result = fetch(resolved.json["reference"], tmp_path / "d", config=config)
    assert result.code == 0, result.stderr
    assert files_under(snapshot(tmp_path / "d", resolved.json)) == FILES
    assert PASSWORD not in result.stderr + resolved.stderr


# -- against the fake: what a real registry does not show -------------------------------------

@pytest.fixture
def fake():
    with FakeRegistry(REPOSITORY) as running:
        running.add_image("v1", modelpack_layers(FILES), modelpack_config())
        yield running


def test_the_bearer_flow_takes_a_token_from_the_realm_and_sends_it_to_the_registry_only(fake, tmp_path):
    fake.token_users, fake.cdn = {USER: PASSWORD}, True
    config = docker_config(tmp_path, fake.host)
    progress = tmp_path / "progress.json"
    result = fetch(f"{fake.host}/{REPOSITORY}:v1", tmp_path / "d", "--progress-file", str(progress), config=config)
    assert result.code == 0, result.stderr
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert {s.authorization for s in fake.requests("realm")} == {basic}
    assert {s.authorization for s in fake.requests("registry")} <= {None, f"Bearer {fake.token}"}
    assert fake.requests("cdn") and {s.authorization for s in fake.requests("cdn")} == {None}
    assert fake.token not in result.stderr + result.stdout + progress.read_text()


def test_a_fetch_of_the_pinned_manifest_asks_for_no_manifest_and_reads_each_tar_member_once(tmp_path):
    layer = tar_of(FILES)
    with FakeRegistry(REPOSITORY) as fake:
        fake.add_image("v1", [(descriptor(TAR_TYPE, layer), layer)], modelpack_config())
        resolved = resolve(f"{fake.host}/{REPOSITORY}:v1").json
        fake.seen.clear()
        result = fetch(f"{fake.host}/{REPOSITORY}:v1", tmp_path / "d", *pinned(resolved, tmp_path))
        assert result.code == 0, result.stderr
        paths = [s.path for s in fake.requests("registry")]
        assert not [p for p in paths if "/manifests/" in p]
        ranges = sorted(s.range for s in fake.requests("registry") if "/blobs/" in s.path)
        assert ranges == sorted(f"bytes={i['offset']}-{i['offset'] + i['size'] - 1}" for i in resolved["manifest"])
    assert files_under(snapshot(tmp_path / "d", resolved)) == FILES


def test_a_realm_that_refuses_the_credentials_is_auth_failed(fake, tmp_path):
    fake.token_users = {USER: "another"}
    result = resolve(f"{fake.host}/{REPOSITORY}:v1", config=docker_config(tmp_path, fake.host))
    assert result.code == 10, result.stderr


def test_a_429_is_retried_after_the_pause_retry_after_asks_for(fake):
    fake.faults, fake.retry_after = [429], "1"
    began = time.monotonic()
    result = resolve(f"{fake.host}/{REPOSITORY}:v1")
    assert result.code == 0, result.stderr
    assert "retrying" in result.stderr and "in 1.00s" in result.stderr
    assert time.monotonic() - began >= 1.0


@pytest.mark.parametrize("status,code,reason", [(429, 18, "RateLimited"), (503, 17, "SourceUnreachable")])
def test_a_registry_that_keeps_refusing_ends_in_its_row(fake, status, code, reason):
    fake.faults = [status] * 20
    result = resolve(f"{fake.host}/{REPOSITORY}:v1")
    assert result.code == code, result.stderr
    assert reason in result.stderr


def test_a_refused_connection_is_source_unreachable(tmp_path):
    with FakeRegistry(REPOSITORY) as gone:
        host = gone.host
    result = resolve(f"{host}/{REPOSITORY}:v1")
    assert result.code == 17, result.stderr


def bytes_done(progress: Path) -> int:
    return (json.loads(progress.read_text()).get("bytesDone") or 0) if progress.exists() else 0


def test_a_fetch_interrupted_mid_blob_resumes_from_the_bytes_written(tmp_path):
    big = {"weights.bin": random.Random(5).randbytes(8 << 20)}
    with FakeRegistry(REPOSITORY) as fake:
        fake.add_image("v1", modelpack_layers(big), modelpack_config())
        progress = tmp_path / "progress.json"
        args = oci(f"{fake.host}/{REPOSITORY}:v1", "--dest", str(tmp_path / "d"), "--progress-file", str(progress),
                   "--termination-log", str(tmp_path / "termination"), "--bandwidth", "2Mi")
        agent = subprocess.Popen([AGENT, "fetch", *args], env={**os.environ, **ENV}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and bytes_done(progress) < 1 << 20:
            time.sleep(0.05)
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=30)
        assert 0 < json.loads(progress.read_text())["bytesDone"] < 8 << 20
        fake.seen.clear()
        result = fetch(f"{fake.host}/{REPOSITORY}:v1", tmp_path / "d")
        assert result.code == 0, result.stderr
        # one range, from the bytes on disk (the progress record may lag behind them) to the end
        [blob_range] = [s.range for s in fake.requests("registry") if "/blobs/" in s.path]
        start, end = map(int, blob_range.removeprefix("bytes=").split("-"))
        assert 0 < start < 8 << 20 and end == (8 << 20) - 1
    resolved = {"repo": f"oci/{fake.host.replace(':', '_')}/{REPOSITORY}", "commit": result.json["commit"]}
    assert files_under(snapshot(tmp_path / "d", resolved)) == big


# -- the flags --------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,flag", [
    (["--repo", "acme/tiny"], "--repo"),
    (["--s3-bucket", "models"], "--s3-bucket"),
])
def test_an_oci_reference_beside_another_source_is_refused_naming_the_flag(tmp_path, extra, flag):
    result = run_agent("fetch", "--oci-reference", "reg.example.com/m:v1", "--dest", str(tmp_path / "d"), *extra)
    assert result.code == 15
    assert f"{flag}: not with --oci-reference" in result.stderr


@pytest.mark.parametrize("extra,flag", [(["--registry-config", "x.json"], "--registry-config"),
                                        (["--plain-http"], "--plain-http")])
def test_registry_flags_without_an_oci_reference_are_refused(extra, flag):
    result = run_agent("resolve", "--repo", "acme/tiny", *extra)
    assert result.code == 15
    assert f"{flag}: only with --oci-reference" in result.stderr


def test_an_oci_commit_without_the_pinned_manifest_is_refused(tmp_path):
    result = run_agent("fetch", "--oci-reference", "reg.example.com/m:v1", "--dest", str(tmp_path / "d"),
                       "--commit", "oci-" + "1" * 40)
    assert result.code == 15
    assert "--commit: only with --manifest-file or --manifest-configmap" in result.stderr


def test_a_pinned_oci_fetch_needs_an_oci_commit(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("[]")
    result = run_agent("fetch", "--oci-reference", "reg.example.com/m:v1", "--dest", str(tmp_path / "d"),
                       "--commit", "s3-" + "1" * 40, "--manifest-digest", "2" * 64, "--manifest-file", str(manifest))
    assert result.code == 15
    assert "--commit: 's3-" in result.stderr and "not an OCI commit" in result.stderr


def test_a_pinned_manifest_that_is_not_the_digest_given_is_refused_before_any_request(tmp_path):
    entry = {"path": "w.bin", "size": 1, "sha256": sha(b"w"), "blob": sha256(b"w")}
    record = {"commit": "oci-" + "1" * 40, "manifestDigest": "2" * 64, "manifest": [entry]}
    result = fetch("127.0.0.1:9/m:v1", tmp_path / "d", *pinned(record, tmp_path))
    assert result.code == 15
    assert "--manifest-digest" in result.stderr and "another resolve" in result.stderr
    assert not (tmp_path / "d").exists()


def test_a_reference_without_tag_or_digest_is_a_usage_error_naming_the_flag():
    result = run_agent("resolve", "--oci-reference", "reg.example.com/models/tiny")
    assert result.code == 15
    assert "--oci-reference:" in result.stderr and "no tag is assumed" in result.stderr
