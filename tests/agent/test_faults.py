"""Every hub fault ends in success after retries or in the right exit code, never in a corrupt file."""

from __future__ import annotations

import json
import socket
import time

import pytest
import urllib3

from fleetcache.agent.hub import QUICK_ATTEMPTS, describe
from fleetcache.devtools.testhub import Fault, PatternContent
from tests.agent.conftest import REPO, expected_bytes, fetch_args, published_files_verify, run_agent, snapshot_dir

SHARD = "model-00001-of-00002.safetensors"


def fetch_with(hub, tmp_path, *faults: Fault, extra=()):
    for fault in faults:
        hub.inject(fault)
    progress = tmp_path / "progress.json"
    termination = tmp_path / "termination-log"
    termination.touch()
    result = run_agent(*fetch_args(hub, tmp_path / "dest", "--progress-file", str(progress),
                                   "--termination-log", str(termination), *extra))
    return result, json.loads(progress.read_text()), termination.read_text()


def assert_complete_and_identical(hub, tmp_path, commit):
    for path, data in expected_bytes(hub).items():
        assert (snapshot_dir(tmp_path / "dest", commit) / path).read_bytes() == data


RECOVERABLE = {
    "reset mid-body on the CDN": Fault("reset", host="cdn", after_bytes=100_000, times=2),
    "reset mid-body on a git file": Fault("reset", path="*tokenizer.json", after_bytes=1000),
    "truncated body": Fault("truncate", host="cdn", after_bytes=500_000, times=2),
    "one corrupted byte": Fault("corrupt", host="cdn", offset=1234, times=1),
    "503 burst on the listing": Fault("status", path="/api/*", status=503, times=3),
    "503 burst on resolve": Fault("status", path="*/resolve/*", status=503, times=4),
    "502 on the CDN": Fault("status", host="cdn", status=502, times=2),
    "slow stream": Fault("slow", host="cdn", rate=2_000_000, times=None),
}


@pytest.mark.parametrize("fault", RECOVERABLE.values(), ids=RECOVERABLE.keys())
def test_transient_faults_end_in_success_with_verified_files(hub, tiny, tmp_path, fault):
    result, record, _ = fetch_with(hub, tmp_path, fault)
    assert result.code == 0, result.stderr
    assert record["phase"] == "Ready"
    assert_complete_and_identical(hub, tmp_path, tiny)
    assert fault.times in (0, None)  # the fault really fired


def test_a_corrupted_file_is_refetched_and_only_then_published(hub, tiny, tmp_path):
    result, _, _ = fetch_with(hub, tmp_path, Fault("corrupt", host="cdn", offset=10, times=3))
    assert result.code == 0
    assert result.stderr.count("digest mismatch") == 3
    assert_complete_and_identical(hub, tmp_path, tiny)


def test_persistent_corruption_exits_12_after_three_retries_and_publishes_nothing_bad(hub, tiny, tmp_path):
    shard = hub.repos[REPO].commits[tiny][SHARD]
    result, record, termination = fetch_with(hub, tmp_path, Fault("corrupt", path=f"/lfs/{shard.sha256}",
                                                                  host="cdn", offset=7, times=None))
    assert result.code == 12
    assert result.stderr.count("digest mismatch on attempt") == 4  # the first try and 3 retries
    assert record["phase"] == "Failed" and record["reason"] == "DigestMismatch"
    assert "did not match" in record["message"] and "Check the mirror" in record["message"]
    assert json.loads(termination)["reason"] == "DigestMismatch"
    visible = published_files_verify(tmp_path / "dest", hub)
    assert not any(p.endswith(SHARD) for p in visible)


def test_a_corrupted_git_file_is_caught_by_its_blob_sha1(hub, tiny, tmp_path):
    result, record, _ = fetch_with(hub, tmp_path, Fault("corrupt", path="*config.json", offset=3, times=None))
    assert result.code == 12 and "config.json" in record["message"]
    published_files_verify(tmp_path / "dest", hub)


def test_429_honours_retry_after_then_succeeds(hub, tiny, tmp_path):
    start = time.monotonic()
    result, _, _ = fetch_with(hub, tmp_path, Fault("status", path="/api/*", status=429, retry_after="1", times=1))
    assert result.code == 0 and time.monotonic() - start >= 1.0


def test_persistent_429_exits_18(hub, tiny, tmp_path):
    result, record, termination = fetch_with(hub, tmp_path, Fault("status", status=429, retry_after="0",
                                                                  times=None))
    assert result.code == 18 and record["reason"] == "RateLimited"
    assert json.loads(termination)["reason"] == "RateLimited"


