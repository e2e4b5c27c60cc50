"""`fleetcache render`: the example through the real pipeline, like crossplane render."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.apis import patterns, xrds
from fleetcache.devtools import cli, render
from fleetcache.functions.decisions import admission
from fleetcache.functions.k8s import objects
from tests.support import xrd
from tests.support.k8s import assert_valid_k8s

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "render"
PINNED = "c1899de289a04d12100db370d81485cdf75e47ca"
XRDS = xrds.load_xrds()


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


def test_the_required_grant_admits_the_example_at_the_digest_compose_model_cache_computes():
    cache = xrds.with_defaults(render.load_documents(
        ROOT / "examples/fleet/modelcache.yaml")[0])
    record = render.load_documents(FIXTURES / "observed/resolve-configmap.yaml")[0]
    manifest = record["status"]["atProvider"]["manifest"]["data"]["manifestDigest"]
    grant = render.load_documents(FIXTURES / "required/modelcachegrant.yaml")[0]
    assert grant["metadata"]["name"] == cache["spec"]["grantRef"]["name"]
    assert grant["status"]["caches"][0]["admittedDigest"] == admission.admission_digest(
        {**cache, "status": {"resolved": {"manifestDigest": manifest}}})


def test_the_rendered_cache_says_its_grant_admitted_it(resolved_render):
    admitted = next(c for c in resolved_render[0]["status"]["conditions"]
                    if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("True", "GrantAdmitted")


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


BUCKET_XRD = {
    "apiVersion": "apiextensions.crossplane.io/v2", "kind": "CompositeResourceDefinition",
    "metadata": {"name": "buckets.fleetcache.dev"},
    "spec": {"group": "fleetcache.dev", "scope": "Namespaced",
             "names": {"kind": "Bucket", "plural": "buckets"},
             "versions": [{"name": "v1alpha1", "served": True, "referenceable": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {
                                   "size": {"type": "string"}}}}}}}]}}


def test_a_fatal_result_is_printed_with_the_output_and_exits_1(tmp_path):
    """A valid XR the function refuses (here: a kind it has no composer for)."""
    (tmp_path / "xrd.yaml").write_text(yaml.safe_dump(BUCKET_XRD))
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump({
        "apiVersion": "fleetcache.dev/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "b", "namespace": "ml"}, "spec": {"size": "1Gi"}}))
    composition = yaml.safe_load((ROOT / "compositions/modelcaches.yaml").read_text())
    composition["spec"]["compositeTypeRef"]["kind"] = "Bucket"
    (tmp_path / "composition.yaml").write_text(yaml.safe_dump(composition))
    code, docs, err = run_cli(str(tmp_path / "xr.yaml"), "--composition",
                              str(tmp_path / "composition.yaml"), "--xrd", str(tmp_path / "xrd.yaml"))
    assert code == 1
    assert "no composer for kind 'Bucket'" in err
    assert docs[-1]["kind"] == "Result" and docs[-1]["severity"] == "SEVERITY_FATAL"


# --- render refuses what the API server would refuse -------------------------------------------


def example_cache() -> dict:
    return render.load_documents(ROOT / "examples/fleet/modelcache.yaml")[0]


def render_cache(tmp_path: Path, cache: dict, *flags: str) -> tuple[int, list[dict], str]:
    """`fleetcache render` of `cache` (written to a file) with the example's state."""
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(cache))
    return run_cli(str(tmp_path / "xr.yaml"),
                   "--composition", str(ROOT / "compositions/modelcaches.yaml"),
                   "--required", str(FIXTURES / "required"), *flags)


def pattern_of(kind: str, field_path: str) -> str:
    return dict(xrds.walk_schema(XRDS[kind].schema))[field_path]["pattern"]


def test_an_xr_the_api_server_would_refuse_prints_nothing_and_exits_1(tmp_path):
    cache = example_cache()
    cache["spec"]["storage"] = {"size": "1e400"}
    code, docs, err = render_cache(tmp_path, cache)
    assert (code, docs) == (1, [])
    assert err.startswith("ModelCache/qwen3-0-6b: spec.storage.size: ")


