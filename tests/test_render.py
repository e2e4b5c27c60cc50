"""`fleetcache render`: the example through the real pipeline, like crossplane render."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache import cli, render
from tests.support import xrd
from tests.support.k8s import assert_valid_k8s

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "render"
PINNED = "c1899de289a04d12100db370d81485cdf75e47ca"


def run_cli(*args: str) -> tuple[int, list[dict], str]:
    result = CliRunner().invoke(cli.main, ["render", *args])
    docs = [d for d in yaml.safe_load_all(result.stdout) if d] if result.stdout.strip() else []
    return result.exit_code, docs, result.stderr


def render_example(example: str, plural: str, *state: str) -> tuple[int, list[dict], str]:
    """`fleetcache render` of an example through its kind's Composition, defaulted by the
    XRDs, with `state` ("--required"/"--observed" and a fixture directory, repeated)."""
    flags = [f if f.startswith("--") else str(FIXTURES / f) for f in state]
    return run_cli(str(ROOT / "examples" / example),
                   "--composition", str(ROOT / "compositions" / f"{plural}.yaml"),
                   "--xrd", str(ROOT / "apis"), *flags)


@pytest.fixture(scope="module")
def resolved_render() -> list[dict]:
    code, docs, err = render_example("fleet/modelcache.yaml", "modelcaches",
                                     "--required", "required", "--observed", "observed")
    assert code == 0, err
    return docs


def test_the_example_renders_one_hydration_per_matching_cluster_with_the_pinned_commit(
        resolved_render):
    hydrations = [d for d in resolved_render if d["kind"] == "ModelCacheHydration"]
    assert sorted(h["spec"]["clusterName"] for h in hydrations) == [
        "gpu-east-1", "gpu-east-2", "gpu-west-1"]
    assert {h["spec"]["commit"] for h in hydrations} == {PINNED}


def test_the_rendered_composite_carries_the_latched_resolution(resolved_render):
    composite = resolved_render[0]
    assert composite["kind"] == "ModelCache"
    assert composite["status"]["resolved"]["commit"] == PINNED
    assert composite["status"]["summary"] == "0/3"


def test_composed_resources_are_owned_and_named_like_crossplane_does(resolved_render):
    for doc in resolved_render[1:]:
        meta = doc["metadata"]
        assert meta["annotations"][render.RESOURCE_NAME_ANNOTATION]
        assert meta["labels"]["crossplane.io/composite"] == "qwen3-0-6b"
        assert meta["ownerReferences"][0]["kind"] == "ModelCache"


def test_rendered_hydrations_are_valid_against_their_xrd(resolved_render):
    for doc in resolved_render[1:]:
        xrd.assert_valid({k: v for k, v in doc.items() if k != "status"})


def test_without_a_resolution_the_example_renders_the_resolve_step():
    code, docs, err = render_example("fleet/modelcache.yaml", "modelcaches",
                                     "--required", "required")
    assert code == 0, err
    manifests = [d["spec"]["forProvider"]["manifest"] for d in docs if d["kind"] == "Object"]
    assert "Job" in [m["kind"] for m in manifests]
    for manifest in manifests:
        assert_valid_k8s(manifest)


def test_include_context_prints_the_pipeline_context():
    code, docs, _ = render_example("fleet/modelcache.yaml", "modelcaches",
                                   "--required", "required", "--include-context")
    assert code == 0
    assert docs[-1]["kind"] == "Context"


def test_a_fatal_result_exits_non_zero_and_says_why(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
                                   "metadata": {"name": "x", "namespace": "ml"},
                                   "spec": {"placement": {"clusterNames": ["a"]}}}))
    code, docs, err = run_cli(str(bad), "--composition", str(ROOT / "compositions/modelcaches.yaml"))
    assert code == 1
    assert "spec.source.huggingFace" in err
    assert docs[-1]["kind"] == "Result" and docs[-1]["severity"] == "SEVERITY_FATAL"


def test_requirements_are_answered_only_with_matching_resources():
    selector_docs = render.load_documents(FIXTURES / "required")
    requirements = fnv1.Requirements()
    requirements.resources["one"].CopyFrom(fnv1.ResourceSelector(
        api_version="fleetcache.dev/v1alpha1", kind="FleetCluster", match_name="gpu-west-1"))
    answered = render.answer_requirements(requirements, selector_docs)
    assert [d["metadata"]["name"] for d in answered["one"]] == ["gpu-west-1"]


def test_xrd_defaults_are_applied_as_the_api_server_would():
    schemas = render.xrd_schemas(render.load_documents(ROOT / "apis"))
    cache = render.load_documents(ROOT / "examples/fleet/modelcache.yaml")[0]
    admitted = render.admit(cache, schemas)
    assert admitted["spec"]["rollout"]["maxConcurrent"] == 10
    assert admitted["spec"]["source"]["huggingFace"]["endpoint"] == "https://huggingface.co"


def test_the_example_deployment_renders_cache_source_source_from_repeated_required_dirs():
    code, docs, err = render_example("modeldeployment-cached.yaml", "modeldeployments",
                                     "--required", "required",
                                     "--required", "modelcache-partly-warm")
    assert code == 0, err
    deliveries = {d["spec"]["clusterName"]: d["spec"]["delivery"]
                  for d in docs if d["kind"] == "ModelReplica"}
    assert deliveries == {"gpu-east-1": "Cache", "gpu-east-2": "Source", "gpu-west-1": "Source"}
    assert {d["spec"]["model"]["commit"] for d in docs if d["kind"] == "ModelReplica"} == {
        PINNED}