def test_persistent_503_exits_17_after_backoff(hub, tiny, tmp_path):
    result, record, _ = fetch_with(hub, tmp_path, Fault("status", host="cdn", status=503, times=None))
    assert result.code == 17 and record["reason"] == "SourceUnreachable"
    assert result.stderr.count("retrying") >= 5
    published_files_verify(tmp_path / "dest", hub)


def test_persistent_resets_exit_17(hub, tiny, tmp_path):
    result, record, _ = fetch_with(hub, tmp_path, Fault("reset", host="cdn", after_bytes=0, times=None))
    assert result.code == 17 and record["phase"] == "Failed"


def test_an_unreachable_endpoint_exits_17(tmp_path):
    result = run_agent("fetch", "--endpoint", "http://127.0.0.1:9", "--repo", REPO, "--dest", str(tmp_path))
    assert result.code == 17 and "SourceUnreachable" in result.stderr


def closed_port() -> int:
    """A port nothing listens on: taken from the system, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_says_refused_naming_the_host_and_port_not_a_timeout():
    port = closed_port()
    result = run_agent("resolve", "--endpoint", f"http://127.0.0.1:{port}", "--repo", REPO)
    failure = result.stderr.splitlines()[-1]
    assert result.code == 17 and f"connection refused by 127.0.0.1:{port}" in failure
    assert "no answer within the timeout" not in failure


def test_a_refused_s3_endpoint_says_refused_too():
    port = closed_port()
    result = run_agent("resolve", "--s3-bucket", "bucket-a", "--s3-endpoint", f"http://127.0.0.1:{port}",
                       env={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"})
    assert result.code == 17 and f"connection refused by 127.0.0.1:{port}" in result.stderr.splitlines()[-1]


def test_a_refused_connection_gets_a_few_quick_retries_then_the_jobs_own():
    result = run_agent("resolve", "--endpoint", f"http://127.0.0.1:{closed_port()}", "--repo", REPO)
    assert result.code == 17 and result.stderr.count("retrying listing") == QUICK_ATTEMPTS - 1


def test_a_name_that_does_not_resolve_says_so():
    failure = urllib3.exceptions.NameResolutionError(
        "hub.invalid", urllib3.connection.HTTPConnection("hub.invalid", 80), socket.gaierror(-2, "unknown"))
    failure.__cause__ = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert describe(failure) == "the name hub.invalid does not resolve (Name or service not known)"


def test_a_416_from_the_cdn_is_retried_with_a_fresh_redirect(hub, tmp_path):
    hub.add_repo(REPO, {"big.safetensors": PatternContent(40 << 20, 2)})
    hub.inject(Fault("status", host="cdn", path="*", status=416, times=1))
    result = run_agent(*fetch_args(hub, tmp_path))
    assert result.code == 0
    published_files_verify(tmp_path, hub)


def test_a_hung_endpoint_is_reported_in_the_progress_record_while_the_agent_retries(hub, tiny, tmp_path,
                                                                                    monkeypatch):
    from fleetcache.agent import cli, progress

    records = []
    monkeypatch.setattr(progress.FileSink, "emit", lambda self, record: records.append(dict(record)))
    monkeypatch.setenv("FLEETCACHE_READ_TIMEOUT", "0.5")
    monkeypatch.setenv("FLEETCACHE_RETRY_BASE_DELAY", "0.01")
    hub.inject(Fault("hang", path="/api/*", seconds=5, times=2))
    assert cli.main(fetch_args(hub, tmp_path / "d", "--progress-file", str(tmp_path / "p.json"))) == 0
    notes = [r["message"] for r in records if r["phase"] == "Resolving" and r["message"]]
    assert len(notes) == 2 and all(n.startswith("retrying listing acme/tiny@main")
                                   and "no answer within the timeout" in n for n in notes)
    assert records[-1]["phase"] == "Ready" and records[-1]["message"] is None


def test_a_hung_cdn_is_noticed_within_the_read_timeout_and_retried(hub, tiny, tmp_path):
    hub.inject(Fault("hang", host="cdn", seconds=60, times=1))
    start = time.monotonic()
    result = run_agent(*fetch_args(hub, tmp_path / "dest"), env={"FLEETCACHE_READ_TIMEOUT": "1"})
    assert result.code == 0 and time.monotonic() - start < 10
    assert "ReadTimeoutError" in result.stderr
    assert_complete_and_identical(hub, tmp_path, tiny)
