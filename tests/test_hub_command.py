"""`fleetcache hub` serves a generated repo the agent can be tried on, says where, and stops
cleanly; a flag it cannot serve is one line naming the flag."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import urllib3

FLEETCACHE = str(Path(sys.executable).parent / "fleetcache")
http = urllib3.PoolManager(retries=False)


def start(*flags: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """A running hub and its banner (`endpoint`, `repo`, `revision`, `commit`, ...)."""
    proc = subprocess.Popen([FLEETCACHE, "hub", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner: dict[str, str] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("serving until"):
            return proc, banner
        key, _, value = line.partition(" ")
        banner[key] = value.strip()
    proc.kill()
    raise AssertionError(f"the hub did not start: {proc.communicate()[1]}")


def stopped(proc: subprocess.Popen, signum: int) -> tuple[int, str, str]:
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([FLEETCACHE, "hub", *flags], capture_output=True, text=True, timeout=60)


def listing(endpoint: str, repo: str, token: str | None = None) -> urllib3.BaseHTTPResponse:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http.request("GET", f"{endpoint}/api/models/{repo}/revision/main?blobs=true", headers=headers)


def test_the_hub_serves_the_repo_at_the_endpoint_and_commit_it_prints():
    proc, banner = start("--repo", "acme/tiny", "--size", "1Mi", "--shards", "3")
    try:
        answer = json.loads(listing(banner["endpoint"], "acme/tiny").data)
    finally:
        stopped(proc, signal.SIGTERM)
    assert answer["sha"] == banner["commit"] and banner["revision"] == "main"
    assert sum(s["rfilename"].endswith(".safetensors") for s in answer["siblings"]) == 3


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_a_stopped_hub_exits_0_saying_so_without_a_traceback(signum):
    proc, _ = start("--repo", "acme/tiny", "--size", "1Mi")
    code, out, err = stopped(proc, signum)
    assert (code, out.strip(), err) == (0, "stopped", "")


def test_the_hub_listens_on_the_port_given():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc, banner = start("--repo", "acme/tiny", "--size", "1Mi", "--port", str(port))
    stopped(proc, signal.SIGTERM)
    assert banner["endpoint"] == f"http://127.0.0.1:{port}"


def test_with_a_token_the_repo_is_private_to_it():
    proc, banner = start("--repo", "acme/private", "--size", "1Mi", "--token", "hf_try")
    try:
        statuses = [listing(banner["endpoint"], "acme/private", token).status for token in (None, "hf_try")]
    finally:
        stopped(proc, signal.SIGTERM)
    assert statuses == [401, 200]


@pytest.mark.parametrize("flags,named", [
    (["--repo", "acme", "--size", "1Mi"], "--repo 'acme': give ORG/NAME"),
    (["--repo", "acme/tiny", "--size", "0"], "--size '0': give from one byte to 64Gi"),
    (["--repo", "acme/tiny", "--size", "1e99"], "--size '1e99' has an exponent beyond 30"),
    (["--repo", "acme/tiny", "--size", "1Pi"], "--size '1Pi': give from one byte to 64Gi"),
    (["--repo", "acme/tiny", "--size", "lots"], "--size 'lots' is not a Kubernetes quantity"),
    (["--repo", "acme/tiny", "--size", "1Mi", "--revision", "a b"], "--revision 'a b': give a branch name"),
])
def test_a_flag_the_hub_cannot_serve_is_one_line_naming_it(flags, named):
    result = run(*flags)
    assert result.returncode == 2 and result.stderr.startswith(f"fleetcache hub: {named}")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_a_port_in_use_is_one_line_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("--repo", "acme/tiny", "--size", "1Mi", "--port", str(port))
    assert result.returncode == 2 and result.stderr == f"fleetcache hub: --port {port} is in use: pick another, " \
                                                       "or leave --port out for any free one\n"
