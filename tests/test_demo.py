"""`make demo`: the example fleet ends with one cluster in each of three phases."""

from __future__ import annotations

from pathlib import Path

from fleetcache import demo

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_shows_the_three_clusters_in_their_three_phases():
    lines: list[str] = []
    assert demo.run(ROOT, out=lines.append) == 0
    text = "\n".join(lines)
    table = text[text.index("$ kubectl get modelcachehydrations"):]
    assert "gpu-east-1  Ready      100%" in table
    assert "gpu-east-2  Hydrating  40%" in table
    assert "gpu-west-1  Pending    0%" in table
    assert "demo OK" in text
