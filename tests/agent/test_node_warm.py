"""`node-warm`: a node's copy comes from the cluster volume, every byte hashed, node-ready.json last."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetcache.agent import node_warm
from fleetcache.agent.node_warm import KeyedSink, NodeRecorder, Warm
from fleetcache.manifest import SHA256, Entry, manifest_digest
from tests.agent.conftest import AGENT, run_agent
from tests.agent.node_support import (
    COMMIT,
    REPO,
    flip_byte,
    make_manifest_only,
    make_volume,
    model_files,
    node_snapshot,
    published_blobs,
    status,
    visible_bytes,
    volume_blob,
)
from tests.agent.node_support import node_warm as warm_cmd
from tests.agent.test_resolve import RecordingCoreApi
from tests.support.sinks import ListSink

MARKER = Path(".fleetcache/node-ready.json")


def warmed(tmp_path, files=None, *extra):
    files = files or model_files()
    digest = make_volume(tmp_path / "vol", files)
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--status-file", str(tmp_path / "st.json"),
                      "--once", *extra)
    return files, digest, result


def start(tmp_path, digest, *extra, env=None):
    return subprocess.Popen(
        [AGENT, "node-warm", "--source", str(tmp_path / "vol"), "--dest", str(tmp_path / "node"), "--repo", REPO,
         "--commit", COMMIT, "--manifest-digest", digest, "--node", "node-a",
         "--status-file", str(tmp_path / "st.json"), *extra],
        env={**os.environ, "FLEETCACHE_NODE_STATUS_INTERVAL": "0", "FLEETCACHE_NODE_RECHECK_SECONDS": "0.2",
             "FLEETCACHE_RETRY_BASE_DELAY": "0.01", **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def phase(tmp_path):
    try:
        return status(tmp_path / "st.json")["phase"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


def test_the_node_copy_holds_exactly_the_volume_bytes_in_the_hf_cache_layout(tmp_path):
    files, digest, result = warmed(tmp_path)
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node") == files
    assert json.loads((tmp_path / "node" / MARKER).read_text()) == {
        "repo": REPO, "commit": COMMIT, "manifestDigest": digest}
    assert (tmp_path / "node/hub/models--acme--tiny/refs/main").read_text() == COMMIT


def test_the_ready_record_carries_the_bytes_and_the_free_space(tmp_path):
    files, _, result = warmed(tmp_path)
    record = status(tmp_path / "st.json")
    total = sum(len(b) for b in files.values())
    assert record["phase"] == "Ready" and record["commit"] == COMMIT
    assert record["bytesDone"] == record["bytesTotal"] == total
    assert record["freeBytes"] > 0 and record["reason"] is None
    assert set(record) == set(node_warm.NODE_FIELDS)
    assert result.json == record


def test_a_joining_node_warms_from_the_volume_with_no_network_at_all(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    no_network = ("import sys\n"
                  "def hook(event, args):\n"
                  "    if event in ('socket.__new__', 'socket.connect', 'socket.getaddrinfo', 'socket.bind'):\n"
                  "        raise RuntimeError('network used: ' + event)\n"
                  "sys.addaudithook(hook)\n"
                  "from fleetcache.agent.cli import main\n"
                  "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run(
        [sys.executable, "-c", no_network, "node-warm", "--source", str(tmp_path / "vol"), "--dest",
         str(tmp_path / "node"), "--repo", REPO, "--commit", COMMIT, "--manifest-digest", digest, "--node", "node-a",
         "--once"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert visible_bytes(tmp_path / "node") == files


def test_a_corrupt_volume_blob_never_reaches_the_node(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    flip_byte(volume_blob(tmp_path / "vol", files, "model-00001.safetensors"))
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--status-file", str(tmp_path / "st.json"), "--once")
    assert result.code == 12 and "DigestMismatch" in result.stderr
    assert not (tmp_path / "node" / MARKER).exists()
    bad = hashlib.sha256(files["model-00001.safetensors"]).hexdigest()
    assert bad not in [p.name for p in published_blobs(tmp_path / "node")]
    assert not (node_snapshot(tmp_path / "node") / "model-00001.safetensors").exists()
    for path, data in visible_bytes(tmp_path / "node").items():
        assert data == files[path]
    record = status(tmp_path / "st.json")
    assert record["phase"] == "Failed" and record["reason"] == "DigestMismatch"
    assert "model-00001.safetensors" in record["message"] and len(record["message"]) <= 120


def test_a_volume_file_of_the_wrong_size_is_refused_before_copying(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    with open(volume_blob(tmp_path / "vol", files, "model-00000.safetensors"), "ab") as f:
        f.write(b"x")
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 12 and "has 1048577 bytes" in result.stderr
    assert not (tmp_path / "node" / MARKER).exists()


def test_a_manifest_digest_other_than_the_volumes_is_refused(tmp_path):
    make_volume(tmp_path / "vol", model_files())
    other = hashlib.sha256(b"another selection").hexdigest()
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", other, "--once")
    assert result.code == 12 and f"not --manifest-digest {other[:12]}" in result.stderr
    assert not (tmp_path / "node" / "hub").exists()


def test_a_volume_manifest_edited_after_resolve_is_refused(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    manifest = next((tmp_path / "vol/.fleetcache/models--acme--tiny/manifests").rglob("*.json"))
    content = json.loads(manifest.read_text())
    content["files"][0]["size"] += 1
    manifest.write_text(json.dumps(content))
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 12 and "recomputes to" in result.stderr


def test_a_volume_without_the_commit_yet_exits_11_with_once(tmp_path):
    (tmp_path / "vol").mkdir()
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", "a" * 64, "--once")
    assert result.code == 11 and "holds no completed fetch" in result.stderr


def test_a_warmer_started_before_the_volume_is_hydrated_waits_then_warms(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "staging", files)
    (tmp_path / "vol").mkdir()
    proc = start(tmp_path, digest, "--ready-file", str(tmp_path / "ready"))
    try:
        wait_for(lambda: phase(tmp_path) == "Waiting")
        assert "holds no completed fetch" in status(tmp_path / "st.json")["message"]
        (tmp_path / "vol").rmdir()
        (tmp_path / "staging").rename(tmp_path / "vol")
        wait_for(lambda: (tmp_path / "ready").exists())
        assert visible_bytes(tmp_path / "node") == files
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_warm_rerun_reads_nothing_from_the_volume_and_takes_no_slot(tmp_path):
    import fcntl

    files, digest, _ = warmed(tmp_path)
    flip_byte(volume_blob(tmp_path / "vol", files, "model-00000.safetensors"))  # a read would fail the digest
    (tmp_path / "slots").mkdir()
    with open(tmp_path / "slots/slot-0", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the only slot is busy: taking one would wait
        result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--slots-dir", str(tmp_path / "slots"),
                          "--once", timeout=30)
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node") == files


def test_a_node_copy_changed_on_disk_is_rehashed_and_copied_again(tmp_path):
    files, digest, _ = warmed(tmp_path)
    flip_byte(node_snapshot(tmp_path / "node") / "model-00000.safetensors")
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 0 and visible_bytes(tmp_path / "node") == files


def test_a_copy_deleted_underneath_is_warmed_again_at_the_next_recheck(tmp_path):
    import shutil

    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    proc = start(tmp_path, digest, "--ready-file", str(tmp_path / "ready"))
    try:
        wait_for(lambda: (tmp_path / "ready").exists())
        shutil.rmtree(tmp_path / "node" / "hub")
        wait_for(lambda: visible_bytes(tmp_path / "node") == files and (tmp_path / "ready").exists())
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_sigterm_while_ready_exits_143_and_leaves_the_ready_record(tmp_path):
    digest = make_volume(tmp_path / "vol", model_files())
    proc = start(tmp_path, digest, "--ready-file", str(tmp_path / "ready"))
    wait_for(lambda: (tmp_path / "ready").exists())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert status(tmp_path / "st.json")["phase"] == "Ready"


def test_sigterm_while_waiting_for_a_slot_records_interrupted_and_exits_143(tmp_path):
    import fcntl

    digest = make_volume(tmp_path / "vol", model_files())
    (tmp_path / "slots").mkdir()
    with open(tmp_path / "slots/slot-0", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = start(tmp_path, digest, "--slots-dir", str(tmp_path / "slots"))
        wait_for(lambda: phase(tmp_path) == "Waiting")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    record = status(tmp_path / "st.json")
    assert record["phase"] == "Failed" and record["reason"] == "Interrupted"
    assert not (tmp_path / "node" / MARKER).exists()


def big_files(count=3, size=20 << 20):
    return {f"model-{i:05d}.safetensors": (hashlib.sha256(b"%d" % i).digest() * (size // 32)) for i in range(count)}


def test_kill_9_mid_copy_then_rerun_gives_a_correct_copy(tmp_path):
    files = big_files()
    digest = make_volume(tmp_path / "vol", files)
    killed = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once",
                      env={node_warm.KILL_AFTER_ENV: "4"})
    assert killed.code == -9
    assert not (tmp_path / "node" / MARKER).exists()
    for blob in published_blobs(tmp_path / "node"):  # whatever is visible is verified
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node") == files


def test_a_rerun_after_a_kill_resumes_the_prefix_already_on_the_node(tmp_path):
    files = big_files(count=1)
    digest = make_volume(tmp_path / "vol", files)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once",
                    env={node_warm.KILL_AFTER_ENV: "1"}).code == -9
    # The first 8 MiB are on the node; change them on the volume: only a rerun that re-read them could notice.
    flip_byte(volume_blob(tmp_path / "vol", files, "model-00000.safetensors"), offset=0)
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node") == files


def test_a_node_path_on_the_root_filesystem_fails_22_node_cache_not_dedicated(tmp_path):
    digest = make_volume(tmp_path / "vol", model_files())
    (tmp_path / "node/.fleetcache").mkdir(parents=True)
    (tmp_path / "node/.fleetcache/node-check.json").write_text(
        json.dumps({"dedicated": False, "sizeBytes": 100, "freeBytes": 50}))
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--status-file", str(tmp_path / "st.json"), "--once")
    assert result.code == 22
    assert status(tmp_path / "st.json")["reason"] == "NodeCacheNotDedicated"
    assert not (tmp_path / "node" / "hub").exists()


def test_without_once_a_failed_warmer_idles_not_ready_instead_of_exiting(tmp_path):
    digest = make_volume(tmp_path / "vol", model_files())
    (tmp_path / "node/.fleetcache").mkdir(parents=True)
    (tmp_path / "node/.fleetcache/node-check.json").write_text(json.dumps({"dedicated": False}))
    proc = start(tmp_path, digest, "--ready-file", str(tmp_path / "ready"))
    try:
        wait_for(lambda: phase(tmp_path) == "Failed")
        time.sleep(1.0)  # several re-checks
        assert proc.poll() is None and not (tmp_path / "ready").exists()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_insufficient_space_fails_13_with_the_numbers(tmp_path):
    huge = Entry("model.safetensors", 1 << 50, "ab" * 32, SHA256)
    digest = make_manifest_only(tmp_path / "vol", (huge,))
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--status-file", str(tmp_path / "st.json"), "--once")
    assert result.code == 13
    record = status(tmp_path / "st.json")
    assert record["reason"] == "InsufficientCapacity" and f"{1 << 50} bytes still to copy" in record["message"]
    assert 0 < record["freeBytes"] < 1 << 50 and f"but {record['freeBytes']} free" in record["message"]


class Sleeps:
    """run()'s sleep: counts re-checks and stops the loop after `limit`."""

    def __init__(self, limit, between=None):
        self.count, self.limit, self.between = 0, limit, between

    def __call__(self, seconds):
        self.count += 1
        if self.between:
            self.between(self.count)
        if self.count >= self.limit:
            raise StopIteration


