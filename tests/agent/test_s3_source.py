"""The S3 source: resolve pins every object once, fetch takes exactly those versions and verifies every byte,
and each S3 failure ends in its row of the exit-code table (a real S3 API on loopback, tests/support/s3.py)."""

from __future__ import annotations

import hashlib
import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from fleetcache.agent.hub import RetryPolicy
from fleetcache.agent.s3 import S3Client, S3Location
from fleetcache.agent.sources import manifest_entries
from fleetcache.manifest import manifest_digest
from tests.agent.conftest import run_agent
from tests.support.s3 import ACCESS_KEY, SECRET_KEY, S3Fault, S3Server

BUCKET = "models"
PREFIX = "tiny"
REPO_DIR = "models--s3--models--tiny"
SHARD = "model-00001-of-00002.safetensors"
ENV = {"AWS_EC2_METADATA_DISABLED": "true", "FLEETCACHE_READ_TIMEOUT": "5"}


def model_files() -> dict[str, bytes]:
    rng = random.Random(12)
    return {
        "config.json": b'{"model_type": "llama", "hidden_size": 64}',
        "tokenizer.json": json.dumps({"version": "1.0", "vocab": list(range(300))}).encode(),
        SHARD: rng.randbytes(1_500_000),
        "model-00002-of-00002.safetensors": rng.randbytes(1_200_003),
        "sub/extra.bin": rng.randbytes(70_001),
    }


FILES = model_files()
SIZE = sum(len(d) for d in FILES.values())


@pytest.fixture
def s3():
    with S3Server() as server:
        yield server


def stock(s3: S3Server, versioned: bool = False, sha256: bool = True, bucket: str = BUCKET) -> None:
    s3.make_bucket(bucket, versioned=versioned)
    for path, data in FILES.items():
        s3.put(bucket, f"{PREFIX}/{path}", data, sha256=sha256)
    s3.put(bucket, "tinyother/config.json", b"{}")  # a sibling prefix is not part of the model


def s3_flags(s3: S3Server, tmp_path, bucket: str = BUCKET, prefix: str = PREFIX, creds=None) -> list[str]:
    creds = creds or s3.credentials_dir(tmp_path / "creds")
    return ["--s3-bucket", bucket, "--s3-prefix", prefix, "--s3-endpoint", s3.endpoint,
            "--credentials-dir", str(creds)]


def resolve(s3, tmp_path, *extra, **flags):
    return run_agent("resolve", *s3_flags(s3, tmp_path, **flags), *extra, env=ENV)


def fetch(s3, tmp_path, resolved: dict, *extra, dest=None, **flags):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(resolved["manifest"]))
    progress = tmp_path / "progress.json"
    termination = tmp_path / "termination-log"
    termination.touch()
    result = run_agent("fetch", *s3_flags(s3, tmp_path, **flags), "--dest", str(dest or tmp_path / "dest"),
                       "--commit", resolved["commit"], "--manifest-digest", resolved["manifestDigest"],
                       "--manifest-file", str(manifest), "--progress-file", str(progress),
                       "--termination-log", str(termination), *extra, env=ENV)
    return result, json.loads(progress.read_text()), termination.read_text()


def snapshot(tmp_path, resolved: dict, dest=None):
    return (dest or tmp_path / "dest") / "hub" / REPO_DIR / "snapshots" / resolved["commit"]


