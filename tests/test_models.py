"""The typed API models: generated from the XRDs, and how composers read a spec through them.

`fleetcache.apigen` turns each XRD's schema into a pydantic module under functions/models/;
the checked-in modules must be exactly what it generates now. `kit.read_spec` reads a spec
through its kind's model and the XRD's CEL rules, and turns every problem into one line
naming the field path and what is allowed.
"""

from __future__ import annotations

import importlib
import re
import time

import pytest
import yaml

from fleetcache import quantity
from fleetcache.apis import specs, xrds
from fleetcache.apis.models import fleet_cluster, model_cache, model_deployment
from fleetcache.apis.patterns import PATTERN_MEANINGS, POSITIVE_QUANTITY
from fleetcache.apis.xrds import walk_schema
from fleetcache.devtools import apigen
from fleetcache.functions import naming
from tests.support.xrd import example_docs, is_fleetcache_kind

XRD_PATHS = apigen.xrd_paths()
KINDS = [yaml.safe_load(path.read_text())["spec"]["names"]["kind"] for path in XRD_PATHS]
QUANTITY_FIELDS = ("size", "capacity", "bandwidth", "sharedMemorySize")


def cache_spec(**fields) -> dict:
    spec = {"grantRef": {"name": "team-a"},
            "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
            "placement": {"clusterNames": ["gpu-east-1"]}}
    spec.update(fields)
    return spec


def deployment_spec(**engine) -> dict:
    return {"modelCacheRef": {"name": "qwen"}, "placement": {"clusterNames": ["gpu-east-1"]},
            "engine": {"image": "vllm/vllm-openai:v0.11.0", **engine}}


def error_of(model, spec) -> str:
    with pytest.raises(specs.InputError) as err:
        specs.read_spec(model, spec)
    return str(err.value)


# --- generation ---------------------------------------------------------------------------


def test_checked_in_models_are_exactly_what_the_generator_makes_from_the_xrds(tmp_path):
    apigen.write(apigen.generate_all(), tmp_path)
    generated = {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir())}
    checked_in = {p.name: p.read_bytes() for p in sorted(apigen.MODELS.glob("*.py"))}
    assert sorted(generated) == sorted(checked_in), "run `make models`"
    for name, content in generated.items():
        assert content == checked_in[name], f"functions/models/{name} is stale: run `make models`"


def test_generated_files_carry_no_timestamp_and_name_their_source():
    for path in XRD_PATHS:
        _, source = apigen.generate(path)
        header = source.split("\n\n", 1)[0]
        assert path.relative_to(apigen.REPO).as_posix() in header
        assert not re.search(r"\d{4}-\d{2}-\d{2}", header)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_root_model_named_after_it_that_requires_spec(kind):
    module = importlib.import_module(f"fleetcache.apis.models.{apigen.snake_case(kind)}")
    root = getattr(module, kind)
    assert root.model_fields["spec"].is_required()


# --- reading a spec: defaults and what is accepted ----------------------------------------


@pytest.mark.parametrize("entry", [e for e in example_docs() if is_fleetcache_kind(e[2])],
                         ids=lambda e: f"{e[0].name}#{e[1]}")
def test_an_example_reads_as_the_api_server_stores_it_with_the_xrd_defaults(entry):
    _, _, doc = entry
    module = importlib.import_module(
        f"fleetcache.apis.models.{apigen.snake_case(doc['kind'])}")
    read = specs.read_spec(getattr(module, doc["kind"]), doc["spec"])
    assert read == xrds.with_defaults(doc)["spec"]


def test_nested_defaults_fill_in_when_their_object_defaults_to_empty():
    spec = specs.read_spec(model_cache.ModelCache, cache_spec())
    assert spec["rollout"] == {"maxConcurrent": 10, "bakeTime": "0m", "progressDeadline": "30m",
                               "onFailure": "Halt"}
    assert spec["job"] == {"backoffLimit": 3, "activeDeadlineSeconds": 21600,
                           "ttlSecondsAfterFinished": 3600}
    assert spec["source"]["huggingFace"]["revision"] == "main"


def test_a_null_field_reads_as_unset_so_its_default_applies_as_on_the_api_server():
    spec = deployment_spec()
    spec["replicas"] = None
    assert specs.read_spec(model_deployment.ModelDeployment, spec)["replicas"] == 1


def test_crossplanes_own_spec_fields_are_accepted_and_left_out():
    spec = cache_spec(crossplane={"compositionRef": {"name": "modelcaches.fleetcache.dev"}})
    assert "crossplane" not in specs.read_spec(model_cache.ModelCache, spec)


def test_a_resource_quantity_may_be_an_integer_or_a_quantity_string():
    spec = deployment_spec(resources={"requests": {"cpu": 8, "memory": "64Gi"},
                                      "limits": {"nvidia.com/gpu": 1, "cpu": "500m"}})
    read = specs.read_spec(model_deployment.ModelDeployment, spec)
    assert read["engine"]["resources"] == spec["engine"]["resources"]