def test_each_refusal_is_one_line_kind_name_field_path_message(tmp_path):
    cache = example_cache()
    cache["spec"]["storage"] = {"size": "1e400"}
    cache["spec"]["rollout"] = {"maxConcurrent": "ten"}
    _, _, err = render_cache(tmp_path, cache)
    assert err.splitlines() == [
        "ModelCache/qwen3-0-6b: spec.rollout.maxConcurrent: must be of type integer, got 'ten'",
        "ModelCache/qwen3-0-6b: spec.storage.size: must be "
        f"{patterns.PATTERN_MEANINGS[pattern_of('ModelCache', 'spec.storage.size')]}, got '1e400'"]


def test_an_unknown_field_is_refused_since_the_api_server_would_prune_it(tmp_path):
    cache = example_cache()
    cache["spec"]["placment"] = cache["spec"].pop("placement")
    code, _, err = render_cache(tmp_path, cache)
    assert code == 1
    assert "ModelCache/qwen3-0-6b: spec.placment: unknown field 'placment'" in err


PLACEMENT_RULE = next(entry for path, entry in xrds.cel_rules(XRDS["ModelCache"].schema)
                      if path == "spec.placement")


def test_the_xrds_cel_rules_are_evaluated(tmp_path):
    cache = example_cache()
    cache["spec"]["placement"]["clusterNames"] = ["gpu-east-1"]
    code, _, err = render_cache(tmp_path, cache)
    assert code == 1
    assert err == f"ModelCache/qwen3-0-6b: spec.placement: {PLACEMENT_RULE['message']}\n"


@pytest.mark.parametrize("name, why", [
    ("a" * 64, "must be at most 63 characters, got 64"),
    ("Qwen3", "'Qwen3' is not an RFC 1123 subdomain"),
])
def test_an_xr_name_the_api_server_or_crossplane_would_refuse_is_refused(tmp_path, name, why):
    cache = example_cache()
    cache["metadata"]["name"] = name
    code, _, err = render_cache(tmp_path, cache)
    assert code == 1
    assert f"ModelCache/{name}: metadata.name: {why}" in err


def test_a_refusal_quotes_at_most_200_characters_of_input(tmp_path):
    cache = example_cache()
    cache["spec"]["source"]["huggingFace"]["repo"] = "Qwen/" + "x" * 100_000
    cache["spec"]["x" * 100_000] = 1
    code, _, err = render_cache(tmp_path, cache)
    assert code == 1
    assert err.count("\n") >= 2
    assert max(len(line) for line in err.splitlines()) < 700


def test_a_required_resource_the_api_server_would_refuse_is_refused(tmp_path):
    clusters = render.load_documents(FIXTURES / "required")
    clusters[0]["status"]["conditions"][0].pop("lastTransitionTime")
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump_all(clusters))
    code, docs, err = run_cli(str(ROOT / "examples/fleet/modelcache.yaml"),
                              "--composition", str(ROOT / "compositions/modelcaches.yaml"),
                              "--required", str(tmp_path / "clusters.yaml"))
    assert (code, docs) == (1, [])
    assert err == ("FleetCluster/gpu-east-1: status.conditions[0].lastTransitionTime: "
                   "required field 'lastTransitionTime' is missing\n")


def test_the_xrds_default_from_apis_so_render_needs_no_xrd_flag():
    code, docs, err = run_cli(str(ROOT / "examples/fleet/modelcache.yaml"),
                              "--composition", str(ROOT / "compositions/modelcaches.yaml"),
                              "--required", str(FIXTURES / "required"))
    assert code == 0, err
    assert docs[0]["spec"]["rollout"]["maxConcurrent"] == 10


def hydration_flags(old: Path) -> list[str]:
    return [str(FIXTURES / "hydration/modelcachehydration.yaml"),
            "--composition", str(ROOT / "compositions/modelcachehydrations.yaml"),
            "--required", str(FIXTURES / "required"), "--old", str(old)]


def test_old_checks_the_transition_rules_of_an_update(tmp_path):
    old = render.load_documents(FIXTURES / "hydration")[0]
    old["spec"]["clusterName"] = "gpu-west-1"
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    code, docs, err = run_cli(*hydration_flags(tmp_path / "old.yaml"))
    assert (code, docs) == (1, [])
    assert err == ("ModelCacheHydration/qwen3-0-6b-gpu-east-1-89a45: spec.clusterName: "
                   "spec.clusterName is immutable; a cache moves by creating a new hydration\n")


