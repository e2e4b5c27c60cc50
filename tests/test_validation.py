"""fleetcache.validation: what the API server would refuse, checked without one.

XRs against their XRD (defaults, OpenAPI schema with unknown fields, CEL rules with
transition rules on update, names); Kubernetes manifests against the Kubernetes 1.37 schema
(strict, quantities, names, labels); YAML files read with bounded cost. `fleetcache render`
builds on these (tests/test_render.py); the XRDs' own rules are specified in tests/test_apis.py.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from fleetcache.apis import cel, documents, xrds
from fleetcache.apis.xrds import Violation
from fleetcache.devtools import manifests

ROOT = Path(__file__).resolve().parents[1]
XRDS = xrds.load_xrds()


def model_cache() -> dict:
    return copy.deepcopy(documents.load_documents(ROOT / "examples/fleet/modelcache.yaml")[0])


def job(**spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fetch"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "agent", "image": "agent:1"}]}}, **spec}}


# --- loading the XRDs ------------------------------------------------------------------------


def test_the_repository_xrds_load_by_the_kind_each_defines():
    assert set(XRDS) == {"FleetCluster", "ModelCache", "ModelCacheGrant", "ModelCacheHydration",
                         "ModelDeployment", "ModelReplica"}


def test_xrds_load_from_the_files_given_instead_of_the_repository(tmp_path):
    xrd = yaml.safe_load((ROOT / "apis/fleetclusters/definition.yaml").read_text())
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(xrd))
    assert set(xrds.load_xrds([tmp_path])) == {"FleetCluster"}


def test_no_xrd_is_found_for_a_kind_none_defines():
    assert xrds.xrd_for_kind("Bucket") is None
    assert xrds.violations({"kind": "Bucket"}) == [
        Violation("kind", "no XRD defines kind 'Bucket'")]


# --- defaults --------------------------------------------------------------------------------


def test_defaults_are_filled_in_as_the_api_server_would():
    spec = xrds.with_defaults(model_cache())["spec"]
    assert spec["rollout"]["maxConcurrent"] == 10
    assert spec["source"]["huggingFace"]["endpoint"] == "https://huggingface.co"


def test_a_given_value_is_kept_over_its_default():
    cache = model_cache()
    cache["spec"]["rollout"] = {"maxConcurrent": 2}
    assert xrds.with_defaults(cache)["spec"]["rollout"]["maxConcurrent"] == 2


def test_defaults_apply_inside_map_values():
    schema = {"type": "object", "additionalProperties": {
        "type": "object", "properties": {"mode": {"type": "string", "default": "Cache"}}}}
    assert xrds.apply_defaults(schema, {"a": {}, "b": {"mode": "Source"}}) == {
        "a": {"mode": "Cache"}, "b": {"mode": "Source"}}


def test_an_object_of_a_kind_without_an_xrd_is_left_as_it_is():
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}
    assert xrds.with_defaults(secret) == secret


# --- the OpenAPI schema -----------------------------------------------------------------------


def test_the_example_is_valid():
    assert xrds.violations(model_cache()) == []


def test_an_unknown_field_is_a_violation_on_its_own_path():
    cache = model_cache()
    cache["spec"]["source"]["huggingFace"]["revison"] = "main"
    assert xrds.violations(cache) == [Violation(
        "spec.source.huggingFace.revison", "unknown field 'revison': the API server would drop "
                                           "it; check its spelling and indentation")]


def test_a_missing_required_field_is_a_violation_on_its_path():
    cache = model_cache()
    del cache["spec"]["source"]
    assert Violation("spec.source", "required field 'source' is missing") in \
        xrds.violations(cache)


def test_a_value_is_quoted_in_at_most_200_characters():
    cache = model_cache()
    cache["spec"]["source"]["huggingFace"]["revision"] = "x" * 1_000_000
    found = xrds.violations(cache)
    assert found and all(len(v.message) < 400 for v in found)


def test_a_rule_is_not_reported_when_the_schema_already_refuses_its_value_type():
    cache = model_cache()
    cache["spec"]["rollout"] = {"maxConcurrent": "ten"}
    assert xrds.violations(cache) == [
        Violation("spec.rollout.maxConcurrent", "must be of type integer, got 'ten'")]


def test_a_repeated_key_in_a_map_list_is_a_violation():
    cache = model_cache()
    cache["status"] = {"clusters": [{"name": "gpu-east-1"}, {"name": "gpu-east-1"}]}
    assert Violation("status.clusters[1]", "duplicate entry for key name='gpu-east-1'") in \
        xrds.violations(cache)


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name, message", [
    ("a" * 64, "must be at most 63 characters, got 64"),
    ("Qwen", "'Qwen' is not an RFC 1123 subdomain (lower case letters, digits and '-', dots "
             "between labels; start and end with a letter or digit)"),
    ("", "is required and must be an RFC 1123 subdomain, got ''"),
])
def test_an_xr_name_the_api_server_or_crossplane_refuses_is_a_violation(name, message):
    cache = model_cache()
    cache["metadata"]["name"] = name
    assert Violation("metadata.name", message) in xrds.violations(cache)


@pytest.mark.parametrize("path", ["examples/fleet/modelcache.yaml", "examples/fleet/fleetclusters.yaml"])
def test_a_name_too_long_is_refused_once(path):
    """The metadata rules and the CRD schema's maxLength both cap the name: one problem, one
    refusal."""
    obj = copy.deepcopy(documents.load_documents(ROOT / path)[0])
    obj["metadata"]["name"] = "a" * 70
    assert [v for v in xrds.violations(obj) if v.path == "metadata.name"] == \
        [Violation("metadata.name", "must be at most 63 characters, got 70")]


def test_a_limit_of_one_is_said_in_the_singular():
    cache = model_cache()
    cache["spec"]["grantRef"]["name"] = ""
    assert Violation("spec.grantRef.name", "must be at least 1 character, got ''") in \
        xrds.violations(cache)


def test_a_namespace_must_be_a_dns_label():
    cache = model_cache()
    cache["metadata"]["namespace"] = "ml.team"
    assert [v.path for v in xrds.violations(cache)] == ["metadata.namespace"]


def test_a_label_value_the_api_server_refuses_is_a_violation():
    cache = model_cache()
    cache["metadata"]["labels"] = {"team": "ML team"}
    assert [v.path for v in xrds.violations(cache)] == ["metadata.labels.team"]


def test_a_label_key_the_api_server_refuses_is_a_violation():
    cache = model_cache()
    cache["metadata"]["labels"] = {"Example.com/team": "ml"}
    assert [v.path for v in xrds.violations(cache)] == ["metadata.labels.Example.com/team"]


# --- CEL ---------------------------------------------------------------------------------------


def test_each_rule_is_compiled_once_however_often_it_is_evaluated():
    xrds.violations(model_cache())
    compiled = cel.compile_rule.cache_info().misses
    for _ in range(5):
        xrds.violations(model_cache())
    assert cel.compile_rule.cache_info().misses == compiled


def test_cel_violations_evaluate_only_the_rules():
    cache = model_cache()
    cache["spec"]["placement"]["clusterNames"] = ["gpu-east-1"]
    cache["spec"]["placment"] = {}
    assert [(v.path, bool(v.rule)) for v in xrds.cel_violations(cache)] == [
        ("spec.placement", True)]


def test_checking_a_specs_rules_takes_milliseconds():
    """Composers may check a spec's rules on every request."""
    cache = xrds.with_defaults(model_cache())
    xrds.cel_violations(cache)
    start = time.process_time()
    for _ in range(20):
        xrds.cel_violations(cache)
    assert (time.process_time() - start) / 20 < 0.05


