"""usedBytes and capacityBytes: the volume measured as kubelet reads it (statvfs of --dest), in every
record fetch, verify and prune write; absent (null, "" in the ConfigMap) when statvfs fails."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from fleetcache.agent import cli, usage
from fleetcache.agent.usage import volume_usage
from tests.agent.conftest import REPO, fetch_args, run_agent
from tests.agent.test_resolve import RecordingCoreApi

GIB_SLACK = 1 << 30  # other processes write to the same filesystem while a test runs


def fake_statvfs(blocks, bfree, bavail, frsize=4096):
    return lambda path: SimpleNamespace(f_blocks=blocks, f_bfree=bfree, f_bavail=bavail, f_frsize=frsize)


@pytest.mark.parametrize("blocks,bfree,bavail,used,capacity", [
    (100, 100, 100, 0, 409_600),
    (100, 40, 40, 245_760, 409_600),
    (100, 40, 30, 286_720, 409_600),  # 10 blocks reserved for root count as used
    (100, 5, 0, 409_600, 409_600),  # full for the agent while root still has 5 blocks
])
def test_usage_is_capacity_minus_what_an_unprivileged_writer_may_still_use(monkeypatch, blocks, bfree, bavail,
                                                                           used, capacity):
    monkeypatch.setattr(usage, "statvfs", fake_statvfs(blocks, bfree, bavail))
    assert volume_usage("/any") == {"usedBytes": used, "capacityBytes": capacity}


def test_usage_is_absent_when_statvfs_fails(tmp_path):
    assert volume_usage(tmp_path / "missing") == {"usedBytes": None, "capacityBytes": None}


def consistent_with_statvfs(record, dest):
    st = os.statvfs(dest)
    assert record["capacityBytes"] == st.f_blocks * st.f_frsize
    assert abs(record["usedBytes"] - (st.f_blocks - st.f_bavail) * st.f_frsize) < GIB_SLACK


def test_the_fetch_record_carries_the_volume_usage(hub, tiny, tmp_path):
    result = run_agent(*fetch_args(hub, tmp_path / "d", "--progress-file", str(tmp_path / "p.json")))
    assert result.code == 0, result.stderr
    consistent_with_statvfs(result.json, tmp_path / "d")
    assert json.loads((tmp_path / "p.json").read_text()) == result.json


def test_verify_prints_the_volume_usage(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path / "d")).code == 0
    result = run_agent("verify", "--dest", str(tmp_path / "d"), "--repo", REPO)
    consistent_with_statvfs(result.json, tmp_path / "d")


def test_a_failed_verify_records_the_volume_usage_in_its_termination_message(hub, tiny, tmp_path):
    termination = tmp_path / "termination"
    termination.touch()
    (tmp_path / "d").mkdir()
    result = run_agent("verify", "--dest", str(tmp_path / "d"), "--repo", REPO, "--termination-log", str(termination))
    assert result.code == 15
    consistent_with_statvfs(json.loads(termination.read_text()), tmp_path / "d")


def test_the_prune_record_carries_the_volume_usage(hub, tiny, tmp_path):
    assert run_agent(*fetch_args(hub, tmp_path / "d")).code == 0
    result = run_agent("prune", "--dest", str(tmp_path / "d"), "--repo", REPO, "--keep", tiny)
    assert result.code == 0, result.stderr
    consistent_with_statvfs(result.json, tmp_path / "d")


def failing_statvfs(path):
    raise PermissionError(13, "Permission denied")


def test_fetch_succeeds_without_usage_when_statvfs_fails(hub, tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(usage, "statvfs", failing_statvfs)
    api = RecordingCoreApi()
    argv = fetch_args(hub, tmp_path / "d", "--progress-file", str(tmp_path / "p.json"), "--progress-configmap",
                      "ns/p")
    assert cli.main(argv, configmap_api=lambda: api) == 0
    record = json.loads((tmp_path / "p.json").read_text())
    assert record["phase"] == "Ready" and (record["usedBytes"], record["capacityBytes"]) == (None, None)
    data = api.patches[-1][2]["data"]
    assert (data["usedBytes"], data["capacityBytes"]) == ("", "")


def test_prune_succeeds_without_usage_when_statvfs_fails(hub, tiny, tmp_path, monkeypatch):
    assert run_agent(*fetch_args(hub, tmp_path / "d")).code == 0
    monkeypatch.setattr(usage, "statvfs", failing_statvfs)
    argv = ["prune", "--dest", str(tmp_path / "d"), "--repo", REPO, "--keep", tiny,
            "--progress-file", str(tmp_path / "p.json")]
    assert cli.main(argv) == 0
    record = json.loads((tmp_path / "p.json").read_text())
    assert record["phase"] == "Pruned" and (record["usedBytes"], record["capacityBytes"]) == (None, None)
