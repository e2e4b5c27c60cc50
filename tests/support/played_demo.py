"""The demo played once per test run: tests/test_demo.py reads what it printed,
tests/test_argocd.py and tests/test_printer_columns.py every composite it left after each
reconcile. Under xdist the modules may run on different workers (`make test` distributes by
file), so the first worker to ask plays it and keeps it in a file the others wait for and read."""

from __future__ import annotations

import fcntl
import functools
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools import demo

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PlayedDemo:
    code: int
    output: str
    composites: tuple[dict, ...]  # every composite after every reconcile that ran its functions, in order


def play() -> PlayedDemo:
    lines: list[str] = []
    composites: list[dict] = []
    code = demo.run(ROOT, fast=True, out=lines.append, on_composite=composites.append)
    return PlayedDemo(code, "\n".join(lines), tuple(composites))


@functools.cache
def played_demo() -> PlayedDemo:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:  # one process: nobody to share it with
        return play()
    kept = Path(tempfile.gettempdir()) / f"fleetcache-played-demo-{run}.pickle"
    with open(kept.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait here while the first plays
        if kept.exists():
            return pickle.loads(kept.read_bytes())
        played = play()
        kept.with_suffix(".part").write_bytes(pickle.dumps(played))
        kept.with_suffix(".part").replace(kept)
        return played