def test_old_lets_an_update_the_transition_rules_allow_render():
    code, docs, err = run_cli(*hydration_flags(FIXTURES / "hydration/modelcachehydration.yaml"))
    assert code == 0, err
    assert "PersistentVolumeClaim" in [d["spec"]["forProvider"]["manifest"]["kind"]
                                       for d in docs if d["kind"] == "Object"]


def test_old_must_be_the_same_object(tmp_path):
    old = render.load_documents(FIXTURES / "hydration")[0]
    old["metadata"]["name"] = "another"
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    code, _, err = run_cli(*hydration_flags(tmp_path / "old.yaml"))
    assert code == 2
    assert err.startswith("fleetcache render: --old is fleetcache.dev/v1alpha1/"
                          "ModelCacheHydration/default/another, not ")


# --- what is composed is checked as the API server would check it -----------------------------


def object_wrapping(manifest: dict) -> dict:
    return {"apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
            "metadata": {"name": "qwen3-0-6b-job"},
            "spec": {"forProvider": {"manifest": manifest}}}


def test_the_manifest_inside_a_composed_object_is_checked_against_the_kubernetes_schema():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fetch"},
           "spec": {"backoffLimt": 3, "template": {"spec": {"restartPolicy": "Never",
                                                             "containers": [{"name": "a"}]}}}}
    found = [str(r) for r in render.composed_refusals([object_wrapping(job)], XRDS)]
    assert found == ["Object/qwen3-0-6b-job: spec.forProvider.manifest.spec.backoffLimt: "
                     "unknown field 'backoffLimt': the API server would drop it; check its "
                     "spelling and indentation"]


def test_a_composed_manifest_name_is_checked_as_its_kind_requires():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "engine.v1"}}
    found = [str(r) for r in render.composed_refusals([object_wrapping(service)], XRDS)]
    assert found == ["Object/qwen3-0-6b-job: spec.forProvider.manifest.metadata.name: "
                     "'engine.v1' is not an RFC 1123 label (lower case letters, digits and '-';"
                     " start and end with a letter or digit)"]


def test_a_composed_fleetcache_kind_is_checked_against_its_xrd_without_its_status():
    hydration = render.load_documents(FIXTURES / "hydration")[0]
    hydration["spec"]["storage"]["size"] = "-1Gi"
    hydration["status"] = {"anything": "the status subresource ignores it"}
    found = [str(r) for r in render.composed_refusals([hydration], XRDS)]
    assert found == ["ModelCacheHydration/qwen3-0-6b-gpu-east-1-89a45: spec.storage.size: "
                     "must be "
                     f"{patterns.PATTERN_MEANINGS[pattern_of('ModelCacheHydration', 'spec.storage.size')]}"
                     ", got '-1Gi'"]


def test_a_composed_kind_without_a_schema_gets_its_names_checked():
    config = {"apiVersion": objects.OBJECT_API_VERSION, "kind": "ClusterProviderConfig",
              "metadata": {"name": "GPU"}, "spec": {"anything": True}}
    found = [str(r) for r in render.composed_refusals([config], XRDS)]
    assert found == ["ClusterProviderConfig/GPU: metadata.name: 'GPU' is not an RFC 1123 "
                     "subdomain (lower case letters, digits and '-', dots between labels; start "
                     "and end with a letter or digit)"]


COMPOSITION_OF = {"FleetCluster": "fleetclusters", "ModelCache": "modelcaches",
                  "ModelCacheGrant": "modelcachegrants", "ModelDeployment": "modeldeployments"}
SINGLE_XR_EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", SINGLE_XR_EXAMPLES)
def test_every_example_renders_output_the_api_server_would_accept(example):
    kind = render.load_documents(ROOT / "examples" / example)[0]["kind"]
    code, docs, err = render_example(example, COMPOSITION_OF[kind], "--required", "required",
                                     "--required", "modelcache-partly-warm")
    assert (code, err) == (0, "")
    assert docs[0]["kind"] == kind


def test_a_composed_model_replica_renders_a_deployment_the_api_server_would_accept(tmp_path):
    _, docs, _ = render_example("modeldeployment-cached.yaml", "modeldeployments",
                                "--required", "required", "--required", "modelcache-partly-warm")
    replica = next(d for d in docs if d["kind"] == "ModelReplica")
    replica["metadata"] = {k: replica["metadata"][k] for k in ("name", "namespace")}
    (tmp_path / "replica.yaml").write_text(yaml.safe_dump(replica))
    code, docs, err = run_cli(str(tmp_path / "replica.yaml"),
                              "--composition", str(ROOT / "compositions/modelreplicas.yaml"),
                              "--required", str(FIXTURES / "required"),
                              "--required", str(ROOT / "examples/modeldeployment-cached.yaml"))
    assert (code, err) == (0, "")
    assert "Deployment" in [d["spec"]["forProvider"]["manifest"]["kind"]
                            for d in docs if d["kind"] == "Object"]


