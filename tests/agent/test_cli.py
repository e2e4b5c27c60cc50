"""Bad flags exit 15 naming the flag, with a final record; quantities parse like Kubernetes'."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from fleetcache.agent.cli_options import parse_quantity
from fleetcache.agent.errors import AgentError, from_os_error
from tests.agent.conftest import REPO, fetch_args, run_agent


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


def fetch_into(dest: str):
    return run_agent("fetch", "--endpoint", "http://127.0.0.1:9", "--repo", REPO, "--dest", dest)


def test_a_dest_the_agent_cannot_create_is_one_line_naming_it_and_the_system_reason(hub, tiny):
    result = run_agent(*fetch_args(hub, Path("/proc/nope")))
    assert result.code == 15 and result.stderr.count("\n") == 1
    assert "--dest: cannot create '/proc/nope': No such file or directory (ENOENT)" in result.stderr


def test_an_empty_dest_is_refused_not_read_as_the_working_directory():
    result = fetch_into("")
    assert result.code == 15 and "--dest: is empty" in result.stderr


def test_a_dest_too_long_to_look_up_is_one_line_naming_it():
    result = fetch_into("/tmp/" + "a" * 300)
    assert result.code == 15 and result.stderr.count("\n") == 1
    assert "--dest: cannot look up" in result.stderr and "File name too long (ENAMETOOLONG)" in result.stderr


def test_a_dest_the_agent_may_not_write_names_the_path_and_the_system_reason():
    failure = from_os_error(PermissionError(errno.EACCES, "Permission denied", "/v/.fleetcache"), "under --dest")
    assert failure is not None and failure.code == 15
    assert failure.what.startswith("cannot write under --dest (/v/.fleetcache): Permission denied (EACCES)")


def test_an_unknown_flag_points_at_the_commands_help():
    result = run_agent("fetch", "--bogus")
    assert result.code == 15 and "No such option '--bogus' (see `fleetcache-agent fetch --help`)" in result.stderr


def test_no_command_is_one_line_naming_the_commands():
    result = run_agent()
    assert result.code == 15 and result.stderr.count("\n") == 1
    assert "no command given: run one of resolve, fetch, verify, prune" in result.stderr


def test_hf_token_in_the_environment_is_ignored(hub, tmp_path):
    hub.add_repo("acme/private", {"a.json": b"{}"}, private=True)
    hub.add_token("hf_envtoken", repos=("acme/private",))
    result = run_agent("resolve", "--endpoint", hub.endpoint, "--repo", "acme/private",
                       env={"HF_TOKEN": "hf_envtoken"})
    assert result.code == 11