def hydration() -> dict:
    return documents.load_documents(ROOT / "tests/fixtures/render/hydration")[0]


def test_a_transition_rule_is_skipped_on_create():
    changed = hydration()
    changed["spec"]["clusterName"] = "gpu-west-1"
    assert xrds.violations(changed) == []


def test_a_transition_rule_is_enforced_on_update():
    changed = hydration()
    changed["spec"]["clusterName"] = "gpu-west-1"
    assert [(v.path, v.rule) for v in xrds.violations(changed, old=hydration())] == [
        ("spec.clusterName", "self == oldSelf")]


def test_a_transition_rule_is_skipped_where_the_old_object_had_no_value():
    old = hydration()
    del old["spec"]["clusterName"]
    changed = hydration()
    changed["spec"]["clusterName"] = "gpu-west-1"
    assert xrds.violations(changed, old=old) == []


IMMUTABLE_SIZES = {"type": "array", "x-kubernetes-list-type": "map",
                   "x-kubernetes-list-map-keys": ["name"], "items": {
                       "type": "object", "x-kubernetes-validations": [
                           {"rule": "self.size == oldSelf.size", "message": "size is immutable"}],
                       "properties": {"name": {"type": "string"}, "size": {"type": "string"}}}}


def test_old_items_of_a_map_list_are_found_by_their_key_not_their_position():
    old = [{"name": "a", "size": "1Gi"}, {"name": "b", "size": "2Gi"}]
    reordered = [{"name": "b", "size": "2Gi"}, {"name": "a", "size": "1Gi"}]
    grown = [{"name": "b", "size": "3Gi"}, {"name": "a", "size": "1Gi"}]
    assert xrds.cel_walk(IMMUTABLE_SIZES, reordered, old) == []
    assert [v.path for v in xrds.cel_walk(IMMUTABLE_SIZES, grown, old)] == ["[0]"]


def test_items_of_an_atomic_list_have_no_old_value():
    atomic = {**IMMUTABLE_SIZES, "x-kubernetes-list-type": "atomic"}
    old = [{"name": "a", "size": "1Gi"}]
    assert xrds.cel_walk(atomic, [{"name": "a", "size": "2Gi"}], old) == []