def test_capacity_is_rechecked_while_failed_and_the_copy_starts_once_space_frees(tmp_path, monkeypatch):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    free = {"bytes": 10}
    monkeypatch.setattr(node_warm, "free_bytes", lambda path: free["bytes"])
    sink = ListSink()
    warm = Warm(tmp_path / "vol", tmp_path / "node", REPO, COMMIT, digest, NodeRecorder([sink], COMMIT, 0))
    sleeps = Sleeps(3, between=lambda n: free.update(bytes=1 << 40) if n == 1 else None)
    try:
        node_warm.run(warm, once=False, retries=0, sleep=sleeps)
    except StopIteration:
        pass
    assert [r["phase"] for r in sink.records][:1] == ["Failed"]
    assert sink.records[0]["reason"] == "InsufficientCapacity" and sink.records[0]["freeBytes"] == 10
    assert sink.records[-1]["phase"] == "Ready"
    assert visible_bytes(tmp_path / "node") == files


def test_a_digest_mismatch_is_not_retried_while_idle(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    flip_byte(volume_blob(tmp_path / "vol", files, "config.json"), offset=2)
    sink = ListSink()
    warm = Warm(tmp_path / "vol", tmp_path / "node", REPO, COMMIT, digest, NodeRecorder([sink], COMMIT, 0))
    sleeps = Sleeps(4)
    try:
        node_warm.run(warm, once=False, retries=3, sleep=sleeps)
    except StopIteration:
        pass
    phases = [r["phase"] for r in sink.records]
    assert sleeps.count == 4 and phases.index("Failed") == len(phases) - 1  # idle re-checks copy nothing
    assert sink.records[-1]["reason"] == "DigestMismatch"


def test_each_attempt_is_bounded_by_attempt_timeout_then_retried_then_failed(tmp_path):
    digest = make_volume(tmp_path / "vol", big_files())
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--status-file", str(tmp_path / "st.json"),
                      "--attempt-timeout", "0.000001", "--retries", "1", "--once")
    assert result.code == 17 and "--attempt-timeout" in result.stderr
    assert result.stderr.count("retrying (attempt 2 of 2)") == 1
    assert status(tmp_path / "st.json")["phase"] == "Failed"
    assert not (tmp_path / "node" / MARKER).exists()


