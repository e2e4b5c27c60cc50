"""SIGINT/SIGTERM end a fetch cleanly: one line, a final record with reason Interrupted, 128+signal;
what was written stays and the next run resumes from it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from fleetcache.agent.fetch import STAGE_BLOCK
from fleetcache.devtools.testhub import Fault, make_model
from tests.agent.conftest import AGENT, REPO, expected_bytes, fetch_args, published_files_verify, run_agent

REPO_BYTES = 32 << 20


def interrupted_fetch(hub, tmp_path, signum):
    hub.add_repo(REPO, make_model(REPO_BYTES, shards=2))
    hub.inject(Fault("slow", host="cdn", rate=4_000_000, times=None))
    progress, termination = tmp_path / "p.json", tmp_path / "termination"
    termination.touch()
    agent = subprocess.Popen(
        [AGENT, *fetch_args(hub, tmp_path / "d", "--progress-file", str(progress), "--termination-log",
                            str(termination))],
        env={**os.environ, "FLEETCACHE_RETRY_BASE_DELAY": "0.01"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # signal once bytes are flowing
        record = json.loads(progress.read_text()) if progress.exists() else {}
        if (record.get("bytesDone") or 0) > 2 << 20:
            break
        time.sleep(0.05)
    agent.send_signal(signum)
    stdout, stderr = agent.communicate(timeout=30)
    return agent.returncode, stderr, json.loads(progress.read_text()), json.loads(termination.read_text())


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_fetch_with_one_line_a_final_record_and_128_plus_the_signal(hub, tmp_path, signum,
                                                                                       code):
    returncode, stderr, record, termination = interrupted_fetch(hub, tmp_path, signum)
    assert returncode == code
    assert stderr.strip().count("\n") == 0, stderr  # one line: no traceback, no "Aborted!"
    assert f"interrupted by {signal.Signals(signum).name}" in stderr
    assert record["phase"] == "Failed" and record["reason"] == "Interrupted"
    assert "the next run resumes" in record["message"]
    assert termination == record
    published_files_verify(tmp_path / "d", hub)


def test_the_run_after_an_interruption_resumes_what_was_written(hub, tmp_path):
    _, _, record, _ = interrupted_fetch(hub, tmp_path, signal.SIGTERM)
    written = record["bytesDone"]
    hub.faults.clear()
    hub.reset_records()
    result = run_agent(*fetch_args(hub, tmp_path / "d"))
    assert result.code == 0, result.stderr
    total = sum(len(d) for d in expected_bytes(hub).values())
    assert hub.bytes_sent() <= total - written + STAGE_BLOCK  # what the last flush had not written
    assert run_agent("verify", "--dest", str(tmp_path / "d"), "--repo", REPO).code == 0


def test_a_signal_while_waiting_for_another_writer_ends_the_wait(hub, tmp_path):
    from fleetcache.agent.lock import DestinationLock

    hub.add_repo(REPO, make_model(1 << 20, shards=1))
    progress = tmp_path / "p.json"
    with DestinationLock(tmp_path / "d" / ".fleetcache") as held:
        held.acquire(wait=False)
        agent = subprocess.Popen([AGENT, *fetch_args(hub, tmp_path / "d", "--wait", "--progress-file",
                                                     str(progress))],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not hub.requests() and time.monotonic() < deadline:  # listed: now it waits for the lock
            time.sleep(0.05)
        time.sleep(0.3)
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 143 and "Traceback" not in stderr
    assert json.loads(progress.read_text())["reason"] == "Interrupted"
