"""Crash safety: kill -9 at random points, then a rerun completes without refetching verified bytes;
two agents on one destination: exactly one writes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest

from fleetcache.devtools.testhub import Fault, make_model
from fleetcache.volume import STATE_DIR
from tests.agent.conftest import (
    AGENT,
    REPO,
    expected_bytes,
    fetch_args,
    published_files_verify,
    run_agent,
    snapshot_dir,
)

REPO_BYTES = 64 << 20
STREAM_RATE = 6_000_000  # per connection: slow enough that kills land mid-transfer


def slow_repo(hub) -> str:
    commit = hub.add_repo(REPO, make_model(REPO_BYTES, shards=2))
    hub.inject(Fault("slow", host="cdn", rate=STREAM_RATE, times=None))
    return commit


def start_agent(hub, dest):
    env = {**os.environ, "FLEETCACHE_RETRY_BASE_DELAY": "0.01"}
    return subprocess.Popen([AGENT, *fetch_args(hub, dest, "--concurrency", "4")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_trials(hub, tmp_path, trials: int, seed: int) -> None:
    commit = slow_repo(hub)
    dest = tmp_path / "dest"
    rng = random.Random(seed)
    for _ in range(trials):
        agent = start_agent(hub, dest)
        try:
            agent.wait(timeout=rng.uniform(0.2, 0.6))
        except subprocess.TimeoutExpired:
            agent.kill()  # SIGKILL: no cleanup handlers run
            agent.wait()
        agent.stderr.close()
        published_files_verify(dest, hub)  # what a reader could see at the moment of the crash
    result = run_agent(*fetch_args(hub, dest))
    assert result.code == 0, result.stderr
    for path, data in expected_bytes(hub).items():
        assert (snapshot_dir(dest, commit) / path).read_bytes() == data
    assert run_agent("verify", "--dest", str(dest), "--repo", REPO).code == 0
    total = sum(len(d) for d in expected_bytes(hub).values())
    transferred = hub.bytes_sent()
    assert transferred <= 1.2 * total, f"{transferred / total:.2f}x the repository was transferred"


def test_kill_9_three_times_then_a_rerun_completes_within_1_2x_bytes(hub, tmp_path):
    kill_trials(hub, tmp_path, trials=3, seed=3)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_ten_times_then_a_rerun_completes_within_1_2x_bytes(hub, tmp_path, seed):
    kill_trials(hub, tmp_path, trials=10, seed=seed)


def lock_holder(dest, agents, timeout=120.0) -> int:
    """The pid of the one of `agents` (by pid) whose lease is on `dest`: it holds the destination lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(agent.poll() is None for agent in agents.values()):
        try:
            pid = json.loads((dest / STATE_DIR / "lease.json").read_text())["pid"]
        except (FileNotFoundError, ValueError, KeyError):
            pid = None  # no lease yet, or being replaced
        if pid in agents:
            return pid
        time.sleep(0.05)
    codes = [agent.poll() for agent in agents.values()]
    raise AssertionError(f"no agent took the lock on {dest} (exit codes {codes}, {timeout:.0f} s at most)")


def test_two_agents_started_together_exactly_one_writes(hub, tmp_path):
    commit = slow_repo(hub)
    dest = tmp_path / "dest"
    agents = {agent.pid: agent for agent in (start_agent(hub, dest), start_agent(hub, dest))}
    holder = agents.pop(lock_holder(dest, agents))
    (other,) = agents.values()
    holder.send_signal(signal.SIGSTOP)  # it keeps the lock however long the other takes to start
    try:
        other_code = other.wait(timeout=120)
    finally:
        holder.send_signal(signal.SIGCONT)
    codes = [holder.wait(timeout=120), other_code]
    for agent in (holder, other):
        agent.stderr.close()
    assert codes == [0, 16]
    cdn_gets = [r for r in hub.requests("cdn") if r.method == "GET"]
    assert sum(r.bytes_sent for r in cdn_gets) <= sum(len(d) for d in expected_bytes(hub).values())
    assert published_files_verify(dest, hub) == sorted(f"{commit}/{p}" for p in expected_bytes(hub))