def test_the_record_goes_to_the_nodes_key_of_the_status_configmap_only(tmp_path):
    from fleetcache.agent import cli

    digest = make_volume(tmp_path / "vol", model_files())
    api = RecordingCoreApi()
    argv = ["node-warm", "--source", str(tmp_path / "vol"), "--dest", str(tmp_path / "node"), "--repo", REPO,
            "--commit", COMMIT, "--manifest-digest", digest, "--node", "gpu-7",
            "--status-configmap", "ns/c-node-status", "--once"]
    assert cli.main(argv, configmap_api=lambda: api) == 0
    name, namespace, body = api.patches[-1]
    assert (name, namespace, list(body["data"])) == ("c-node-status", "ns", ["gpu-7"])
    assert json.loads(body["data"]["gpu-7"])["phase"] == "Ready"


def test_records_while_copying_are_throttled_to_the_interval():
    clock = [0.0]
    sink = ListSink()
    recorder = NodeRecorder([KeyedSink(sink, "n")], COMMIT, 30.0, clock=lambda: clock[0])
    recorder.phase("Copying", bytesDone=0, bytesTotal=100)
    for _ in range(10):
        recorder.advance(1)
    clock[0] = 31.0
    recorder.advance(1)
    assert [r["n"]["bytesDone"] for r in sink.records] == [0, 11]


