"""The demo played once per test process: tests/test_demo.py reads what it printed,
tests/test_argocd.py and tests/test_printer_columns.py every composite it left after each
reconcile (their modules share an xdist group, so one worker plays it)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools import demo

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PlayedDemo:
    code: int
    output: str
    composites: tuple[dict, ...]  # every composite after every reconcile that ran its functions, in order


@functools.cache
def played_demo() -> PlayedDemo:
    lines: list[str] = []
    composites: list[dict] = []
    code = demo.run(ROOT, fast=True, out=lines.append, on_composite=composites.append)
    return PlayedDemo(code, "\n".join(lines), tuple(composites))