# --- reading a spec: one line per problem --------------------------------------------------


def test_a_bound_names_the_field_path_in_api_form_and_the_limit():
    message = error_of(model_cache.ModelCache, cache_spec(rollout={"maxConcurrent": 0}))
    assert message == "spec.rollout.maxConcurrent: 0 must be at least 1"


def test_an_upper_bound_names_the_maximum():
    message = error_of(model_cache.ModelCache, cache_spec(agent={"concurrency": 65}))
    assert message == "spec.agent.concurrency: 65 must be at most 64"


def test_an_enum_lists_the_allowed_values():
    message = error_of(fleet_cluster.FleetCluster, {
        "kubeconfigSecretRef": {"name": "k"}, "cache": {"accessMode": "ReadOnlyMany"}})
    assert message == ("spec.cache.accessMode: 'ReadOnlyMany' is not one of ReadWriteMany, "
                       "ReadWriteOnce")


def test_a_pattern_says_what_it_means_with_an_example():
    message = error_of(model_cache.ModelCache, cache_spec(storage={"size": "20GB"}))
    assert message == ("spec.storage.size: '20GB' is not a positive quantity, e.g. 20Gi or "
                       "500M (no zero, sign, exponent or milli)")


def test_a_list_item_is_named_by_its_index():
    message = error_of(model_cache.ModelCache,
                       cache_spec(placement={"clusterNames": ["gpu-east-1", "GPU_West"]}))
    assert message.startswith("spec.placement.clusterNames[1]: 'GPU_West' is not a FleetCluster")


def test_a_missing_required_field_is_named():
    assert error_of(model_cache.ModelCache, {"grantRef": {"name": "team-a"},
                                             "placement": {"clusterNames": ["a"]}}) == \
        "spec.source is required"


def test_a_missing_spec_is_named():
    assert error_of(model_cache.ModelCache, None) == "spec is required"


def test_an_unknown_field_is_refused_naming_the_fields_there_since_the_api_server_would_drop_it():
    message = error_of(model_cache.ModelCache, cache_spec(storage={"sise": "20Gi"}))
    assert message == ("spec.storage.sise: is not a field of this API; the fields here are "
                       "size, storageClassName, accessMode, tier, nodePool")


def test_an_unknown_field_in_a_list_item_names_the_item_fields():
    message = error_of(model_deployment.ModelDeployment,
                       deployment_spec(env=[{"name": "A", "valu": "1"}]))
    assert message == ("spec.engine.env[0].valu: is not a field of this API; the fields here "
                       "are name, value, valueFrom")


@pytest.mark.parametrize("value", ["3", True, 2.5])
def test_an_integer_field_takes_only_whole_numbers(value):
    message = error_of(model_cache.ModelCache, cache_spec(minReady=value))
    assert message == f"spec.minReady: {value!r} must be an integer"


def test_a_bad_resource_quantity_is_reported_by_its_pattern_not_as_a_wrong_type():
    message = error_of(model_deployment.ModelDeployment,
                       deployment_spec(resources={"requests": {"cpu": "lots"}}))
    assert message == ("spec.engine.resources.requests.cpu: 'lots' is not a Kubernetes "
                       "quantity, e.g. 8, 500m or 64Gi")


def test_several_problems_name_the_first_and_count_the_rest():
    message = error_of(model_cache.ModelCache, cache_spec(
        rollout={"maxConcurrent": 0}, minReady=-1, storage={"size": "x"}))
    assert message.endswith(" (and 2 more problems)")
    assert message.count(":") == 1


def test_a_hostile_value_is_quoted_cut_to_200_characters():
    message = error_of(model_cache.ModelCache, cache_spec(storage={"size": "9" * 100_000}))
    assert len(message) < 300 and message.startswith("spec.storage.size: '999")


def test_a_value_read_under_a_path_is_named_under_it():
    with pytest.raises(specs.InputError, match=r"^ModelDeployment ns/d spec\.engine\.port: 0 "):
        specs.read_model(model_deployment.Engine, {"image": "x", "port": 0},
                       "ModelDeployment ns/d spec.engine")


# --- the composers and render agree --------------------------------------------------------