def test_an_unchanged_record_is_not_emitted_again():
    sink = ListSink()
    recorder = NodeRecorder([sink], COMMIT, 30.0)
    recorder.phase("Ready", bytesDone=5)
    recorder.phase("Ready", bytesDone=5)
    assert len(sink.records) == 1


def test_node_ready_answers_the_readiness_probe(tmp_path):
    _, digest, _ = warmed(tmp_path)
    dest = str(tmp_path / "node")
    assert run_agent("node-ready", "--dest", dest, "--commit", COMMIT).code == 0
    assert run_agent("node-ready", "--dest", dest, "--commit", COMMIT, "--manifest-digest", digest).code == 0
    assert run_agent("node-ready", "--dest", dest, "--commit", "f" * 40).code == 1
    assert run_agent("node-ready", "--dest", dest, "--commit", COMMIT, "--manifest-digest", "0" * 64).code == 1


def test_node_ready_is_false_once_the_snapshot_is_gone(tmp_path):
    import shutil

    warmed(tmp_path)
    shutil.rmtree(node_snapshot(tmp_path / "node"))
    assert run_agent("node-ready", "--dest", str(tmp_path / "node"), "--commit", COMMIT).code == 1


def test_bad_flags_exit_15_naming_the_flag(tmp_path):
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", "not-a-digest", "--once")
    assert result.code == 15 and "--manifest-digest" in result.stderr