# --- render cannot run: one line, exit code 2 ---------------------------------------------------


def test_a_composition_for_another_kind_exits_2(tmp_path):
    code, docs, err = run_cli(str(ROOT / "examples/fleet/modelcache.yaml"),
                              "--composition", str(ROOT / "compositions/modeldeployments.yaml"))
    assert (code, docs) == (2, [])
    assert err == ("fleetcache render: Composition 'modeldeployments.fleetcache.dev' composes "
                   "'ModelDeployment' ('fleetcache.dev/v1alpha1'), not 'ModelCache' "
                   "('fleetcache.dev/v1alpha1'); pass the Composition whose "
                   "spec.compositeTypeRef names the XR's apiVersion and kind\n")


def test_malformed_yaml_exits_2_with_one_line_naming_file_and_line(tmp_path):
    (tmp_path / "xr.yaml").write_text("apiVersion: v1\nkind: [ModelCache\nspec: {}\n")
    code, docs, err = run_cli(str(tmp_path / "xr.yaml"),
                              "--composition", str(ROOT / "compositions/modelcaches.yaml"))
    assert (code, docs) == (2, [])
    assert err.startswith(f"fleetcache render: {tmp_path / 'xr.yaml'}: not valid YAML: ")
    assert "at line 3, column 5" in err and err.count("\n") == 1


def test_a_missing_file_exits_2_with_one_line(tmp_path):
    code, _, err = run_cli(str(ROOT / "examples/fleet/modelcache.yaml"),
                           "--composition", str(ROOT / "compositions/modelcaches.yaml"),
                           "--required", str(tmp_path / "nothing-here"))
    assert code == 2
    assert err == f"fleetcache render: {tmp_path / 'nothing-here'}: no such file or directory\n"


def test_an_unreachable_address_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "CONNECT_TIMEOUT_SECONDS", 0.5)
    address = f"127.0.0.1:{render.free_port()}"
    code, docs, err = render_cache(tmp_path, example_cache(), "--address", address)
    assert (code, docs) == (2, [])
    assert err == (f"fleetcache render: no function server answered at {address} within 0.5s;"
                   " check --address (host:port) and that fleetcache-function runs there\n")


def test_an_xr_file_holding_the_same_composite_twice_exits_2(tmp_path):
    cache = yaml.safe_dump(example_cache())
    (tmp_path / "xr.yaml").write_text(cache + "---\n" + cache)
    code, _, err = run_cli(str(tmp_path / "xr.yaml"),
                           "--composition", str(ROOT / "compositions/modelcaches.yaml"))
    assert code == 2
    assert err == (f"fleetcache render: {tmp_path / 'xr.yaml'}: holds fleetcache.dev/v1alpha1/ModelCache/default/"
                   "qwen3-0-6b twice (kubectl apply would apply the second over the first); keep one\n")


def test_requirements_are_answered_only_with_matching_resources():
    selector_docs = render.load_documents(FIXTURES / "required")
    requirements = fnv1.Requirements()
    requirements.resources["one"].CopyFrom(fnv1.ResourceSelector(
        api_version="fleetcache.dev/v1alpha1", kind="FleetCluster", match_name="gpu-west-1"))
    answered = render.answer_requirements(requirements, selector_docs)
    assert [d["metadata"]["name"] for d in answered["one"]] == ["gpu-west-1"]


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


def test_an_observed_resource_without_its_resource_name_exits_2(tmp_path):
    observed = render.load_documents(FIXTURES / "observed")[0]
    del observed["metadata"]["annotations"][render.RESOURCE_NAME_ANNOTATION]
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump(observed))
    code, _, err = render_example("fleet/modelcache.yaml", "modelcaches", "--required", "required",
                                  "--observed", str(tmp_path / "observed.yaml"))
    assert code == 2
    assert err == (f"fleetcache render: observed 'Object' {observed['metadata']['name']!r} has no "
                   f"{render.RESOURCE_NAME_ANNOTATION} annotation\n")


