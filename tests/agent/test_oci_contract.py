"""The OCI contract between the composers and the agent (issue 22): the real agent, run with the
arguments the composers build (`sources.Source`), against the CNCF distribution registry on
loopback. Between resolve and fetch the record travels as it does in a cluster: the agent's
ConfigMap data, latched by compose-model-cache (`resolution.result_of`), as the XRD's status
schema keeps it, taken by compose-model-cache-hydration (`resolution.pinned_manifest`) into the
manifest ConfigMap the fetch Job mounts. Only the cluster's paths (the volume, the manifest
mount) and the progress sink (a ConfigMap, here a file) are rewritten."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fleetcache.agent.progress import configmap_data
from fleetcache.apis.models.model_cache import ManifestItem
from fleetcache.functions.decisions import resolution, sources
from fleetcache.functions.k8s import agent_job, job_mounts
from fleetcache.volume import flat_commit_path, hf_snapshot_path
from tests.agent.conftest import run_agent
from tests.support.registry import LoopbackRegistry, descriptor, tar_of

REPOSITORY = "models/qwen3"
PROGRESS = "ml/qwen-progress"
ENV = {"FLEETCACHE_READ_TIMEOUT": "5"}
IMAGE_TAR = "application/vnd.oci.image.layer.v1.tar"


def model_files(seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": rng.randbytes(300_001),
            "tokenizer/vocab.json": json.dumps(list(range(seed, seed + 100))).encode()}


FILES = model_files(1)


@pytest.fixture(scope="module")
def registry():
    with LoopbackRegistry() as running:
        yield running


def push_modelpack(registry: LoopbackRegistry, tag: str, files: dict[str, bytes]) -> None:
    registry.push_modelpack(REPOSITORY, tag, files)


def push_modelcar(registry: LoopbackRegistry, tag: str, files: dict[str, bytes]) -> None:
    """An image whose model is in a tar layer under models/: each file a range of the blob."""
    base, model = tar_of({"bin/sh": b"#!busybox"}), tar_of(files, prefix="models/")
    registry.push_image(REPOSITORY, tag, [(descriptor(IMAGE_TAR, base), base),
                                          (descriptor(IMAGE_TAR, model), model)])


def origin(registry: LoopbackRegistry, tag: str, layout: str) -> sources.Source:
    return sources.Source.of({"oci": {"reference": f"{registry.host}/{REPOSITORY}:{tag}", "plainHTTP": True,
                                      "layout": layout}, "allowPatterns": [], "ignorePatterns": []})


def on_this_machine(args: list[str], paths: dict[str, str], progress: Path) -> list[str]:
    """The composed args with the cluster's paths swapped for `paths` ({flag: value}) and the progress
    ConfigMap for a file; every other argument as composed."""
    out, given = [], iter(args)
    for arg in given:
        if arg == "--progress-configmap":
            assert next(given) == PROGRESS
            out += ["--progress-file", str(progress)]
        elif arg in paths:
            next(given)
            out += [arg, paths[arg]]
        else:
            out.append(arg)
    return out


def resolve_and_latch(source: sources.Source, tmp_path: Path) -> tuple[dict, dict]:
    """resolve as the resolve Job runs it: its record (ConfigMap data), and the record as the ModelCache
    latches it (status.resolved)."""
    args = source.resolve_args(PROGRESS)
    assert args[:3] == ["resolve", "--progress-configmap", PROGRESS]
    progress = tmp_path / "resolve.json"
    result = run_agent(*on_this_machine(args, {}, progress), env=ENV)
    assert result.code == 0, result.stderr
    record = configmap_data(json.loads(progress.read_text()))
    latched = resolution.result_of(source, record)
    assert latched is not None and resolution.manifest_problem(source, record, latched) == ""
    return record, latched


def hydrate(source: sources.Source, latched: dict, tmp_path: Path) -> tuple[Path, dict]:
    """fetch as the hydration Job runs it, with the manifest ConfigMap made from the latched status."""
    kept = [ManifestItem.model_validate(row).model_dump(by_alias=True, exclude_none=True)
            for row in latched["manifest"]]  # what the XRD's status schema keeps (the API server prunes the rest)
    manifest, why = resolution.pinned_manifest([{"status": {"resolved": {**latched, "manifest": kept}}}], "qwen",
                                               latched["commit"], latched["manifestDigest"])
    assert manifest is not None, why
    mounted = tmp_path / "manifest.json"
    mounted.write_text(job_mounts.manifest_configmap("qwen-manifest", "ml", manifest, {})["data"]["manifest.json"])
    dest = tmp_path / "cache"
    args = source.hydrate_args(latched["commit"], latched["manifestDigest"], PROGRESS)
    assert args[args.index("--dest") + 1] == agent_job.CACHE_MOUNT_PATH
    assert args[args.index("--manifest-file") + 1] == job_mounts.MANIFEST_FILE
    result = run_agent(*on_this_machine(args, {"--dest": str(dest), "--manifest-file": str(mounted)},
                                        tmp_path / "fetch.json"), env=ENV)
    assert result.code == 0, result.stderr
    return dest, result.json


def model_dir(source: sources.Source, dest: Path, commit: str) -> Path:
    """Where the composers point FLEETCACHE_MODEL for this source's layout."""
    if source.fields["layout"] == "Flat":
        return Path(flat_commit_path(str(dest), commit))
    return Path(hf_snapshot_path(str(dest), source.repo, commit))


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("push,layout", [(push_modelpack, "HfCache"), (push_modelcar, "Flat")],
                         ids=["modelpack-raw-layers-hf-cache", "modelcar-tar-layer-flat"])
def test_the_composers_resolve_and_fetch_land_the_files_verified_where_the_composers_look(
        registry, tmp_path, push, layout):
    tag = f"contract-{layout.lower()}"
    push(registry, tag, FILES)
    source = origin(registry, tag, layout)
    _, latched = resolve_and_latch(source, tmp_path)
    dest, fetched = hydrate(source, latched, tmp_path)
    assert (fetched["phase"], fetched["commit"]) == ("Ready", latched["commit"])
    assert files_under(model_dir(source, dest, latched["commit"])) == FILES


def test_the_repo_the_composers_name_is_the_one_the_agent_writes_under(registry, tmp_path):
    push_modelpack(registry, "named", FILES)
    source = origin(registry, "named", "HfCache")
    record, latched = resolve_and_latch(source, tmp_path)
    assert record["repo"] == source.repo == f"oci/{registry.host.replace(':', '_')}/{REPOSITORY}"
    dest, _ = hydrate(source, latched, tmp_path)
    assert [p.name for p in (dest / "hub").iterdir()] == ["models--" + source.repo.replace("/", "--")]


@pytest.mark.parametrize("push", [push_modelpack, push_modelcar], ids=["modelpack", "modelcar"])
def test_a_tag_moved_between_resolve_and_fetch_still_fetches_the_resolved_bytes(registry, tmp_path, push):
    tag = f"moving-{push.__name__}"
    push(registry, tag, FILES)
    source = origin(registry, tag, "HfCache")
    _, latched = resolve_and_latch(source, tmp_path)
    push(registry, tag, model_files(2))
    dest, fetched = hydrate(source, latched, tmp_path)
    assert fetched["commit"] == latched["commit"]
    assert files_under(model_dir(source, dest, latched["commit"])) == FILES