def test_warmers_of_several_nodes_share_the_status_file_each_under_its_own_key(tmp_path):
    digest = make_volume(tmp_path / "vol", model_files())
    for node in ("node-a", "node-b"):
        assert warm_cmd(tmp_path / "vol", tmp_path / node, digest, "--status-file", str(tmp_path / "st.json"),
                        "--once", node=node).code == 0
    records = json.loads((tmp_path / "st.json").read_text())
    assert sorted(records) == ["node-a", "node-b"] and {r["phase"] for r in records.values()} == {"Ready"}


def test_a_volume_written_by_fetch_warms_a_node_the_hub_never_hears_from(hub, tiny, tmp_path):
    from huggingface_hub import snapshot_download

    from tests.agent.conftest import REPO as HUB_REPO
    from tests.agent.conftest import expected_bytes, fetch_args

    fetched = run_agent(*fetch_args(hub, tmp_path / "vol"))
    assert fetched.code == 0, fetched.stderr
    hub.reset_records()
    result = run_agent("node-warm", "--source", str(tmp_path / "vol"), "--dest", str(tmp_path / "node"), "--repo",
                       HUB_REPO, "--commit", tiny, "--manifest-digest", fetched.json["manifestDigest"], "--node",
                       "node-a", "--once")
    assert result.code == 0, result.stderr
    assert hub.requests() == []
    folder = Path(snapshot_download(HUB_REPO, revision="main", cache_dir=str(tmp_path / "node/hub"),
                                    local_files_only=True))
    assert folder == tmp_path / "node/hub/models--acme--tiny/snapshots" / tiny
    assert {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == expected_bytes(hub)


def test_idle_rechecks_of_a_ready_copy_write_no_new_record(tmp_path, monkeypatch):
    digest = make_volume(tmp_path / "vol", model_files())
    free = iter(range(1 << 40, 1 << 41, 4096))
    monkeypatch.setattr(node_warm, "free_bytes", lambda path: next(free))  # free space drifts between checks
    sink = ListSink()
    warm = Warm(tmp_path / "vol", tmp_path / "node", REPO, COMMIT, digest, NodeRecorder([sink], COMMIT, 0))
    try:
        node_warm.run(warm, once=False, retries=0, sleep=Sleeps(5))
    except StopIteration:
        pass
    assert [r["phase"] for r in sink.records].count("Ready") == 1 and sink.records[-1]["phase"] == "Ready"


def test_sigterm_mid_copy_records_the_bytes_releases_the_slot_and_exits_143(tmp_path):
    import fcntl

    digest = make_volume(tmp_path / "vol", big_files(count=6, size=32 << 20))
    (tmp_path / "slots").mkdir()
    (tmp_path / "slots/slot-0").touch()
    proc = start(tmp_path, digest, "--slots-dir", str(tmp_path / "slots"))
    wait_for(lambda: phase(tmp_path) == "Copying" and status(tmp_path / "st.json")["bytesDone"] > 0, timeout=60)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    record = status(tmp_path / "st.json")
    assert record["phase"] == "Failed" and record["reason"] == "Interrupted"
    assert record["message"].startswith("interrupted by SIGTERM with ")
    assert f" of {6 * (32 << 20)} bytes" in record["message"]
    assert not (tmp_path / "node" / MARKER).exists()
    with open(tmp_path / "slots/slot-0") as slot:
        fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


class LosingSlots:
    """A slot backend whose first slot is lost at its first renewal (taken over, or deleted when
    maxConcurrentNodes shrank); the second is kept."""

    name = "slot-0"

    def __init__(self):
        self.taken = 0

    def try_take(self):
        self.taken += 1
        return True

    def renew(self):
        return self.taken > 1

    def release(self):
        pass

    def holders(self):
        return []


def test_a_copy_that_loses_its_slot_stops_waits_for_one_and_finishes(tmp_path, monkeypatch):
    from fleetcache.agent import slots

    monkeypatch.setattr(slots, "RENEW_SECONDS", 0.01)
    files = big_files(count=6, size=32 << 20)
    digest = make_volume(tmp_path / "vol", files)
    sink = ListSink()
    backend = LosingSlots()
    warm = Warm(tmp_path / "vol", tmp_path / "node", REPO, COMMIT, digest, NodeRecorder([sink], COMMIT, 0), backend)
    node_warm.run(warm, once=True, retries=0)
    phases = [r["phase"] for r in sink.records]
    assert backend.taken == 2
    assert phases.index("Waiting", phases.index("Copying")) < phases.index("Ready")  # back to waiting in between
    assert visible_bytes(tmp_path / "node") == files


NEXT = "d00d" + "0" * 36


def test_with_keep_the_older_commits_are_pruned_once_the_new_one_is_ready(tmp_path):
    old_files, new_files = model_files(), {**model_files(), "model-00001.safetensors": b"retrained" * 1000}
    old_digest = make_volume(tmp_path / "vol", old_files)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", old_digest, "--once").code == 0
    new_digest = make_volume(tmp_path / "vol", new_files, commit=NEXT)
    third = "e" * 40
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", new_digest, "--keep", third, "--once", commit=NEXT)
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node", NEXT) == new_files
    assert not node_snapshot(tmp_path / "node", COMMIT).exists()
    assert len(published_blobs(tmp_path / "node")) == len(new_files)  # the old shard's blob is gone


def test_a_kept_commit_stays_on_the_node(tmp_path):
    old_files, new_files = model_files(), {**model_files(), "model-00001.safetensors": b"retrained" * 1000}
    old_digest = make_volume(tmp_path / "vol", old_files)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", old_digest, "--once").code == 0
    new_digest = make_volume(tmp_path / "vol", new_files, commit=NEXT)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", new_digest, "--keep", COMMIT, "--once", commit=NEXT).code == 0
    assert visible_bytes(tmp_path / "node", COMMIT) == old_files
    assert visible_bytes(tmp_path / "node", NEXT) == new_files


def test_without_keep_nothing_else_is_removed(tmp_path):
    old_files = model_files()
    old_digest = make_volume(tmp_path / "vol", old_files)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", old_digest, "--once").code == 0
    new_digest = make_volume(tmp_path / "vol", {"config.json": b"{}"}, commit=NEXT)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", new_digest, "--once", commit=NEXT).code == 0
    assert visible_bytes(tmp_path / "node", COMMIT) == old_files


def test_a_restarted_warmer_waits_out_its_killed_predecessors_lease_instead_of_failing(tmp_path):
    files = model_files()
    digest = make_volume(tmp_path / "vol", files)
    (tmp_path / "node/.fleetcache").mkdir(parents=True)
    (tmp_path / "node/.fleetcache/lease.json").write_text(json.dumps(
        {"holder": "warmer-old/1/x", "host": "warmer-old", "pid": 1, "heartbeat": time.time() - 28,
         "ttlSeconds": 30}))
    started = time.monotonic()
    result = warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once")
    assert result.code == 0, result.stderr
    assert time.monotonic() - started >= 1.5 and visible_bytes(tmp_path / "node") == files


def test_a_flat_volume_is_copied_into_the_hf_cache_layout_on_the_node(tmp_path):
    from fleetcache.agent.flat_layouts import FlatLayout
    from fleetcache.agent.plan import Listing
    from tests.agent.node_support import entry_for

    files = model_files()
    flat = FlatLayout(tmp_path / "vol", REPO)
    entries = tuple(sorted((entry_for(p, d) for p, d in files.items()), key=lambda e: e.path))
    for entry in entries:
        (tmp_path / "vol" / entry.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "vol" / entry.path).write_bytes(files[entry.path])
    digest = manifest_digest(entries)
    flat.finish(Listing(REPO, COMMIT, COMMIT, entries), entries, digest)
    assert warm_cmd(tmp_path / "vol", tmp_path / "node", digest, "--once").code == 0
    assert visible_bytes(tmp_path / "node") == files


def existing_volume(tmp_path, files):
    """A volume fleetcache did not write (spec.source.volume): files at their paths, and the pinned
    manifest of contract §D as the hydration mounts it."""
    for path, data in files.items():
        (tmp_path / "claim/models" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "claim/models" / path).write_bytes(data)
    manifest = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(files.items())]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return manifest_digest(tuple(Entry(m["path"], m["size"], m["sha256"], SHA256) for m in manifest))


