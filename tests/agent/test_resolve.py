"""`resolve`: the JSON the composer latches, and the Hub's errors mapped to the exit-code table."""

from __future__ import annotations

import hashlib
import json

import pytest

from fleetcache.devtools.testhub import Fault
from fleetcache.exitcodes import BY_CODE
from tests.agent.conftest import REPO, TOKEN, run_agent


def resolve(hub, *extra, repo=REPO):
    return run_agent("resolve", "--endpoint", hub.endpoint, "--repo", repo, *extra)


def test_resolve_prints_repo_revision_commit_files_bytes_and_manifest_digest(hub, tiny):
    result = resolve(hub)
    assert result.code == 0, result.stderr
    files = hub.repos[REPO].commits[tiny]
    lines = sorted(f"{p} {f.content.size} {f.etag}" for p, f in files.items())
    assert result.json == {
        "repo": REPO, "revision": "main", "commit": tiny, "files": len(files),
        "bytes": sum(f.content.size for f in files.values()),
        "manifestDigest": hashlib.sha256("\n".join(lines).encode()).hexdigest(), "compared": [],
    }


def test_resolve_applies_allow_and_ignore(hub, tiny):
    result = resolve(hub, "--allow", "*.json", "--ignore", "tokenizer*")
    assert result.json["files"] == 3


def test_resolve_by_commit_gives_the_same_digest_as_by_branch(hub, tiny):
    assert resolve(hub, "--revision", tiny).json["manifestDigest"] == resolve(hub).json["manifestDigest"]


def test_resolve_writes_a_resolved_record_to_the_progress_file(hub, tiny, tmp_path):
    progress = tmp_path / "resolved.json"
    result = resolve(hub, "--progress-file", str(progress))
    record = json.loads(progress.read_text())
    assert record == {**result.json, "phase": "Resolved", "reason": None, "message": None}


def test_resolve_patches_the_configmap_with_string_values(hub, tiny):
    from fleetcache.agent import cli

    api = RecordingCoreApi()
    argv = ["resolve", "--endpoint", hub.endpoint, "--repo", REPO, "--progress-configmap", "team-a/mc-resolve"]
    assert cli.main(argv, configmap_api=lambda: api) == 0
    name, namespace, body = api.patches[-1]
    assert (name, namespace) == ("mc-resolve", "team-a")
    assert body["data"]["phase"] == "Resolved" and body["data"]["commit"] == tiny
    assert body["data"]["reason"] == "" and body["data"]["files"].isdigit()
    assert all(isinstance(v, str) for v in body["data"].values())


class RecordingCoreApi:
    def __init__(self, fail: bool = False):
        self.patches = []
        self.fail = fail

    def patch_namespaced_config_map(self, name, namespace, body):
        if self.fail:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=403, reason="Forbidden")
        self.patches.append((name, namespace, body))


@pytest.mark.parametrize("case,code", [
    ("missing repo", 11), ("missing revision", 11), ("private without token", 11), ("wrong token", 10),
    ("gated without acceptance", 10), ("private with granted token", 0),
])
def test_hub_errors_map_to_the_exit_code_table(hub, tmp_path, case, code):
    hub.add_repo("acme/private", {"a.json": b"{}"}, private=True)
    hub.add_repo("acme/gated", {"a.json": b"{}"}, gated=True)
    hub.add_token(TOKEN, repos=("acme/private",))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("hf_wrong")
    argv = {
        "missing repo": ["--repo", "acme/nope"],
        "missing revision": ["--repo", "acme/private", "--revision", "v9", "--token-file", str(token)],
        "private without token": ["--repo", "acme/private"],
        "wrong token": ["--repo", "acme/private", "--token-file", str(wrong)],
        "gated without acceptance": ["--repo", "acme/gated", "--token-file", str(token)],
        "private with granted token": ["--repo", "acme/private", "--token-file", str(token)],
    }[case]
    progress = tmp_path / "p.json"
    result = run_agent("resolve", "--endpoint", hub.endpoint, "--progress-file", str(progress), *argv)
    assert result.code == code, result.stderr
    record = json.loads(progress.read_text())
    if code:
        row = BY_CODE[code]
        assert record["phase"] == "Failed" and record["reason"] == row.reason
        assert record["message"].endswith(row.remedy)


def test_not_found_remedy_says_a_private_repo_needs_a_token_secret(hub):
    result = resolve(hub, repo="acme/nope")
    assert result.code == 11 and "tokenSecretRef" in result.stderr


def test_a_malformed_listing_exits_14_and_writes_nothing(hub, tiny, tmp_path):
    hub.set_raw_siblings(REPO, tiny, [{"rfilename": "../../etc/passwd", "size": 1, "blobId": "a" * 40}])
    dest = tmp_path / "dest"
    assert run_agent("fetch", "--endpoint", hub.endpoint, "--repo", REPO, "--dest", str(dest)).code == 14
    assert not dest.exists()


def test_a_listing_without_commit_or_siblings_exits_14(hub, tiny):
    hub.inject(Fault("status", path="/api/*", status=200, times=None))
    assert resolve(hub).code == 14


def test_compare_reports_the_bytes_a_new_commit_shares_with_a_served_one(hub):
    from fleetcache.devtools.testhub import make_model
    old = hub.add_repo(REPO, make_model(3_000_000, shards=2, seed=1))
    new = hub.add_repo(REPO, make_model(3_000_000, shards=2, seed=2))
    result = resolve(hub, "--compare", old)
    small = sum(f.content.size for p, f in hub.repos[REPO].commits[new].items() if not p.endswith(".safetensors"))
    assert result.code == 0, result.stderr
    assert result.json["compared"] == [{"commit": old, "bytes": result.json["bytes"], "files": result.json["files"],
                                        "sharedBytes": small}]


def test_compare_reports_a_commit_the_hub_does_not_know_as_missing(hub, tiny):
    result = resolve(hub, "--compare", "f" * 40)
    assert result.json["compared"] == [{"commit": "f" * 40, "bytes": 0, "files": 0, "sharedBytes": 0,
                                        "missing": True}]


def test_compare_that_is_not_a_commit_exits_15_naming_compare(hub, tiny):
    result = resolve(hub, "--compare", "main")
    assert result.code == 15 and "--compare" in result.stderr
