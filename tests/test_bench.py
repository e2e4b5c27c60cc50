"""The benchmarks in bench/ keep running: each script's --smoke mode (the full run's code paths at
a handful of clusters or a few MiB, one round) exits 0 and prints the ratio lines its full run
prints, so a bench that rots fails `make test`. No speed figure is asserted: the machine is
shared, and a smoke run measures nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATIO = r"\d+\.\d+"
MEDIAN = r"(-?\d+\.\d+|n/a) median of \d+ rounds? \(.*\)"  # a smoke slope is noise around zero, either sign


def smoke(script: str) -> str:
    """The script's --smoke run from the repository root; its stdout, once it exited 0."""
    proc = subprocess.run([sys.executable, f"bench/{script}", "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"bench/{script} --smoke exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def lines_matching(pattern: str, out: str) -> list[str]:
    return re.findall(rf"^{pattern}$", out, flags=re.MULTILINE)


def test_compose_scale_prints_the_composer_to_floor_ratios_at_every_size_and_the_growth():
    out = smoke("compose_scale.py")
    assert len(lines_matching(rf"ratio at \d+ clusters: in-process/floor {RATIO}, gRPC/floor {RATIO}", out)) == 2
    assert lines_matching(rf"growth: time per cluster from \d+ to \d+ clusters changes {RATIO}x "
                          rf"\(1\.0 = linear\); median ratio to floor {RATIO}", out)


def test_compose_deployment_prints_the_composer_to_floor_ratios_of_both_scenarios():
    out = smoke("compose_deployment.py")
    for scenario in ("first compose", "steady state"):
        assert lines_matching(rf"ratio {scenario}: in-process/floor {RATIO}, gRPC/floor {RATIO}", out), scenario


def test_agent_throughput_prints_the_agent_to_floor_and_hf_ratios_of_every_mode():
    out = smoke("agent_throughput.py")
    assert len(lines_matching(rf"ratio agent/floor, CPU per verified GiB: {MEDIAN}", out)) == 2  # uncapped, capped
    assert len(lines_matching(rf"ratio hf/agent, wall: {MEDIAN}", out)) == 2
    assert len(lines_matching(rf"ratio agent/floor, marginal CPU per GiB from \S+ MiB to \S+ MiB: {MEDIAN}",
                              out)) == 1
    assert len(lines_matching(rf"ratio agent/floor, CPU per verified GiB at \S+ MiB: {MEDIAN}", out)) == 2


def test_concurrent_calls_prints_the_threaded_to_inline_ratios_of_one_burst():
    out = smoke("concurrent_calls.py")
    assert lines_matching(rf"ratio threaded/inline: small p50 {RATIO}, small p99 {RATIO}, "
                          rf"big p50 {RATIO}, wall {RATIO} \(best of 1\)", out)