REFUSED = [
    ("FleetCluster", {"kubeconfigSecretRef": {"name": "Not_A_Name"}}),
    ("FleetCluster", {"providerConfigRef": {"name": "cpc"}, "cache": {"capacity": "0"}}),
    ("FleetCluster", {"providerConfigRef": {"name": "cpc"}, "agent": {"image": "a b"}}),
    ("ModelCache", cache_spec(source={"huggingFace": {"repo": "Qwen/Qwen3-0.6B",
                                                      "endpoint": "ftp://mirror"}})),
    ("ModelCache", cache_spec(job={"activeDeadlineSeconds": 59})),
    ("ModelCache", cache_spec(agent={"bandwidth": "1e9"})),
    ("ModelCache", cache_spec(placement={"clusterNames": []})),
    ("ModelCache", cache_spec(rollout={"maxConcurrent": "10"})),
    ("ModelDeployment", deployment_spec(port=70000)),
    ("ModelDeployment", deployment_spec(readinessPath="health")),
    ("ModelDeployment", deployment_spec(env=[{"name": "HF_HUB_OFFLINE", "value": "0"}])),
    ("ModelDeployment", {**deployment_spec(), "delivery": {"whileHydrating": "Later"}}),
]


@pytest.mark.parametrize("kind, spec", REFUSED, ids=[f"{k}-{i}" for i, (k, _) in
                                                       enumerate(REFUSED)])
def test_what_the_api_server_refuses_the_composers_refuse(kind, spec):
    xr = {"apiVersion": naming.API_VERSION, "kind": kind, "spec": spec,
          "metadata": {"name": "x", **({"namespace": "ml"} if kind != "FleetCluster" else {})}}
    assert xrds.violations(xr)
    module = importlib.import_module(f"fleetcache.apis.models.{apigen.snake_case(kind)}")
    with pytest.raises(specs.InputError):
        specs.read_spec(getattr(module, kind), spec)


# --- the CEL rules, through the same call --------------------------------------------------


def test_a_cel_rule_is_held_with_its_own_message():
    message = error_of(model_cache.ModelCache, cache_spec(
        placement={"clusterNames": ["a"], "clusterSelector": {}}))
    assert message == "spec.placement must set exactly one of clusterSelector or clusterNames"


def test_a_cel_message_without_the_path_gets_it():
    message = error_of(fleet_cluster.FleetCluster, {})
    assert message == ("spec: set exactly one of spec.kubeconfigSecretRef or "
                       "spec.providerConfigRef")


def test_a_cel_rule_deep_in_the_spec_names_where_it_failed():
    message = error_of(model_cache.ModelCache, cache_spec(placement={"clusterSelector": {
        "matchExpressions": [{"key": "gpu", "operator": "In"}]}}))
    assert message.startswith("spec.placement.clusterSelector.matchExpressions[0]: ")


def test_reading_a_spec_of_1000_clusters_costs_a_few_milliseconds_of_cpu():
    spec = cache_spec(placement={"clusterNames": [f"gpu-{i:04d}" for i in range(1000)]},
                      minReady=900)
    specs.read_spec(model_cache.ModelCache, spec)  # rules compile once per process
    start = time.process_time()
    for _ in range(10):
        specs.read_spec(model_cache.ModelCache, spec)
    assert (time.process_time() - start) / 10 < 0.1


# --- the XRDs' patterns ----------------------------------------------------------------------


def xrd_nodes():
    for path in XRD_PATHS:
        schema = apigen.load_xrd(path)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for where, node in walk_schema(schema):
            yield f"{path.parent.name}:{where}", node


def test_every_pattern_in_the_xrds_has_a_meaning_for_error_messages():
    patterns = {node["pattern"] for _, node in xrd_nodes() if "pattern" in node}
    assert patterns - set(PATTERN_MEANINGS) == set()


def quantity_nodes():
    return [(where, node) for where, node in xrd_nodes()
            if where.rsplit(".", 1)[-1] in QUANTITY_FIELDS and node.get("type") == "string"
            or node.get("x-kubernetes-int-or-string")]


def test_every_quantity_field_has_the_quantity_pattern_or_its_positive_form():
    allowed = {quantity.PATTERN, POSITIVE_QUANTITY, "^$|" + POSITIVE_QUANTITY}
    found = quantity_nodes()
    assert len(found) >= 7
    for where, node in found:
        assert node.get("pattern") in allowed, where
        assert "e.g." in node.get("description", ""), f"{where}: show an example"


@pytest.mark.parametrize("text", ["20Gi", "500M", "1.5Ti", "0.5Gi", "7", "1k"])
def test_what_the_positive_pattern_accepts_the_bounded_parser_reads_as_positive(text):
    assert re.match(POSITIVE_QUANTITY, text) and re.match(quantity.PATTERN, text)
    assert quantity.to_bytes(text) > 0


@pytest.mark.parametrize("text, value", [("1Ei", 2**60), ("5E", 5 * 10**18), ("2e3", 2000),
                                         ("1E3", 1000), ("1.5Ki", 1536)])
def test_the_exa_suffixes_are_suffixes_and_e_with_digits_an_exponent(text, value):
    assert quantity.to_bytes(text) == value


@pytest.mark.parametrize("text", ["0", "0.0Gi", "-1Gi", "1e3", "100m", "20GB", " 1Gi"])
def test_the_positive_pattern_refuses_zero_sign_exponent_and_milli(text):
    assert not re.match(POSITIVE_QUANTITY, text)
