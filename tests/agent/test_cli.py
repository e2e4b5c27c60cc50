"""Bad flags exit 15 naming the flag, with a final record; quantities parse like Kubernetes'."""

from __future__ import annotations

import json

import pytest

from fleetcache.agent.cli_options import parse_quantity
from fleetcache.agent.errors import AgentError
from tests.agent.conftest import REPO, run_agent


@pytest.mark.parametrize("value,expected", [
    ("200Mi", 200 * 2**20), ("1G", 10**9), ("1.5Gi", 1.5 * 2**30), ("500k", 500_000), ("1024", 1024),
])
def test_bandwidth_accepts_kubernetes_quantities(value, expected):
    assert parse_quantity(value) == expected


@pytest.mark.parametrize("value", ["fast", "-1Mi", "0", "10MB", "1 Gi", "", "100m"])
def test_bandwidth_refuses_what_is_not_a_positive_quantity(value):
    with pytest.raises(AgentError, match="--bandwidth") as err:
        parse_quantity(value)
    assert err.value.code == 15


@pytest.mark.parametrize("flags,named", [
    (["--bandwidth", "lots"], "--bandwidth"),
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "many"], "--concurrency"),
    (["--layout", "tree"], "--layout"),
    (["--progress-configmap", "no-namespace"], "--progress-configmap"),
    (["--revision", "../main"], "--revision"),
    (["--ref", "main branch"], "--ref"),
    (["--ref", "0123456789abcdef0123456789abcdef01234567"], "--ref"),
    (["--endpoint", "ftp://hub"], "--endpoint"),
    (["--token-file", "/nonexistent/token"], "--token-file"),
    (["--bogus"], "--bogus"),
])
def test_bad_flags_exit_15_naming_the_flag_with_a_failed_record(tmp_path, flags, named):
    progress, termination = tmp_path / "p.json", tmp_path / "termination"
    termination.touch()
    argv = ["fetch", "--endpoint", "http://127.0.0.1:9", "--repo", REPO, "--dest", str(tmp_path / "d"),
            "--progress-file", str(progress), "--termination-log", str(termination), *flags]
    result = run_agent(*argv)
    assert result.code == 15 and named in result.stderr
    record = json.loads(termination.read_text())
    assert record["reason"] == "InvalidConfiguration" and named in record["message"]
    assert json.loads(progress.read_text())["phase"] == "Failed"
    assert not (tmp_path / "d").exists()


def test_a_bad_repo_name_exits_15(tmp_path):
    result = run_agent("resolve", "--endpoint", "http://127.0.0.1:9", "--repo", "a/../b")
    assert result.code == 15 and "--repo" in result.stderr


def test_a_missing_required_flag_exits_15():
    result = run_agent("fetch", "--repo", REPO)
    assert result.code == 15 and "--dest" in result.stderr


def test_hf_token_in_the_environment_is_ignored(hub, tmp_path):
    hub.add_repo("acme/private", {"a.json": b"{}"}, private=True)
    hub.add_token("hf_envtoken", repos=("acme/private",))
    result = run_agent("resolve", "--endpoint", hub.endpoint, "--repo", "acme/private",
                       env={"HF_TOKEN": "hf_envtoken"})
    assert result.code == 11
