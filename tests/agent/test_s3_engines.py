"""What engines get from an S3 source: FLEETCACHE_MODEL is a plain directory with the prefix's files
(the snapshot in the hf-cache layout, the commit's directory in flat), and transformers loads it offline and
read-only (design/sources.md)."""

from __future__ import annotations

import json
import stat

import pytest

from tests.agent.conftest import run_agent
from tests.agent.test_engines import HIDDEN, LAYERS, llama_repo, load, make_read_only
from tests.agent.test_s3_source import ENV, s3_flags
from tests.support.s3 import S3Server

BUCKET = "models"
PREFIX = "llama/tiny-instruct"


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """The same S3 prefix fetched in both layouts, each made read-only."""
    root = tmp_path_factory.mktemp("s3-engines")
    with S3Server() as s3:
        s3.make_bucket(BUCKET)
        for path, data in llama_repo().items():
            s3.put(BUCKET, f"{PREFIX}/{path}", data, sha256=True)
        flags = s3_flags(s3, root, prefix=PREFIX)
        resolved = run_agent("resolve", *flags, env=ENV).json
        (root / "manifest.json").write_text(json.dumps(resolved["manifest"]))
        pinned = ["--commit", resolved["commit"], "--manifest-digest", resolved["manifestDigest"],
                  "--manifest-file", str(root / "manifest.json")]
        for layout in ("hf-cache", "flat"):
            result = run_agent("fetch", *flags, *pinned, "--dest", str(root / layout), "--layout", layout, env=ENV)
            assert result.code == 0, result.stderr
            make_read_only(root / layout)
    model = {"hf-cache": root / "hf-cache" / "hub" / "models--s3--models--llama--tiny-instruct" / "snapshots"
             / resolved["commit"], "flat": root / "flat" / "commits" / resolved["commit"]}
    yield {layout: load(root / layout, root / "home", str(path)) for layout, path in model.items()}
    for path in [p for layout in model for p in [root / layout, *(root / layout).rglob("*")] if not p.is_symlink()]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("layout", ["hf-cache", "flat"])
def test_transformers_loads_fleetcache_model_of_an_s3_source_offline(fetched, layout):
    loaded = fetched[layout]
    assert loaded.get("error") is None, loaded
    assert loaded["model_type"] == "llama" and loaded["hidden_size"] == HIDDEN
    assert loaded["ids"] and loaded["tensors"] == loaded["mapped"] == 3 + 9 * LAYERS