# --- a file of several composite resources, as kubectl apply -f takes it -----------------------

FLEET = ROOT / "examples/fleet/fleetclusters.yaml"
REPLICA = "ModelReplica/qwen3-chat-0-b622c"


def names_of(docs: list[dict], kind: str) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d["kind"] == kind]


def write_all(path: Path, docs: list[dict]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def renamed(doc: dict, name: str) -> dict:
    return {**doc, "metadata": {**doc["metadata"], "name": name}}


def test_every_composite_of_a_multi_document_file_is_rendered_in_turn():
    code, docs, err = run_cli(str(FLEET), "--composition", str(ROOT / "compositions/fleetclusters.yaml"))
    assert (code, err) == (0, "")
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        (kind, name) for name in ("gpu-east-1", "gpu-east-2", "gpu-west-1")
        for kind in ("FleetCluster", "ClusterProviderConfig")]


def test_each_composite_s_block_opens_with_a_comment_naming_it():
    result = CliRunner().invoke(cli.main, ["render", str(FLEET), "--composition", str(ROOT / "compositions")])
    headers = [line for line in result.stdout.splitlines() if line.startswith("#")]
    assert headers == ["# FleetCluster/gpu-east-1 (1 of 3)", "# FleetCluster/gpu-east-2 (2 of 3)",
                       "# FleetCluster/gpu-west-1 (3 of 3)"]


def test_several_composites_are_rendered_by_one_function_server(monkeypatch):
    started = []
    real = render.function_process

    def counted():
        started.append(1)
        return real()

    monkeypatch.setattr(render, "function_process", counted)
    code, _, err = run_cli(str(FLEET), "--composition", str(ROOT / "compositions/fleetclusters.yaml"))
    assert (code, err, started) == (0, "", [1])


def test_each_kind_is_rendered_with_the_composition_that_composes_it(tmp_path):
    xr = write_all(tmp_path / "xr.yaml", [*render.load_documents(FLEET)[:1], example_cache()])
    code, docs, err = run_cli(xr, "--composition", str(ROOT / "compositions"), "--required", str(FIXTURES / "required"))
    assert (code, err) == (0, "")
    assert names_of(docs, "ClusterProviderConfig") == ["gpu-east-1"]
    assert "Job" in [d["spec"]["forProvider"]["manifest"]["kind"] for d in docs if d["kind"] == "Object"]


def test_a_kind_no_given_composition_composes_exits_2_naming_the_given_ones(tmp_path):
    code, docs, err = run_cli(str(FLEET), "--composition", str(ROOT / "compositions/modelcaches.yaml"),
                              "--composition", str(ROOT / "compositions/modelcachegrants.yaml"))
    assert (code, docs) == (2, [])
    assert err == ("fleetcache render: no Composition given composes 'FleetCluster' ('fleetcache.dev/v1alpha1') "
                   "(given: modelcaches.fleetcache.dev (ModelCache), modelcachegrants.fleetcache.dev "
                   "(ModelCacheGrant)); add the one whose spec.compositeTypeRef names the XR's apiVersion and kind "
                   "with --composition\n")


def test_two_compositions_of_one_kind_exit_2_rather_than_guess(tmp_path):
    composition = yaml.safe_load((ROOT / "compositions/fleetclusters.yaml").read_text())
    other = write_all(tmp_path / "other.yaml", [renamed(composition, "fleetclusters-other")])
    code, docs, err = run_cli(str(FLEET), "--composition", str(ROOT / "compositions"), "--composition", other)
    assert (code, docs) == (2, [])
    assert err == ("fleetcache render: Compositions fleetclusters.fleetcache.dev, fleetclusters-other all compose "
                   "'FleetCluster' ('fleetcache.dev/v1alpha1'); pass only the one to render with\n")


def test_every_refused_composite_is_named_and_nothing_is_printed(tmp_path):
    fleet = render.load_documents(FLEET)
    fleet[0]["spec"]["cache"]["capacity"] = "lots"
    fleet[2]["spec"]["cache"]["accessMode"] = "ReadWriteSometimes"
    code, docs, err = run_cli(write_all(tmp_path / "xr.yaml", fleet),
                              "--composition", str(ROOT / "compositions/fleetclusters.yaml"))
    assert (code, docs) == (1, [])
    assert [line.split(":")[0] for line in err.splitlines()] == ["FleetCluster/gpu-east-1", "FleetCluster/gpu-west-1"]