VOL_COMMIT = "vol-" + "1" * 40


def test_an_existing_volume_is_warmed_from_its_pinned_manifest_file(tmp_path):
    files = model_files()
    digest = existing_volume(tmp_path, files)
    result = run_agent("node-warm", "--source", str(tmp_path / "claim/models"), "--dest", str(tmp_path / "node"),
                       "--repo", REPO, "--commit", VOL_COMMIT, "--manifest-digest", digest, "--node", "node-a",
                       "--manifest-file", str(tmp_path / "manifest.json"), "--once")
    assert result.code == 0, result.stderr
    assert visible_bytes(tmp_path / "node", VOL_COMMIT) == files


def test_an_existing_volume_file_changed_since_its_manifest_never_reaches_the_node(tmp_path):
    files = model_files()
    digest = existing_volume(tmp_path, files)
    flip_byte(tmp_path / "claim/models/model-00000.safetensors")
    result = run_agent("node-warm", "--source", str(tmp_path / "claim/models"), "--dest", str(tmp_path / "node"),
                       "--repo", REPO, "--commit", VOL_COMMIT, "--manifest-digest", digest, "--node", "node-a",
                       "--manifest-file", str(tmp_path / "manifest.json"), "--once")
    assert result.code == 12
    assert not (tmp_path / "node" / MARKER).exists()
    assert "model-00000.safetensors" not in visible_bytes(tmp_path / "node", VOL_COMMIT)


def test_an_existing_volume_whose_files_and_manifest_were_replaced_since_resolve_never_reaches_the_node(tmp_path):
    files = model_files()
    pinned = existing_volume(tmp_path, files)
    replaced = {**files, "model-00000.safetensors": b"r" * len(files["model-00000.safetensors"])}
    existing_volume(tmp_path, replaced)  # shard and manifest.json agree with each other, not with the pin
    result = run_agent("node-warm", "--source", str(tmp_path / "claim/models"), "--dest", str(tmp_path / "node"),
                       "--repo", REPO, "--commit", VOL_COMMIT, "--manifest-digest", pinned, "--node", "node-a",
                       "--manifest-file", str(tmp_path / "manifest.json"), "--once")
    assert result.code == 12, result.stderr
    assert f"not --manifest-digest {pinned[:12]}" in result.stderr
    assert not (tmp_path / "node" / MARKER).exists()
    assert visible_bytes(tmp_path / "node", VOL_COMMIT) == {}