def visible_files(root) -> list[str]:
    """Every file a reader can see (the agent's hidden partials and state excluded)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and ".fleetcache" not in p.parts and not p.name.startswith("."))


MODES = {"versioned, with ChecksumSHA256": (True, True), "versioned, streamed sha256": (True, False),
         "unversioned, with ChecksumSHA256": (False, True), "unversioned, streamed sha256": (False, False)}


@pytest.mark.parametrize("versioned,sha256", MODES.values(), ids=MODES.keys())
def test_resolve_pins_each_object_with_its_sha256_and_version_or_etag(s3, tmp_path, versioned, sha256):
    stock(s3, versioned=versioned, sha256=sha256)
    result = resolve(s3, tmp_path)
    assert result.code == 0, result.stderr
    record = result.json
    manifest = record["manifest"]
    assert [m["path"] for m in manifest] == sorted(FILES)
    assert all(m["sha256"] == hashlib.sha256(FILES[m["path"]]).hexdigest() for m in manifest)
    assert all(m["size"] == len(FILES[m["path"]]) for m in manifest)
    assert all(("versionId" in m) == versioned and ("etag" in m) == (not versioned) for m in manifest)
    assert record["manifestDigest"] == manifest_digest(manifest_entries(manifest))
    assert record["repo"] == "s3/models/tiny" and record["files"] == len(FILES) and record["bytes"] == SIZE
    assert record["commit"].startswith("s3-") and len(record["commit"]) == 43


def test_credentials_that_may_not_read_versioning_pin_by_etag(s3, tmp_path):
    stock(s3, versioned=True)
    s3.inject(S3Fault("auth", key="", method="GET", code="AccessDenied", times=1))  # GetBucketVersioning
    resolved = resolve(s3, tmp_path)
    assert resolved.code == 0, resolved.stderr
    assert all("etag" in m and "versionId" not in m for m in resolved.json["manifest"])
    assert fetch(s3, tmp_path, resolved.json)[0].code == 0


def test_resolve_takes_s3_checksums_instead_of_reading_the_objects(s3, tmp_path):
    stock(s3, sha256=True)
    s3.reset_counts()
    assert resolve(s3, tmp_path).code == 0
    assert s3.bytes_served(BUCKET) == 0


def test_resolve_reads_objects_without_a_checksum_once(s3, tmp_path):
    stock(s3, sha256=False)
    s3.reset_counts()
    assert resolve(s3, tmp_path).code == 0
    assert s3.bytes_served(BUCKET) == SIZE


def test_resolve_gives_the_same_commit_and_digest_twice(s3, tmp_path):
    stock(s3, versioned=True)
    first, second = resolve(s3, tmp_path).json, resolve(s3, tmp_path).json
    assert (first["commit"], first["manifestDigest"]) == (second["commit"], second["manifestDigest"])


def test_resolve_applies_allow_and_ignore_patterns(s3, tmp_path):
    stock(s3)
    result = resolve(s3, tmp_path, "--allow", "*.safetensors", "--allow", "*.json", "--ignore", "tokenizer*")
    assert [m["path"] for m in result.json["manifest"]] == ["config.json", "model-00001-of-00002.safetensors",
                                                             "model-00002-of-00002.safetensors"]


def test_resolve_selecting_nothing_is_refused(s3, tmp_path):
    stock(s3)
    result = resolve(s3, tmp_path, "--allow", "*.gguf")
    assert result.code == 14 and "*.gguf" in result.stderr


def test_resolve_refuses_an_unsafe_key(s3, tmp_path):
    stock(s3)
    s3.put(BUCKET, f"{PREFIX}/a//b.json", b"{}")
    assert resolve(s3, tmp_path).code == 14


def test_resolve_reports_a_compared_commit_missing_as_an_s3_prefix_has_no_history(s3, tmp_path):
    stock(s3)
    result = resolve(s3, tmp_path, "--compare", "s3-" + "1" * 40)
    assert result.json["compared"] == [{"commit": "s3-" + "1" * 40, "bytes": 0, "files": 0, "sharedBytes": 0,
                                        "missing": True}]
    assert resolve(s3, tmp_path, "--compare", "main").code == 15


def test_resolve_writes_the_manifest_into_the_progress_record(s3, tmp_path):
    stock(s3)
    progress = tmp_path / "resolved.json"
    result = resolve(s3, tmp_path, "--progress-file", str(progress))
    record = json.loads(progress.read_text())
    assert record["phase"] == "Resolved" and record["manifest"] == result.json["manifest"]
    assert record["commit"] == result.json["commit"]


@pytest.mark.parametrize("versioned,sha256", MODES.values(), ids=MODES.keys())
def test_fetch_publishes_exactly_the_resolved_bytes_in_the_hf_cache_layout(s3, tmp_path, versioned, sha256):
    stock(s3, versioned=versioned, sha256=sha256)
    resolved = resolve(s3, tmp_path).json
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0, result.stderr
    assert record["phase"] == "Ready" and record["manifestDigest"] == resolved["manifestDigest"]
    assert record["bytesDone"] == record["bytesTotal"] == SIZE
    for path, data in FILES.items():
        assert (snapshot(tmp_path, resolved) / path).read_bytes() == data


def test_fetch_in_the_flat_layout_puts_files_at_their_paths_in_the_commits_directory(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    result, _, _ = fetch(s3, tmp_path, resolved, "--layout", "flat")
    assert result.code == 0, result.stderr
    commit_dir = tmp_path / "dest" / "commits" / resolved["commit"]
    assert visible_files(commit_dir) == sorted(FILES)
    assert all((commit_dir / p).read_bytes() == d for p, d in FILES.items())


def test_a_warm_rerun_reads_no_object_bytes(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    assert fetch(s3, tmp_path, resolved)[0].code == 0
    s3.reset_counts()
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0 and record["phase"] == "Ready"
    assert s3.bytes_served(BUCKET) == 0


def test_fetch_reads_each_byte_once_in_ranged_parts(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.reset_counts()
    assert fetch(s3, tmp_path, resolved)[0].code == 0
    assert s3.bytes_served(BUCKET) == SIZE


def test_fetch_refuses_a_manifest_digest_that_is_not_the_manifests(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    result, record, _ = fetch(s3, tmp_path, {**resolved, "manifestDigest": "0" * 64})
    assert result.code == 15 and "--manifest-digest" in record["message"]


def test_fetch_refuses_a_commit_that_is_not_the_manifests(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    result, record, _ = fetch(s3, tmp_path, {**resolved, "commit": "s3-" + "0" * 40})
    assert result.code == 15 and "--commit" in record["message"]


def test_fetch_reads_the_manifest_from_a_configmap(s3, tmp_path):
    from fleetcache.agent import cli

    stock(s3)
    resolved = resolve(s3, tmp_path).json

    class ConfigMaps:
        def read_namespaced_config_map(self, name, namespace):
            assert (name, namespace) == ("tiny-manifest-1", "team-a")
            return type("ConfigMap", (), {"data": {"manifest.json": json.dumps(resolved["manifest"])}})()

    argv = ["fetch", *s3_flags(s3, tmp_path), "--dest", str(tmp_path / "dest"), "--commit", resolved["commit"],
            "--manifest-digest", resolved["manifestDigest"], "--manifest-configmap", "team-a/tiny-manifest-1"]
    assert cli.main(argv, configmap_api=ConfigMaps) == 0
    assert (snapshot(tmp_path, resolved) / SHARD).read_bytes() == FILES[SHARD]


def test_verify_and_prune_accept_the_s3_repo_name_and_commit(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    assert fetch(s3, tmp_path, resolved)[0].code == 0
    verified = run_agent("verify", "--dest", str(tmp_path / "dest"), "--repo", resolved["repo"])
    assert verified.code == 0, verified.stderr
    assert (verified.json["commit"], verified.json["manifestDigest"]) == (resolved["commit"],
                                                                         resolved["manifestDigest"])
    pruned = run_agent("prune", "--dest", str(tmp_path / "dest"), "--repo", resolved["repo"],
                       "--keep", resolved["commit"])
    assert pruned.code == 0 and pruned.json["freedBytes"] == 0


# -- faults ------------------------------------------------------------------------------------

def test_a_slowdown_burst_is_retried_and_the_fetch_succeeds(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    fault = s3.inject(S3Fault("slowdown", key=f"{PREFIX}/*", method="GET", times=3))
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0 and record["phase"] == "Ready" and fault.times == 0


def test_persistent_slowdown_exits_rate_limited(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.inject(S3Fault("slowdown", key=f"{PREFIX}/*", method="GET", times=None))
    result, record, termination = fetch(s3, tmp_path, resolved)
    assert result.code == 18 and record["reason"] == "RateLimited" and "SlowDown" in record["message"]
    assert json.loads(termination)["reason"] == "RateLimited"


def test_slowdown_on_the_listing_exits_rate_limited(s3, tmp_path):
    stock(s3)
    s3.inject(S3Fault("slowdown", key="", times=None))
    assert resolve(s3, tmp_path).code == 18


def test_resets_mid_body_are_retried_and_the_bytes_are_identical(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    fault = s3.inject(S3Fault("reset", key=f"{PREFIX}/{SHARD}", method="GET", after_bytes=200_000, times=2))
    result, _, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0 and fault.times == 0
    assert all((snapshot(tmp_path, resolved) / p).read_bytes() == d for p, d in FILES.items())


def test_persistent_resets_exit_source_unreachable(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.inject(S3Fault("reset", key=f"{PREFIX}/{SHARD}", method="GET", after_bytes=1000, times=None))
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 17 and record["reason"] == "SourceUnreachable"
    assert SHARD not in visible_files(tmp_path / "dest")


def test_an_interrupted_fetch_resumes_with_the_bytes_it_kept(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.reset_counts()
    s3.inject(S3Fault("reset", key=f"{PREFIX}/{SHARD}", method="GET", after_bytes=200_000, times=6))
    failed, interrupted, _ = fetch(s3, tmp_path, resolved)
    assert failed.code == 17 and interrupted["bytesDone"] > SIZE - len(FILES[SHARD])  # part of the shard kept
    s3.reset_counts()
    result, _, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0 and (snapshot(tmp_path, resolved) / SHARD).read_bytes() == FILES[SHARD]
    assert s3.bytes_served(BUCKET) == SIZE - interrupted["bytesDone"]  # only what the journal did not keep


def test_wrong_credentials_exit_auth_failed(s3, tmp_path):
    stock(s3)
    creds = s3.credentials_dir(tmp_path / "wrong", access_key="AKIANOTTHEKEY0000000")
    result = resolve(s3, tmp_path, creds=creds)
    assert result.code == 10 and "InvalidAccessKeyId" in result.stderr


def test_a_wrong_secret_exits_auth_failed(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.inject(S3Fault("auth", code="SignatureDoesNotMatch", times=None))
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 10 and record["reason"] == "AuthFailed" and "SignatureDoesNotMatch" in record["message"]


def test_a_missing_bucket_exits_source_not_found(s3, tmp_path):
    stock(s3)
    result = resolve(s3, tmp_path, bucket="no-such-models")
    assert result.code == 11 and "NoSuchBucket" in result.stderr


def test_a_pinned_version_deleted_since_resolve_exits_source_not_found(s3, tmp_path):
    stock(s3, versioned=True)
    resolved = resolve(s3, tmp_path).json
    version = next(m["versionId"] for m in resolved["manifest"] if m["path"] == SHARD)
    s3.client.delete_object(Bucket=BUCKET, Key=f"{PREFIX}/{SHARD}", VersionId=version)
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 11 and "NoSuchVersion" in record["message"]


def test_an_object_overwritten_since_resolve_exits_digest_mismatch(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.put(BUCKET, f"{PREFIX}/{SHARD}", b"new weights" * 1000)
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 12 and record["reason"] == "DigestMismatch" and "changed since resolve" in record["message"]
    assert SHARD not in visible_files(tmp_path / "dest")


def test_an_object_overwritten_mid_fetch_exits_digest_mismatch_with_nothing_unverified_visible(s3, tmp_path):
    stock(s3)
    resolved = resolve(s3, tmp_path).json
    s3.inject(S3Fault("overwrite", key=f"{PREFIX}/{SHARD}", method="GET", after_bytes=300_000,
                      data=bytes(len(FILES[SHARD]))))
    result, record, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 12 and record["reason"] == "DigestMismatch"
    visible = visible_files(tmp_path / "dest")
    assert not any(p.endswith(SHARD) for p in visible)
    for path in visible:  # whatever became visible is exactly the resolved bytes
        data = (tmp_path / "dest" / path).read_bytes()
        assert hashlib.sha256(data).hexdigest() in {hashlib.sha256(d).hexdigest() for d in FILES.values()}


def test_a_versioned_object_overwritten_since_resolve_still_fetches_the_pinned_version(s3, tmp_path):
    stock(s3, versioned=True)
    resolved = resolve(s3, tmp_path).json
    s3.put(BUCKET, f"{PREFIX}/{SHARD}", b"new weights" * 1000)
    result, _, _ = fetch(s3, tmp_path, resolved)
    assert result.code == 0
    assert (snapshot(tmp_path, resolved) / SHARD).read_bytes() == FILES[SHARD]


def test_credentials_never_appear_in_output_records_or_files(s3, tmp_path):
    stock(s3)
    resolved_run = resolve(s3, tmp_path, "--progress-file", str(tmp_path / "resolved.json"))
    ok = fetch(s3, tmp_path, resolved_run.json)
    s3.inject(S3Fault("auth", code="SignatureDoesNotMatch", times=None))
    failed = fetch(s3, tmp_path, resolved_run.json, dest=tmp_path / "dest2")
    assert ok[0].code == 0 and failed[0].code == 10
    seen = [resolved_run.stdout, resolved_run.stderr, (tmp_path / "resolved.json").read_text()]
    for result, record, termination in (ok, failed):
        seen += [result.stdout, result.stderr, json.dumps(record), termination]
    seen += [p.read_bytes().decode("latin-1") for d in ("dest", "dest2") for p in (tmp_path / d).rglob("*")
             if p.is_file()]
    for text in seen:
        assert ACCESS_KEY not in text and SECRET_KEY not in text


@pytest.mark.parametrize("versioned", [False, True], ids=["ListObjectsV2", "ListObjectVersions"])
def test_a_listing_longer_than_one_page_is_read_to_the_end(s3, tmp_path, versioned):
    s3.make_bucket(BUCKET, versioned=versioned)
    keys = [f"{PREFIX}/shards/{i:05d}.bin" for i in range(1003)]  # S3 pages hold 1000 keys
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put(BUCKET, key, key.encode()), keys))
    if versioned:
        s3.put(BUCKET, keys[0], b"a newer version")  # an older version must not be listed as well
    client = S3Client(S3Location(BUCKET, PREFIX, endpoint=s3.endpoint,
                                 credentials_dir=str(s3.credentials_dir(tmp_path / "creds"))), RetryPolicy())
    listed = client.list_objects()
    assert [o.key for o in listed] == keys
    assert listed[0].size == len(b"a newer version" if versioned else keys[0].encode())


def test_a_file_larger_than_one_put_is_uploaded_in_parts(s3, tmp_path, monkeypatch):
    monkeypatch.setattr("fleetcache.agent.s3.SINGLE_PUT_LIMIT", 1 << 20)  # stands for S3's 5 GiB
    s3.make_bucket(BUCKET)
    data = random.Random(3).randbytes(9 << 20)  # above boto3's 8 MiB multipart threshold
    (tmp_path / "blob").write_bytes(data)
    client = S3Client(S3Location(BUCKET, endpoint=s3.endpoint,
                                 credentials_dir=str(s3.credentials_dir(tmp_path / "creds"))), RetryPolicy())
    client.put_file("fleetcache/blobs/sha256/x", tmp_path / "blob", hashlib.sha256(data).hexdigest())
    assert s3.get(BUCKET, "fleetcache/blobs/sha256/x") == data
    assert s3.client.head_object(Bucket=BUCKET, Key="fleetcache/blobs/sha256/x")["ETag"].endswith('-2"')