def test_with_several_composites_each_is_rendered_with_the_observed_resources_labelled_for_it(tmp_path):
    observed = render.load_documents(FIXTURES / "observed")[0]
    observed["metadata"].setdefault("labels", {})[render.COMPOSITE_LABEL] = "qwen3-0-6b"
    xr = write_all(tmp_path / "xr.yaml", [example_cache(), renamed(example_cache(), "other")])
    code, docs, err = run_cli(xr, "--composition", str(ROOT / "compositions"),
                              "--required", str(FIXTURES / "required"),
                              "--observed", write_all(tmp_path / "observed.yaml", [observed]))
    assert (code, err) == (0, "")
    caches = [d for d in docs if d["kind"] == "ModelCache"]
    assert [("resolved" in c["status"]) for c in caches] == [True, False]


def test_with_several_composites_an_observed_resource_labelled_for_none_exits_2(tmp_path):
    xr = write_all(tmp_path / "xr.yaml", [example_cache(), renamed(example_cache(), "other")])
    code, _, err = run_cli(xr, "--composition", str(ROOT / "compositions"), "--required", str(FIXTURES / "required"),
                           "--observed", str(FIXTURES / "observed"))
    assert code == 2
    assert err.startswith("fleetcache render: observed 'Object' ")
    assert err.endswith(f"is labelled crossplane.io/composite=None, not the name of one of the 2 composite resources "
                        f"in {xr}; with several, each is rendered with the observed resources labelled with its name\n")


def test_old_checks_each_composite_against_its_own_earlier_version(tmp_path):
    hydration = render.load_documents(FIXTURES / "hydration")[0]
    old = {**hydration, "spec": {**hydration["spec"], "clusterName": "gpu-west-1"}}
    xr = write_all(tmp_path / "xr.yaml", [hydration, renamed(hydration, "another")])
    code, docs, err = run_cli(xr, "--composition", str(ROOT / "compositions"),
                              "--required", str(FIXTURES / "required"),
                              "--old", write_all(tmp_path / "old.yaml", [old]))
    assert (code, docs) == (1, [])
    assert err == ("ModelCacheHydration/qwen3-0-6b-gpu-east-1-89a45: spec.clusterName: "
                   "spec.clusterName is immutable; a cache moves by creating a new hydration\n")


def fatal_flags(tmp_path: Path, *names: str) -> list[str]:
    """A valid XR per name that the function refuses (a kind it has no composer for)."""
    (tmp_path / "xrd.yaml").write_text(yaml.safe_dump(BUCKET_XRD))
    composition = yaml.safe_load((ROOT / "compositions/modelcaches.yaml").read_text())
    composition["spec"]["compositeTypeRef"]["kind"] = "Bucket"
    buckets = [{"apiVersion": "fleetcache.dev/v1alpha1", "kind": "Bucket",
                "metadata": {"name": name, "namespace": "ml"}, "spec": {"size": "1Gi"}} for name in names]
    return [write_all(tmp_path / "xr.yaml", buckets),
            "--composition", write_all(tmp_path / "composition.yaml", [composition]),
            "--xrd", str(tmp_path / "xrd.yaml")]


def test_each_fatal_result_is_printed_naming_its_composite(tmp_path):
    code, docs, err = run_cli(*fatal_flags(tmp_path, "a", "b"))
    assert code == 1
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Bucket"] == ["a", "b"]
    assert [line.split(": fatal result: ")[0] for line in err.splitlines()] == [
        "fleetcache render: Bucket/a", "fleetcache render: Bucket/b"]


# --- --only: one rendered object --------------------------------------------------------------


def render_deployment(*flags: str) -> tuple[int, list[dict], str]:
    return run_cli(str(ROOT / "examples/modeldeployment-cached.yaml"),
                   "--composition", str(ROOT / "compositions/modeldeployments.yaml"),
                   "--required", str(FIXTURES / "required"),
                   "--required", str(FIXTURES / "modelcache-partly-warm"), *flags)


def test_only_prints_just_the_selected_replica():
    code, docs, err = render_deployment("--only", REPLICA)
    assert (code, err) == (0, "")
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("ModelReplica", "qwen3-chat-0-b622c")]


