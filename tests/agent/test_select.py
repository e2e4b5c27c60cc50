"""`select`: the engine's `cache` link points at the node copy only when it is published for the
commit and digest; every other case falls back to the cluster volume, and says why."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.agent.conftest import run_agent
from tests.agent.node_support import COMMIT, REPO, make_volume, model_files, node_snapshot, node_warm

OTHER = "f" * 40


@pytest.fixture
def warm(tmp_path):
    """A cluster volume and a node copy of the same commit; returns the manifest digest."""
    digest = make_volume(tmp_path / "vol", model_files())
    assert node_warm(tmp_path / "vol", tmp_path / "node", digest, "--once").code == 0
    return digest


def select(tmp_path, digest, *extra, commit=COMMIT):
    return run_agent("select", "--node", str(tmp_path / "node"), "--volume", str(tmp_path / "vol"), "--repo", REPO,
                     "--commit", commit, "--manifest-digest", digest, "--link", str(tmp_path / "run/cache"), *extra)


def target(tmp_path) -> str:
    return os.readlink(tmp_path / "run/cache")


def test_a_published_node_copy_is_selected(tmp_path, warm):
    result = select(tmp_path, warm)
    assert result.code == 0 and result.json == {"delivery": "node", "reason": "NodeCopyReady"}
    assert target(tmp_path) == str(tmp_path / "node/hub")


def test_the_engine_finds_the_snapshot_through_the_link(tmp_path, warm):
    select(tmp_path, warm)
    snapshot = tmp_path / "run/cache/models--acme--tiny/snapshots" / COMMIT
    assert (snapshot / "config.json").read_bytes() == model_files()["config.json"]


@pytest.mark.parametrize("case,reason", [
    ("no node copy", "NodeCopyMissing"),
    ("another commit on the node", "NodeCopyStale"),
    ("another digest on the node", "NodeCopyStale"),
    ("snapshot deleted", "NodeCopyIncomplete"),
    ("manifest deleted", "NodeCopyIncomplete"),
    ("torn marker", "NodeCopyMissing"),
])
def test_the_volume_is_selected_when_the_node_copy_is_not_published(tmp_path, warm, case, reason):
    node = tmp_path / "node"
    marker = node / ".fleetcache/node-ready.json"
    if case == "no node copy":
        shutil.rmtree(node)
    elif case == "another commit on the node":
        marker.write_text(json.dumps({"commit": OTHER, "manifestDigest": warm}))
    elif case == "another digest on the node":
        marker.write_text(json.dumps({"commit": COMMIT, "manifestDigest": "0" * 64}))
    elif case == "snapshot deleted":
        shutil.rmtree(node_snapshot(node))
    elif case == "manifest deleted":
        shutil.rmtree(node / ".fleetcache/models--acme--tiny/manifests")
    elif case == "torn marker":
        marker.write_text('{"commit": "c0ff')
    result = select(tmp_path, warm)
    assert result.code == 0 and result.json == {"delivery": "volume", "reason": reason}
    assert target(tmp_path) == str(tmp_path / "vol/hub")


def test_a_node_copy_linked_outside_the_node_root_is_never_followed(tmp_path, warm):
    outside = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "node/hub", outside)
    shutil.rmtree(tmp_path / "node/hub")
    (tmp_path / "node/hub").symlink_to(outside)
    result = select(tmp_path, warm)
    assert result.json == {"delivery": "volume", "reason": "NodeCopyOutsideRoot"}


def test_a_marker_for_a_commit_the_pod_does_not_ask_for_is_not_used(tmp_path, warm):
    result = select(tmp_path, warm, commit=OTHER)
    assert result.json["delivery"] == "volume"


def test_the_choice_is_the_termination_message(tmp_path, warm):
    termination = tmp_path / "termination"
    termination.touch()
    select(tmp_path, warm, "--termination-log", str(termination))
    assert json.loads(termination.read_text()) == {"delivery": "node", "reason": "NodeCopyReady"}


def test_a_rerun_replaces_the_link(tmp_path, warm):
    select(tmp_path, warm)
    shutil.rmtree(node_snapshot(tmp_path / "node"))
    select(tmp_path, warm)
    assert target(tmp_path) == str(tmp_path / "vol/hub")


def test_bad_flags_exit_15(tmp_path):
    result = select(tmp_path, "nope")
    assert result.code == 15 and "--manifest-digest" in result.stderr