# --- Kubernetes manifests ----------------------------------------------------------------------


def test_a_valid_manifest_has_no_violations():
    assert manifests.manifest_violations(job()) == []


def test_a_manifest_is_checked_strictly_against_its_kinds_schema():
    assert manifests.manifest_violations(job(backofLimit=3)) == [Violation(
        "spec.backofLimit", "unknown field 'backofLimit': the API server would drop it; check "
                            "its spelling and indentation")]


@pytest.mark.parametrize("value", ["1e400", float("inf"), "12 Gi", "-1"])
def test_a_quantity_the_api_server_cannot_parse_is_a_violation(value):
    manifest = job()
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"memory": value}}
    assert [v.path for v in manifests.manifest_violations(manifest)] == [
        "spec.template.spec.containers[0].resources.requests.memory"]


def test_a_kind_named_by_dns_label_refuses_a_dotted_name():
    manifest = job()
    manifest["metadata"]["name"] = "fetch.v1"
    assert [v.path for v in manifests.manifest_violations(manifest)] == ["metadata.name"]


def test_a_kind_the_kubernetes_schema_does_not_define_gets_only_its_metadata_checked():
    config = {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "ClusterProviderConfig",
              "metadata": {"name": "gpu-east-1"}, "spec": {"anything": 1}}
    assert manifests.has_k8s_schema(config) is False
    assert manifests.manifest_violations(config) == []


def test_a_kind_under_an_api_version_that_does_not_serve_it_has_no_schema():
    assert manifests.has_k8s_schema({"apiVersion": "apps/v1", "kind": "ConfigMap"}) is False
    assert manifests.has_k8s_schema({"apiVersion": "v1", "kind": "ConfigMap"}) is True


# --- reading YAML ---------------------------------------------------------------------------


def test_a_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(documents.DocumentError, match="no such file or directory$"):
        documents.load_documents(tmp_path / "absent.yaml")


def test_malformed_yaml_names_the_file_line_and_column(tmp_path):
    (tmp_path / "bad.yaml").write_text("spec:\n  size: [1Gi\n")
    with pytest.raises(documents.DocumentError) as caught:
        documents.load_documents(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'bad.yaml'}: not valid YAML: ")
    assert "line 3, column 1" in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    (tmp_path / "x.yaml").write_bytes(b"kind: \xff\xfe\n")
    with pytest.raises(documents.DocumentError, match="not UTF-8 text$"):
        documents.load_documents(tmp_path / "x.yaml")


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    start = time.process_time()
    with pytest.raises(documents.DocumentError, match="once aliases are expanded"):
        documents.load_documents(tmp_path / "bomb.yaml")
    assert time.process_time() - start < 5


def test_nesting_deeper_than_any_manifest_is_refused(tmp_path):
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(documents.DocumentError, match="levels of nesting"):
        documents.load_documents(tmp_path / "deep.yaml")


def test_nesting_deeper_than_the_parser_can_follow_is_refused(tmp_path):
    (tmp_path / "deep.yaml").write_text("[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(documents.DocumentError, match="nested too deeply"):
        documents.load_documents(tmp_path / "deep.yaml")


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "MAX_FILE_BYTES", 10)
    (tmp_path / "big.yaml").write_text("kind: ConfigMap\n")
    with pytest.raises(documents.DocumentError, match="larger than"):
        documents.load_documents(tmp_path / "big.yaml")


def test_an_integer_beyond_int64_is_refused_as_the_api_server_cannot_decode_it():
    count = jsonschema.Draft7Validator(xrds.to_jsonschema({"type": "integer"}))
    assert xrds.schema_violations(count, 2**63 - 1) == []
    assert xrds.schema_violations(count, 2**64) == [
        Violation("", f"must be at most {2**63 - 1}, got {2**64}")]


def test_a_kind_that_is_no_string_has_no_xrd_and_no_kubernetes_schema():
    odd = {"apiVersion": "v1" * 5000, "kind": ["Job"], "metadata": {"name": "x"}}
    assert xrds.xrd_for_kind(odd["kind"]) is None
    assert manifests.has_k8s_schema(odd) is False
    assert manifests.manifest_violations(odd) == []


def test_without_the_repository_xrds_loading_fails_instead_of_passing_everything(
        tmp_path, monkeypatch):
    monkeypatch.setattr(xrds, "APIS", tmp_path)
    xrds._repo_xrds.cache_clear()
    try:
        with pytest.raises(documents.DocumentError, match="no apis/\\*/definition.yaml"):
            xrds.load_xrds()
    finally:
        monkeypatch.undo()
        xrds._repo_xrds.cache_clear()


def test_a_field_path_carries_at_most_200_characters_of_a_key_from_input():
    cache = model_cache()
    cache["spec"]["x" * 10_000] = 1
    assert [len(v.path) for v in xrds.violations(cache)] == [len("spec.") + 200]