def test_only_takes_the_kind_in_any_case():
    code, docs, _ = render_deployment("--only", REPLICA.lower())
    assert (code, names_of(docs, "ModelReplica")) == (0, ["qwen3-chat-0-b622c"])


def test_the_selected_replica_renders_as_it_is_printed(tmp_path):
    _, docs, _ = render_deployment("--only", REPLICA)
    code, rendered, err = run_cli(write_all(tmp_path / "replica.yaml", docs),
                                  "--composition", str(ROOT / "compositions"),
                                  "--required", str(FIXTURES / "required"),
                                  "--required", str(ROOT / "examples/modeldeployment-cached.yaml"))
    assert (code, err) == (0, "")
    assert "Deployment" in [d["spec"]["forProvider"]["manifest"]["kind"] for d in rendered if d["kind"] == "Object"]


def test_only_that_matches_nothing_exits_2_naming_what_was_rendered():
    code, docs, err = render_deployment("--only", "ModelReplica/qwen3-chat-9")
    assert (code, docs) == (2, [])
    assert err.startswith("fleetcache render: --only 'ModelReplica/qwen3-chat-9' matched nothing rendered: "
                          "ModelDeployment/qwen3-chat, ModelReplica/qwen3-chat-0-b622c, ")


def test_only_without_kind_and_name_exits_2_before_rendering():
    code, docs, err = render_deployment("--only", "qwen3-chat-0-b622c")
    assert (code, docs) == (2, [])
    assert err == ("fleetcache render: --only 'qwen3-chat-0-b622c': expected KIND/NAME, e.g. "
                   "ModelReplica/qwen3-chat-0-b622c\n")


# --- conditions stamped as Crossplane stamps them -------------------------------------------

EARLIER = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
LATER = EARLIER + datetime.timedelta(minutes=7)
ONE_STEP = {"spec": {"pipeline": [{"step": "compose"}]}}
STATUS = {"True": fnv1.STATUS_CONDITION_TRUE, "False": fnv1.STATUS_CONDITION_FALSE}


class Reporting:
    """A function that returns `condition` (type, status, reason, message) and Ready."""

    def __init__(self, *condition: str) -> None:
        self.condition = condition

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the stub's name
                    ) -> fnv1.RunFunctionResponse:
        kind, status, reason, message = self.condition
        rsp = fnv1.RunFunctionResponse(desired=request.desired)
        rsp.desired.composite.ready = fnv1.READY_TRUE
        rsp.conditions.add(type=kind, status=STATUS[status], reason=reason, message=message)
        return rsp


def rendered_at(now: datetime.datetime, composite: dict, *condition: str) -> dict:
    """The composite after one render at `now` whose function returns `condition`."""
    return render.run_pipeline(Reporting(*condition), composite, ONE_STEP, clock=lambda: now).composite


def transition_times(composite: dict) -> dict[str, str]:
    return {c["type"]: c["lastTransitionTime"] for c in composite["status"]["conditions"]}


HYDRATED = ("Hydrated", "False", "HydrationFailed", "digest mismatch")
XR = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCacheHydration",
      "metadata": {"name": "qwen-gpu-east-1"}}


def test_a_returned_condition_is_stamped_with_the_renders_clock():
    assert transition_times(rendered_at(EARLIER, XR, *HYDRATED)) == {
        "Hydrated": "2026-05-01T12:00:00Z", "Ready": "2026-05-01T12:00:00Z"}


def test_a_condition_returned_unchanged_keeps_its_transition_time():
    again = rendered_at(LATER, rendered_at(EARLIER, XR, *HYDRATED), *HYDRATED)
    assert transition_times(again) == {"Hydrated": "2026-05-01T12:00:00Z",
                                       "Ready": "2026-05-01T12:00:00Z"}


@pytest.mark.parametrize("changed", [("Hydrated", "True", "HydrationFailed", "digest mismatch"),
                                     ("Hydrated", "False", "Hydrating", "digest mismatch"),
                                     ("Hydrated", "False", "HydrationFailed", "timed out")],
                         ids=["status", "reason", "message"])
def test_a_condition_whose_status_reason_or_message_changed_is_stamped_anew(changed):
    again = rendered_at(LATER, rendered_at(EARLIER, XR, *HYDRATED), *changed)
    assert transition_times(again) == {"Hydrated": "2026-05-01T12:07:00Z",
                                       "Ready": "2026-05-01T12:00:00Z"}
