"""Every layout by its name: the one a manifest names (`layout`), and the one `fetch --layout` writes."""

from __future__ import annotations

from pathlib import Path

from fleetcache.agent.flat_layouts import FlatCommitsLayout, FlatLayout
from fleetcache.agent.hf_cache_layout import HfCacheLayout
from fleetcache.agent.layout import Layout

LAYOUTS = {cls.name: cls for cls in (HfCacheLayout, FlatLayout, FlatCommitsLayout)}  # by manifest "layout"
FETCH_LAYOUTS = {"hf-cache": HfCacheLayout, "flat": FlatCommitsLayout}  # what `fetch --layout` writes


def open_layout(name: str, dest: Path, repo: str, commit: str = "") -> Layout:
    """The layout a manifest names, for reading (verify, prune, node-warm)."""
    return LAYOUTS[name](dest, repo, commit)


def fetch_layout(name: str, dest: Path, repo: str, commit: str) -> Layout:
    """The layout `fetch --layout NAME` writes one commit in."""
    return FETCH_LAYOUTS[name](dest, repo, commit)
