"""What engines get from an OCI source (issue 22 item 4): transformers loads FLEETCACHE_MODEL offline and
read-only, whether the hydration fetched the ModelPack to the volume (the snapshot in the hf-cache layout, the
commit's directory in flat) or the runtime mounts the artifact as an image volume (its files at their title
paths, as the simulated runtime lays it out after CRI-O: design/image-volumes.md)."""

from __future__ import annotations

import json
import stat

import pytest

from fleetcache.devtools.simulation.images import ImageStore
from fleetcache.volume import flat_commit_path, hf_snapshot_path
from tests.agent.conftest import run_agent
from tests.agent.test_engines import HIDDEN, LAYERS, llama_repo, load, make_read_only
from tests.support.registry import LoopbackRegistry

REPOSITORY = "models/tiny-llama"
ENV = {"FLEETCACHE_READ_TIMEOUT": "5"}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The same ModelPack fetched in both layouts and mounted as an image volume, each made read-only."""
    root = tmp_path_factory.mktemp("oci-engines")
    with LoopbackRegistry() as registry:
        digest = registry.push_modelpack(REPOSITORY, "v1", llama_repo())
        flags = ["--oci-reference", f"{registry.host}/{REPOSITORY}:v1", "--plain-http"]
        resolved = run_agent("resolve", *flags, env=ENV).json
        (root / "manifest.json").write_text(json.dumps(resolved["manifest"]))
        pinned = ["--commit", resolved["commit"], "--manifest-digest", resolved["manifestDigest"],
                  "--manifest-file", str(root / "manifest.json")]
        for layout in ("hf-cache", "flat"):
            result = run_agent("fetch", *flags, *pinned, "--dest", str(root / layout), "--layout", layout, env=ENV)
            assert result.code == 0, result.stderr
            make_read_only(root / layout)
        mounted = ImageStore(root / "runtime").mount(f"{registry.host}/{REPOSITORY}@{digest}")
        make_read_only(mounted)
    commit, repo = resolved["commit"], resolved["repo"]
    model = {"hf-cache": (root / "hf-cache", hf_snapshot_path(str(root / "hf-cache"), repo, commit)),
             "flat": (root / "flat", flat_commit_path(str(root / "flat"), commit)),
             "image volume": (mounted, str(mounted))}
    yield {how: load(dest, root / "home", path) for how, (dest, path) in model.items()}
    for path in [p for base in (root / "hf-cache", root / "flat", mounted)
                 for p in [base, *base.rglob("*")] if not p.is_symlink()]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


@pytest.mark.parametrize("how", ["hf-cache", "flat", "image volume"])
def test_transformers_loads_fleetcache_model_of_an_oci_source_offline(loaded, how):
    model = loaded[how]
    assert model.get("error") is None, model
    assert model["model_type"] == "llama" and model["hidden_size"] == HIDDEN
    assert model["ids"] and model["tensors"] == model["mapped"] == 3 + 9 * LAYERS
