"""The fleetcache API: XRDs, Compositions and examples, as a cluster would see them.

Every XRD under apis/ is checked for what the API server and Crossplane require of it;
every fleetcache document under examples/ must validate against the XRD of its kind
(schema and CEL rules), anything else there (an Argo CD ConfigMap) against the Kubernetes
schema; and each CEL rule is shown rejecting what it exists to reject, with its own
message. New kinds and examples are picked up by globbing, so a new XRD only needs its
own kind-specific tests.
"""

from __future__ import annotations

from collections import Counter

import jsonschema
import kubernetes_validate
import pytest

from fleetcache import reasons, shapes
from fleetcache.apis.cel import compile_rule
from fleetcache.apis.xrds import (
    CROSSPLANE_PRINTER_COLUMNS,
    XRD_API_VERSION,
    apply_defaults,
    cel_rules,
    load_xrds,
    to_jsonschema,
    walk_schema,
)
from fleetcache.functions import naming
from fleetcache.functions.k8s import selectors
from tests.support.xrd import (
    COMPOSITIONS,
    FORBIDDEN_KEYWORDS,
    example_docs,
    is_fleetcache_kind,
    load_yaml_docs,
    schema_at,
    xrd_for,
)

XRDS = load_xrds()
EXAMPLES = example_docs()
FLEETCACHE_EXAMPLES = [(p, i, d) for p, i, d in EXAMPLES if is_fleetcache_kind(d)]
# Argo CD's own kinds have no schema here; tests/test_argocd.py checks those examples.
THIRD_PARTY_GROUPS = ("argoproj.io/",)
OTHER_EXAMPLES = [(p, i, d) for p, i, d in EXAMPLES if not is_fleetcache_kind(d)
                  and not str(d.get("apiVersion", "")).startswith(THIRD_PARTY_GROUPS)]
K8S_VERSION = "1.37"
COMPOSITION_DOCS = [d for p in sorted(COMPOSITIONS.glob("*.yaml")) for d in load_yaml_docs(p)]
COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"


def xrd_ids(xrd) -> str:
    return xrd.kind


def example_id(entry) -> str:
    path, index, doc = entry
    return f"{path.relative_to(path.parents[1]) if path.parent.name != 'examples' else path.name}" \
           f"#{index}:{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


every_xrd = pytest.mark.parametrize("xrd", list(XRDS.values()), ids=xrd_ids)
every_example = pytest.mark.parametrize("entry", FLEETCACHE_EXAMPLES, ids=example_id)


def spec_props(kind: str) -> dict:
    return XRDS[kind].schema["properties"]["spec"]["properties"]


def status_props(kind: str) -> dict:
    return XRDS[kind].schema["properties"]["status"]["properties"]


def keys_of(node: dict) -> set[str]:
    return set(node.get("properties") or {})


# --- valid objects the negative tests start from -----------------------------------------


def model_cache(**spec) -> dict:
    base = {
        "grantRef": {"name": "team-a"},
        "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
        "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
    }
    base.update(spec)
    return {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "default"}, "spec": base}


def fleet_cluster(**spec) -> dict:
    base = {"kubeconfigSecretRef": {"name": "gpu-east-1-kubeconfig"}}
    base.update(spec)
    return {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "FleetCluster",
            "metadata": {"name": "gpu-east-1", "labels": {"region": "us-east"}}, "spec": base}


def hydration(**spec) -> dict:
    """A ModelCacheHydration as compose-model-cache writes it (design/api.md)."""
    base = {
        "clusterName": "gpu-east-1",
        "modelCacheName": "qwen",
        "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main",
                                   "endpoint": "https://huggingface.co",
                                   "tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"}},
                   "allowPatterns": ["*.safetensors", "*.json"], "ignorePatterns": []},
        "commit": COMMIT,
        "manifestDigest": "ab" * 32,
        "bytes": 1_503_238_553,
        "storage": {"size": "2Gi", "storageClassName": "fast-rwx", "accessMode": "ReadWriteMany"},
        "job": {"backoffLimit": 3, "activeDeadlineSeconds": 21600, "ttlSecondsAfterFinished": 3600},
        "agent": {"concurrency": 8, "bandwidth": ""},
    }
    base.update(spec)
    return {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCacheHydration",
            "metadata": {"name": "qwen-gpu-east-1-0a1b2c3d", "namespace": "default",
                         "labels": {"fleetcache.dev/model-cache": "qwen",
                                    "fleetcache.dev/cluster": "gpu-east-1"}},
            "spec": base}


def messages(obj: dict, old: dict | None = None) -> list[str]:
    return [v.message for v in xrd_for(obj).violations(obj, old)]


def cel_messages(obj: dict, old: dict | None = None) -> list[str]:
    return xrd_for(obj).cel_messages(obj, old)


# --- every XRD ----------------------------------------------------------------------------


def test_the_three_core_kinds_have_xrds():
    assert {"FleetCluster", "ModelCache", "ModelCacheHydration"} <= set(XRDS)


@every_xrd
def test_xrd_is_crossplane_v2_in_the_fleetcache_group(xrd):
    assert xrd.doc["apiVersion"] == XRD_API_VERSION
    assert xrd.doc["kind"] == "CompositeResourceDefinition"
    assert xrd.group == naming.GROUP


@every_xrd
def test_xrd_is_named_plural_dot_group_and_lives_in_apis_plural(xrd):
    assert xrd.doc["metadata"]["name"] == f"{xrd.plural}.{xrd.group}"
    assert xrd.path.parent.name == xrd.plural


@every_xrd
def test_xrd_serves_one_referenceable_version_v1alpha1(xrd):
    versions = xrd.doc["spec"]["versions"]
    assert [(v["name"], v["served"], v["referenceable"]) for v in versions] == \
        [(naming.VERSION, True, True)]


@pytest.mark.parametrize("kind, scope", [
    ("FleetCluster", "Cluster"), ("ModelCache", "Namespaced"), ("ModelCacheHydration", "Namespaced"),
    ("ModelCacheGrant", "Namespaced"),
])
def test_xrd_scope_is_as_designed(kind, scope):
    assert XRDS[kind].doc["spec"]["scope"] == scope


@every_xrd
def test_xrd_declares_a_modern_scope_and_no_claims(xrd):
    spec = xrd.doc["spec"]
    assert spec["scope"] in ("Namespaced", "Cluster")
    assert "claimNames" not in spec and "connectionSecretKeys" not in spec


@every_xrd
def test_xrd_leaves_crossplane_fields_to_crossplane(xrd):
    props = xrd.schema["properties"]
    assert "crossplane" not in props["spec"].get("properties", {})
    assert not {"conditions", "crossplane"} & set(props.get("status", {}).get("properties", {}))
    assert "metadata" not in props, "Crossplane keeps only metadata.name's maxLength"


@every_xrd
def test_every_schema_node_has_a_type(xrd):
    untyped = [path for path, node in walk_schema(xrd.schema)
               if "type" not in node and not node.get("x-kubernetes-int-or-string")
               and not node.get("x-kubernetes-preserve-unknown-fields")]
    assert not untyped


@every_xrd
def test_no_spec_field_keeps_unknown_fields_whole(xrd):
    """A field kept whole admits any nesting: ~50 levels fail the function call in protobuf
    decoding before fleetcache sees it. Every spec field has a bounded schema instead."""
    spec = xrd.schema["properties"]["spec"]
    kept = [path for path, node in walk_schema(spec, "spec")
            if node.get("x-kubernetes-preserve-unknown-fields")]
    assert not kept


@every_xrd
def test_every_schema_node_has_a_description(xrd):
    undocumented = [path or "<root>" for path, node in walk_schema(xrd.schema)
                    if not str(node.get("description", "")).strip()]
    assert not undocumented


@every_xrd
def test_schema_is_structural(xrd):
    problems = []
    for path, node in walk_schema(xrd.schema):
        problems += [f"{path}: {k}" for k in FORBIDDEN_KEYWORDS if k in node]
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties together")
        if node.get("additionalProperties") is False:
            problems.append(f"{path}: additionalProperties: false (unknown fields are pruned)")
        if node.get("type") == "object" and not (
                "properties" in node or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")):
            problems.append(f"{path}: object without properties")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{path}: array without items")
    assert not problems


@every_xrd
def test_defaults_are_valid_against_their_own_schema(xrd):
    for path, node in walk_schema(xrd.schema):
        if "default" in node:
            value = apply_defaults(node, node["default"])
            errors = list(jsonschema.Draft7Validator(to_jsonschema(node)).iter_errors(value))
            assert not errors, f"{path}: default {node['default']!r}: {errors[0].message}"


@every_xrd
def test_map_lists_require_their_keys(xrd):
    for path, node in walk_schema(xrd.crd_schema):
        if node.get("x-kubernetes-list-type") == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            assert keys, path
            assert set(keys) <= set(node["items"].get("required", [])), path


@every_xrd
def test_every_cel_rule_compiles_and_says_what_is_wrong(xrd):
    rules = list(cel_rules(xrd.schema))
    for path, entry in rules:
        compile_rule(entry["rule"])
        assert entry.get("message", "").strip(), f"{path}: rule {entry['rule']!r} has no message"


@every_xrd
def test_printer_columns_read_fields_the_schema_declares(xrd):
    for column in xrd.effective_printer_columns:
        node = schema_at(xrd.crd_schema, column["jsonPath"])
        assert node is not None, f"{column['name']}: {column['jsonPath']} is not in the schema"
        if column["type"] in ("integer", "string", "boolean", "number"):
            assert node.get("type") == column["type"], \
                f"{column['name']} is {column['type']} but {column['jsonPath']} is {node.get('type')}"


@every_xrd
def test_printer_columns_do_not_repeat_the_ones_crossplane_adds(xrd):
    repeated = sorted({c["name"] for c in xrd.printer_columns}
                      & {c["name"] for c in CROSSPLANE_PRINTER_COLUMNS})
    assert not repeated, f"Crossplane appends {repeated} to every XR's columns; declaring them " \
                         f"in {xrd.path.relative_to(xrd.path.parents[2])} prints two columns " \
                         "under one header"


@every_xrd
def test_printer_columns_are_described(xrd):
    assert all(c.get("description") for c in xrd.printer_columns)


@every_xrd
def test_default_composition_is_the_kinds_pipeline(xrd):
    name = xrd.doc["spec"]["defaultCompositionRef"]["name"]
    matching = [c for c in COMPOSITION_DOCS if c["metadata"]["name"] == name]
    assert len(matching) == 1
    assert matching[0]["spec"]["compositeTypeRef"] == {"apiVersion": xrd.api_version,
                                                       "kind": xrd.kind}


@every_xrd
def test_xrd_is_in_the_fleetcache_category(xrd):
    assert "fleetcache" in xrd.doc["spec"]["names"].get("categories", [])


# --- printer columns per kind ---------------------------------------------------------------


def columns(kind: str) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["jsonPath"], c["type"]) for c in XRDS[kind].printer_columns}


def test_model_cache_columns_show_clusters_failed_reason_size_commit_progress_lapsed_nodes_images_rollout():
    assert columns("ModelCache") == {
        "CLUSTERS": (".status.summary", "string"),
        "FAILED": (".status.failedClusters", "integer"),
        "REASON": (".status.reason", "string"),
        "SIZE": (".status.sizeHuman", "string"),
        "COMMIT": (".status.commitShort", "string"),
        "PROGRESS": (".status.progressPercent", "integer"),
        "LAPSED": (".status.lapsedClusters", "integer"),
        "NODES": (".status.nodeTier.summary", "string"),
        "IMAGES": (".status.imagesSummary", "string"),
        "ROLLOUT": (".status.rollout.summary", "string"),
    }


def test_model_cache_hydration_columns_show_cluster_phase_progress_reason_usage_nodes_images():
    assert columns("ModelCacheHydration") == {
        "CLUSTER": (".spec.clusterName", "string"),
        "PHASE": (".status.phase", "string"),
        "PROGRESS": (".status.progress.percent", "integer"),
        "REASON": (".status.reason", "string"),
        "USED": (".status.usedHuman", "string"),
        "NODES": (".status.nodeTier.summary", "string"),
        "IMAGES": (".status.images.summary", "string"),
    }


def test_fleet_cluster_columns_show_provider_config_capacity_and_how_full_it_is():
    assert columns("FleetCluster") == {
        "PROVIDERCONFIG": (".status.providerConfigName", "string"),
        "CAPACITY": (".status.cache.capacityHuman", "string"),
        "USED": (".status.cache.usedHuman", "string"),
        "NODE-CACHE": (".status.nodeCache.summary", "string"),
    }


def test_model_cache_grant_columns_show_budget_used_projected_caches_over_quota():
    assert columns("ModelCacheGrant") == {
        "BUDGET": (".status.budgetHuman", "string"),
        "USED": (".status.usedHuman", "string"),
        "PROJECTED": (".status.projectedHuman", "string"),
        "CACHES": (".status.cachesSummary", "string"),
        "OVERQUOTA": (".status.conditions[?(@.type=='OverQuota')].status", "string"),
    }


@every_xrd
def test_kubectl_get_shows_the_ready_condition_and_age(xrd):
    shown = {(c["name"], c["jsonPath"]) for c in xrd.effective_printer_columns}
    assert ("READY", ".status.conditions[?(@.type=='Ready')].status") in shown
    assert ("AGE", ".metadata.creationTimestamp") in shown


# --- the fields design/api.md promises ------------------------------------------------------


def test_fleet_cluster_spec_has_the_designed_fields():
    spec = spec_props("FleetCluster")
    assert set(spec) == {"kubeconfigSecretRef", "providerConfigRef", "cache", "agent", "nodeCache",
                         "nodePools", "features"}
    assert keys_of(spec["features"]) == {"imageVolumes"}
    assert keys_of(spec["kubeconfigSecretRef"]) == {"namespace", "name", "key"}
    assert keys_of(spec["providerConfigRef"]) == {"name"}
    assert keys_of(spec["cache"]) == {"storageClassName", "accessMode", "capacity",
                                      "highWatermark", "lowWatermark"}
    assert keys_of(spec["agent"]) == {"image"}
    assert keys_of(spec["nodeCache"]) == {
        "nodeSelector", "optInLabel", "path", "storageClassName", "capacityPerNode",
        "highWatermark", "lowWatermark", "maxConcurrentNodes", "tolerations", "labels"}
    assert keys_of(spec["nodePools"]["items"]) == {"name"} | keys_of(spec["nodeCache"])
    assert spec["nodePools"]["maxItems"] == 8


def test_fleet_cluster_status_has_the_provider_config_name_and_the_cache_decisions():
    status = status_props("FleetCluster")
    assert set(status) == {"providerConfigName", "cache", "nodeCache", "nodePools"}
    assert keys_of(status["cache"]) == {
        "capacityBytes", "capacityHuman", "usedBytes", "usedHuman", "reservedBytes",
        "usedPercent", "admitted", "waiting", "waitingCount", "evicted"}
    assert keys_of(status["nodeCache"]) == {
        "capacityPerNodeBytes", "demandBytes", "usedPercent", "summary", "admitted", "waiting",
        "evicted"}
    assert keys_of(status["nodePools"]["items"]) == {"name"} | keys_of(status["nodeCache"])


def test_model_cache_spec_has_the_designed_fields():
    spec = spec_props("ModelCache")
    assert set(spec) == {"grantRef", "source", "placement", "storage", "rollout", "minReady", "job",
                         "agent", "retention", "distribution", "images"}
    assert keys_of(spec["images"]["items"]) == {"image", "pullPolicy", "command", "args", "pullSecretRef"}
    assert keys_of(spec["source"]) == {"huggingFace", "s3", "oci", "volume", "allowPatterns",
                                       "ignorePatterns"}
    assert keys_of(spec["source"]["properties"]["s3"]) == \
        {"bucket", "prefix", "region", "endpoint", "credentialsSecretRef", "layout"}
    assert keys_of(spec["source"]["properties"]["oci"]) == \
        {"reference", "pullSecretRef", "plainHTTP", "layout"}
    assert keys_of(spec["source"]["properties"]["volume"]) == {"claimName", "manifest", "subPath"}
    assert keys_of(spec["distribution"]["properties"]["mirror"]) == \
        {"s3", "oci", "onMissing", "regionLabel", "regions"}
    assert keys_of(spec["source"]["properties"]["huggingFace"]) == \
        {"repo", "revision", "endpoint", "tokenSecretRef"}
    assert keys_of(spec["placement"]) == {"clusterSelector", "clusterNames"}
    assert keys_of(spec["placement"]["properties"]["clusterSelector"]) == \
        {"matchLabels", "matchExpressions"}
    assert keys_of(spec["storage"]) == {"size", "storageClassName", "accessMode", "tier", "nodePool"}
    assert spec["storage"]["properties"]["tier"]["enum"] == ["Volume", "Node"]
    assert keys_of(spec["rollout"]) == {"maxConcurrent", "waves", "bakeTime", "progressDeadline",
                                        "onFailure", "promote", "restartedAt"}
    assert keys_of(spec["rollout"]["properties"]["waves"]["items"]) == \
        {"name", "clusterNames", "clusterSelector", "percent", "pause"}
    assert keys_of(spec["job"]) == {"backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"}
    assert keys_of(spec["agent"]) == {"concurrency", "bandwidth"}
    assert keys_of(spec["retention"]) == {"pinned", "ttlAfterLastUse", "afterRemoval"}


def test_model_cache_status_has_every_field_the_composer_writes():
    status = status_props("ModelCache")
    assert set(status) == {
        "resolved", "desiredClusters", "readyClusters", "hydratingClusters", "failedClusters",
        "pendingClusters", "summary", "reason", "progressPercent", "sizeHuman", "commitShort",
        "clusters", "clustersOmitted", "everyCluster", "lapsedClusters", "evictedClusters",
        "retainedClusters", "mountedReplicas", "retained", "nodeTier", "mirror", "rollout",
        "images", "imagesSummary"}
    assert keys_of(status["images"]["items"]) == {"image", "digest", "readyNodes", "desiredNodes"}
    assert keys_of(status["rollout"]) == \
        {"commit", "manifestDigest", "previousCommit", "previousManifestDigest", "previousBytes",
         "phase", "wave", "waves", "startedTime", "resumedTime", "completedTime", "restartedAt",
         "stalePromote", "summary", "message"}
    assert status["rollout"]["properties"]["phase"]["enum"] == \
        ["Progressing", "Paused", "Halted", "RolledBack", "Complete"]
    assert keys_of(status["rollout"]["properties"]["waves"]["items"]) == \
        {"name", "clusters", "ready", "failed"}
    assert keys_of(status["resolved"]) == \
        {"repo", "revision", "commit", "bytes", "files", "manifestDigest", "sourceDigest",
         "compared", "manifest", "reference", "artifact"}
    assert keys_of(status["mirror"]) == {"publisher", "published", "commit", "groups"}
    assert keys_of(status["mirror"]["properties"]["groups"]["items"]) == \
        {"region", "bucket", "repository", "publisher", "published", "clusters"}
    assert keys_of(status["nodeTier"]) == {"desiredNodes", "readyNodes", "downloadingNodes",
                                           "failedNodes", "readyClusters", "summary"}
    assert keys_of(status["clusters"]["items"]) == \
        {"name", "phase", "bytesDone", "bytesTotal", "reason", "message", "servingCommit",
         "lapsed", "bytesFrom"}
    assert keys_of(status["retained"]["items"]) == {"cluster", "since", "until", "reason"}


def test_model_replica_status_has_every_field_the_composer_writes():
    status = status_props("ModelReplica")
    assert set(status) == {"phase", "clusterName", "delivery", "deliveryReason", "nodeCache", "reason",
                           "message", "servingCommit", "endpoint", "model", "engineImage"}
    assert keys_of(status["model"]) == {"name", "revision"}
    assert keys_of(status["nodeCache"]) == {"commit", "placement", "startedAt", "revertedAt"}


def test_model_cache_grant_spec_has_the_designed_fields():
    spec = spec_props("ModelCacheGrant")
    assert set(spec) == {"clusters", "quota", "allowPinned", "nodePools"}
    assert spec["clusters"]["properties"] == spec_props("ModelCache")["placement"]["properties"] \
        | {"clusterNames": spec["clusters"]["properties"]["clusterNames"]}
    assert keys_of(spec["quota"]) == {"bytes"}
    assert spec["allowPinned"]["default"] is False


def test_model_cache_grant_status_has_every_field_the_composer_writes():
    status = status_props("ModelCacheGrant")
    assert set(status) == {
        "quotaBytes", "usedBytes", "projectedBytes", "unresolvedCaches", "cacheCount",
        "admittedCount", "cachesOmitted", "cachesSummary", "budgetHuman", "usedHuman",
        "projectedHuman", "caches"}
    assert keys_of(status["caches"]["items"]) == {
        "name", "commit", "manifestDigest", "clusters", "bytes", "admitted", "reason", "message",
        "admittedDigest", "admittedFootprint"}
    assert keys_of(status["caches"]["items"]["properties"]["admittedFootprint"]) == {
        "manifestDigest", "bytes", "clusters"}


def test_model_cache_hydration_spec_has_the_designed_fields():
    spec = spec_props("ModelCacheHydration")
    assert set(spec) == {"clusterName", "modelCacheName", "source", "commit", "manifestDigest",
                         "bytes", "storage", "tier", "nodePool", "job", "agent", "retention",
                         "removal", "mirror", "keepCommits", "images"}


def test_model_cache_hydration_status_has_every_field_the_composer_writes():
    status = status_props("ModelCacheHydration")
    assert set(status) == {"phase", "progress", "reason", "message", "resolved", "volumeName",
                           "volumeUID", "servingRepo", "servingCommit", "servingManifestDigest",
                           "storedCommits", "prunedCommits", "usedBytes", "capacityBytes",
                           "usedHuman", "mountedBy", "placedReplicas", "lastUsedTime",
                           "readyTime", "pinned", "lapsed", "nodeTier", "bytesFrom",
                           "originBytes", "mirrorBytes", "artifact", "images"}
    assert keys_of(status["images"]) == {"desired", "ready", "pulling", "failed", "images",
                                         "firstFailure", "reason", "message", "summary"}
    assert keys_of(status["nodeTier"]) == {
        "phase", "commit", "claimName", "labelKey", "desiredNodes", "readyNodes",
        "downloadingNodes", "failedNodes", "pendingNodes", "minFreeBytes", "firstFailure",
        "reason", "message", "summary"}
    assert status["nodeTier"]["properties"]["phase"]["enum"] == \
        ["Pending", "Warming", "Ready", "Degraded", "Failed", "Evicted"]
    assert keys_of(status["progress"]) == \
        {"bytesDone", "bytesTotal", "filesDone", "filesTotal", "percent"}
    assert keys_of(status["resolved"]) == {"commit", "manifestDigest", "bytes"}
    assert status["phase"]["enum"] == ["Pending", "Hydrating", "Ready", "Failed", "Evicted"]


@pytest.mark.parametrize("field", ["source", "job", "agent"])
def test_hydration_carries_the_same_shape_as_its_model_cache(field):
    def strip(node):  # descriptions may speak of the cache or of the hydration
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "description"}
        return node
    assert strip(spec_props("ModelCacheHydration")[field]) == strip(spec_props("ModelCache")[field])


def test_hydration_storage_matches_model_cache_storage_but_requires_size():
    cache = spec_props("ModelCache")["storage"]
    hydration_storage = spec_props("ModelCacheHydration")["storage"]
    assert keys_of(hydration_storage) == keys_of(cache) - {"tier", "nodePool"}  # spec.tier, spec.nodePool
    assert hydration_storage["required"] == ["size"]
    tier = {k: v for k, v in spec_props("ModelCacheHydration")["tier"].items() if k != "description"}
    assert tier == {k: v for k, v in cache["properties"]["tier"].items() if k != "description"}


# --- defaults -------------------------------------------------------------------------------


def test_a_minimal_model_cache_gets_the_designed_defaults():
    spec = XRDS["ModelCache"].with_defaults(model_cache())["spec"]
    assert spec["source"]["huggingFace"]["revision"] == "main"
    assert spec["source"]["huggingFace"]["endpoint"] == "https://huggingface.co"
    assert spec["rollout"] == {"maxConcurrent": 10, "bakeTime": "0m", "progressDeadline": "30m",
                               "onFailure": "Halt"}
    assert spec["minReady"] == 0
    assert spec["job"] == {"backoffLimit": 3, "activeDeadlineSeconds": 21600,
                           "ttlSecondsAfterFinished": 3600}
    assert "storage" not in spec and "agent" not in spec


def test_a_token_reference_defaults_its_key_to_hf_token():
    xr = model_cache(source={"huggingFace": {"repo": "Qwen/Qwen3-0.6B",
                                             "tokenSecretRef": {"name": "hf-token"}}})
    ref = XRDS["ModelCache"].with_defaults(xr)["spec"]["source"]["huggingFace"]["tokenSecretRef"]
    assert ref == {"name": "hf-token", "key": "HF_TOKEN"}


def test_a_fleet_cluster_defaults_to_read_write_many_caches_and_crossplane_system():
    spec = XRDS["FleetCluster"].with_defaults(fleet_cluster())["spec"]
    assert spec["cache"] == {"accessMode": "ReadWriteMany", "highWatermark": 80,
                             "lowWatermark": 70}
    assert spec["kubeconfigSecretRef"] == {"namespace": "crossplane-system",
                                           "name": "gpu-east-1-kubeconfig", "key": "kubeconfig"}


# --- examples ---------------------------------------------------------------------------------


def test_there_are_examples():
    assert FLEETCACHE_EXAMPLES


@every_example
def test_every_fleetcache_example_has_an_xrd_for_its_kind(entry):
    _, _, doc = entry
    assert doc.get("kind") in XRDS, f"no XRD under apis/ defines {doc.get('kind')}"


@pytest.mark.parametrize("entry", OTHER_EXAMPLES, ids=example_id)
def test_every_other_example_validates_against_the_kubernetes_schema(entry):
    _, _, doc = entry
    assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name")
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{doc.get('kind')} {doc['metadata'].get('name')}: {err.message}")


@every_example
def test_example_validates_against_its_xrd(entry):
    _, _, doc = entry
    problems = xrd_for(doc).violations(doc)
    assert not problems, "\n".join(map(str, problems))


@every_example
def test_example_has_a_name_crossplane_accepts(entry):
    _, _, doc = entry
    name = doc["metadata"]["name"]
    assert shapes.DNS_SUBDOMAIN.match(name) and len(name) <= 63


@every_example
def test_namespaced_examples_name_their_namespace(entry):
    _, _, doc = entry
    if xrd_for(doc).scope == "Namespaced":
        assert doc["metadata"].get("namespace")


def test_example_names_are_unique_per_kind_and_namespace():
    seen = Counter((d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
                   for _, _, d in FLEETCACHE_EXAMPLES)
    assert [key for key, count in seen.items() if count > 1] == []


def examples_of(kind: str, folder: str | None = None) -> list[dict]:
    return [d for p, _, d in FLEETCACHE_EXAMPLES
            if d["kind"] == kind and (folder is None or p.parent.name == folder)]


def test_an_example_registers_a_cluster_from_a_kubeconfig_secret_with_region_and_gpu_labels():
    assert any("kubeconfigSecretRef" in c["spec"]
               and {"region", "gpu"} <= set(c["metadata"].get("labels", {}))
               for c in examples_of("FleetCluster"))


def test_an_example_adopts_an_existing_provider_config():
    assert any("providerConfigRef" in c["spec"] for c in examples_of("FleetCluster"))


def test_an_example_warms_qwen3_by_cluster_selector():
    assert any(m["spec"]["source"]["huggingFace"]["repo"] == "Qwen/Qwen3-0.6B"
               and "clusterSelector" in m["spec"]["placement"] for m in examples_of("ModelCache"))


def test_an_example_warms_by_cluster_names_with_a_token_and_storage():
    assert any("clusterNames" in m["spec"]["placement"] and "storage" in m["spec"]
               and "tokenSecretRef" in m["spec"]["source"]["huggingFace"]
               for m in examples_of("ModelCache"))


def test_cluster_names_in_examples_name_example_fleet_clusters():
    clusters = {c["metadata"]["name"] for c in examples_of("FleetCluster")}
    for cache in examples_of("ModelCache"):
        assert set(cache["spec"]["placement"].get("clusterNames", [])) <= clusters


def test_the_example_fleet_is_three_gpu_clusters():
    names = sorted(c["metadata"]["name"] for c in examples_of("FleetCluster", "fleet"))
    assert names == ["gpu-east-1", "gpu-east-2", "gpu-west-1"]


def test_the_example_fleet_cache_selects_exactly_the_fleet():
    caches = examples_of("ModelCache", "fleet")
    assert len(caches) == 1
    selector = caches[0]["spec"]["placement"]["clusterSelector"]
    every_cluster = examples_of("FleetCluster")
    selected = sorted(c["metadata"]["name"] for c in every_cluster
                      if selectors.selector_matches(selector, c["metadata"].get("labels", {}),
                                              "spec.placement.clusterSelector"))
    assert selected == ["gpu-east-1", "gpu-east-2", "gpu-west-1"]


# --- what composers write is kept, not pruned -----------------------------------------------


def test_model_cache_status_as_the_composer_writes_it_is_accepted():
    xr = model_cache()
    xr["status"] = {
        "resolved": {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": COMMIT,
                     "bytes": 1_503_238_553, "files": 9, "manifestDigest": "ab" * 32,
                     "sourceDigest": "cd" * 32},
        "desiredClusters": 3, "readyClusters": 1, "hydratingClusters": 1, "failedClusters": 0,
        "pendingClusters": 1, "summary": "1/3", "progressPercent": 46, "sizeHuman": "1.4GiB",
        "commitShort": COMMIT[:8],
        "clusters": [
            {"name": "gpu-east-1", "phase": "Ready", "bytesDone": 1_503_238_553,
             "bytesTotal": 1_503_238_553, "reason": "", "message": ""},
            {"name": "gpu-east-2", "phase": "Hydrating", "bytesDone": 601_295_421,
             "bytesTotal": 1_503_238_553},
            {"name": "gpu-west-1", "phase": "Pending", "reason": "ClusterNotReady",
             "message": reasons.remedy("ClusterNotReady")},
        ],
        "conditions": [{"type": "Resolved", "status": "True", "reason": "Resolved",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }
    assert messages(xr) == []


def test_model_cache_hydration_as_the_model_cache_writes_it_is_accepted():
    obj = hydration()
    obj["status"] = {"phase": "Hydrating",
                     "progress": {"bytesDone": 601_295_421, "bytesTotal": 1_503_238_553,
                                  "filesDone": 3, "filesTotal": 9, "percent": 40},
                     "reason": "", "message": "",
                     "resolved": {"commit": COMMIT, "manifestDigest": "ab" * 32,
                                  "bytes": 1_503_238_553},
                     "volumeName": naming.cache_volume_name("qwen")}
    assert messages(obj) == []


def test_a_status_field_the_xrd_does_not_declare_would_be_pruned():
    xr = model_cache()
    xr["status"] = {"readyCount": 1}
    assert any("readyCount" in m for m in messages(xr))


def test_a_cluster_phase_outside_the_four_is_rejected():
    xr = model_cache()
    xr["status"] = {"clusters": [{"name": "gpu-east-1", "phase": "Warming"}]}
    assert messages(xr)


def test_a_cluster_listed_twice_in_status_is_rejected():
    xr = model_cache()
    xr["status"] = {"clusters": [{"name": "gpu-east-1"}, {"name": "gpu-east-1"}]}
    assert any("duplicate" in m for m in messages(xr))


# --- CEL rules and schema constraints: each rejects what it should -------------------------

PLACEMENT_MESSAGE = "spec.placement must set exactly one of clusterSelector or clusterNames"
REPO_MESSAGE = "spec.source.huggingFace.repo must have the shape org/name, e.g. Qwen/Qwen3-0.6B"


def test_a_valid_model_cache_passes_every_rule():
    assert messages(model_cache()) == []


def test_placement_with_both_selector_and_names_is_rejected():
    xr = model_cache(placement={"clusterSelector": {}, "clusterNames": ["gpu-east-1"]})
    assert cel_messages(xr) == [PLACEMENT_MESSAGE]


def test_placement_with_neither_selector_nor_names_is_rejected():
    assert cel_messages(model_cache(placement={})) == [PLACEMENT_MESSAGE]


def test_an_empty_selector_is_a_placement_that_selects_every_cluster():
    assert messages(model_cache(placement={"clusterSelector": {}})) == []


def test_a_model_cache_without_placement_is_rejected():
    xr = model_cache()
    del xr["spec"]["placement"]
    assert any("placement" in m for m in messages(xr))


def test_repo_without_a_slash_is_rejected_by_its_rule_and_pattern():
    xr = model_cache(source={"huggingFace": {"repo": "Qwen3-0.6B"}})
    assert REPO_MESSAGE in cel_messages(xr)
    assert len(messages(xr)) > len(cel_messages(xr)), "the pattern rejects it too"


@pytest.mark.parametrize("repo", ["Qwen/Qwen3/0.6B", "/Qwen3-0.6B", "Qwen/", "Qwen/ Qwen3"])
def test_repo_with_a_malformed_org_or_name_is_rejected(repo):
    assert messages(model_cache(source={"huggingFace": {"repo": repo}}))


@pytest.mark.parametrize("repo", ["org--x/name", "org/na..me"])
def test_repo_with_double_dash_or_double_dot_is_rejected(repo):
    assert cel_messages(model_cache(source={"huggingFace": {"repo": repo}})) == [
        "spec.source.huggingFace.repo must not contain '--' or '..' (the Hub forbids them "
        "and the cache layout relies on it)"]


@pytest.mark.parametrize("repo", ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct",
                                  "openai/gpt-oss-20b", "a/b", "TheBloke/Mistral_7B.v0.1"])
def test_real_repo_ids_are_accepted(repo):
    assert messages(model_cache(source={"huggingFace": {"repo": repo}})) == []


def test_max_concurrent_zero_is_rejected():
    xr = model_cache(rollout={"maxConcurrent": 0})
    assert cel_messages(xr) == ["spec.rollout.maxConcurrent must be at least 1"]


WAVES = [{"name": "canary", "clusterNames": ["gpu-east-1"], "pause": True},
         {"name": "early", "clusterSelector": {"matchLabels": {"ring": "early"}}},
         {"name": "half", "percent": 50}]


def test_a_rollout_in_waves_with_every_setting_passes_every_rule():
    xr = model_cache(rollout={"maxConcurrent": 2, "waves": WAVES, "bakeTime": "10m", "progressDeadline": "1h",
                              "onFailure": "Rollback", "promote": "canary", "restartedAt": "2026-05-01T12:00:00Z"})
    assert messages(xr) == []


@pytest.mark.parametrize("rollout, message", [
    ({"waves": [{"name": "canary"}]}, "a wave must set exactly one of clusterNames, clusterSelector or percent"),
    ({"waves": [{"name": "canary", "percent": 5, "clusterSelector": {}}]},
     "a wave must set exactly one of clusterNames, clusterSelector or percent"),
    ({"waves": [*WAVES, {"name": "half", "percent": 10}]},
     "spec.rollout.waves[].name values must be unique: rename the wave listed twice"),
    ({"waves": [{"name": "Canary", "percent": 5}]},
     "must be a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit), "
     "e.g. canary"),
    ({"waves": [{"name": "rest", "percent": 5}]},
     "rest is the implicit last wave (the clusters in no wave): give this wave another name"),
    ({"waves": WAVES, "promote": "late"},
     "spec.rollout.promote must name one of spec.rollout.waves[].name (the paused wave to go on from)"),
    ({"promote": "canary"},
     "spec.rollout.promote must name one of spec.rollout.waves[].name (the paused wave to go on from)"),
    ({"progressDeadline": "00m"}, "spec.rollout.progressDeadline must be longer than 0m, e.g. 30m"),
    ({"waves": [{"name": "a", "clusterSelector": {"matchExpressions": [{"key": "ring", "operator": "In"}]}}]},
     "matchExpressions with operator In or NotIn need at least one value"),
])
def test_each_rollout_rule_rejects_what_it_exists_to_reject(rollout, message):
    assert cel_messages(model_cache(rollout=rollout)) == [message]


@pytest.mark.parametrize("rollout", [
    {"waves": [{"name": "a", "percent": 0}]}, {"waves": [{"name": "a", "percent": 101}]},
    {"waves": [{"name": f"w{i}", "percent": 5} for i in range(21)]}, {"bakeTime": "10s"},
    {"onFailure": "Retry"}, {"waves": [{"name": "a", "pause": "yes", "percent": 5}]},
])
def test_rollout_values_out_of_their_schema_are_rejected(rollout):
    assert messages(model_cache(rollout=rollout))


def test_min_ready_below_zero_is_rejected():
    xr = model_cache(minReady=-1)
    assert cel_messages(xr) == ["spec.minReady must be 0 (all target clusters) or more"]


def test_min_ready_above_the_named_clusters_is_rejected():
    xr = model_cache(placement={"clusterNames": ["gpu-east-1", "gpu-east-2"]}, minReady=3)
    assert cel_messages(xr) == [
        "spec.minReady cannot exceed the number of clusters listed in spec.placement.clusterNames"]


def test_min_ready_equal_to_the_named_clusters_is_accepted():
    xr = model_cache(placement={"clusterNames": ["gpu-east-1", "gpu-east-2"]}, minReady=2)
    assert messages(xr) == []


def test_a_cluster_named_twice_is_rejected():
    assert messages(model_cache(placement={"clusterNames": ["gpu-east-1", "gpu-east-1"]}))


@pytest.mark.parametrize("operator", ["In", "NotIn"])
def test_set_operators_without_values_are_rejected(operator):
    expression = {"key": "region", "operator": operator}
    xr = model_cache(placement={"clusterSelector": {"matchExpressions": [expression]}})
    assert cel_messages(xr) == ["matchExpressions with operator In or NotIn need at least one value"]
    expression["values"] = []
    assert cel_messages(xr) == ["matchExpressions with operator In or NotIn need at least one value"]


@pytest.mark.parametrize("operator", ["Exists", "DoesNotExist"])
def test_existence_operators_with_values_are_rejected(operator):
    expression = {"key": "gpu", "operator": operator, "values": ["h100"]}
    xr = model_cache(placement={"clusterSelector": {"matchExpressions": [expression]}})
    assert cel_messages(xr) == ["matchExpressions with operator Exists or DoesNotExist take no values"]


@pytest.mark.parametrize("expression", [
    {"key": "region", "operator": "In", "values": ["us-east"]},
    {"key": "region", "operator": "NotIn", "values": ["eu-west"]},
    {"key": "gpu", "operator": "Exists"},
    {"key": "fleetcache.dev/quarantine", "operator": "DoesNotExist", "values": []},
])
def test_well_formed_selector_expressions_are_accepted(expression):
    assert messages(model_cache(placement={"clusterSelector": {"matchExpressions": [expression]}})) == []


def test_an_unknown_selector_operator_is_rejected():
    expression = {"key": "gpu", "operator": "Gt", "values": ["1"]}
    assert messages(model_cache(placement={"clusterSelector": {"matchExpressions": [expression]}}))


@pytest.mark.parametrize("size", ["0", "-1Gi", "20GB", "twenty", "1e3"])
def test_storage_size_must_be_a_positive_quantity(size):
    assert messages(model_cache(storage={"size": size}))


@pytest.mark.parametrize("endpoint", ["huggingface.co", "ftp://mirror", "https://", "https://a b"])
def test_endpoint_must_be_an_http_url(endpoint):
    xr = model_cache(source={"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "endpoint": endpoint}})
    assert messages(xr)


def test_a_misspelled_field_is_rejected():
    xr = model_cache()
    xr["spec"]["placment"] = xr["spec"].pop("placement")
    assert any("placment" in m for m in messages(xr))


def test_fleet_cluster_with_both_refs_is_rejected():
    xr = fleet_cluster(providerConfigRef={"name": "existing"})
    assert cel_messages(xr) == [
        "set exactly one of spec.kubeconfigSecretRef or spec.providerConfigRef"]


def test_fleet_cluster_with_neither_ref_is_rejected():
    xr = fleet_cluster()
    del xr["spec"]["kubeconfigSecretRef"]
    assert cel_messages(xr) == [
        "set exactly one of spec.kubeconfigSecretRef or spec.providerConfigRef"]


@pytest.mark.parametrize("cache, accepted", [
    ({"highWatermark": 80, "lowWatermark": 70}, True),
    ({"highWatermark": 95, "lowWatermark": 94}, True),
    ({"highWatermark": 2, "lowWatermark": 1}, True),
    ({"lowWatermark": 79}, True),
    ({"highWatermark": 71}, True),
    ({"highWatermark": 70, "lowWatermark": 70}, False),
    ({"highWatermark": 60, "lowWatermark": 70}, False),
    ({"highWatermark": 70}, False),
    ({"lowWatermark": 80}, False),
])
def test_fleet_cluster_low_watermark_must_be_below_the_high_one(cache, accepted):
    rejected = ["spec.cache.lowWatermark must be below spec.cache.highWatermark"]
    assert cel_messages(fleet_cluster(cache=cache)) == ([] if accepted else rejected)


@pytest.mark.parametrize("cache, path, message", [
    ({"highWatermark": 96}, "spec.cache.highWatermark", "must be at most 95, got 96"),
    ({"highWatermark": 1}, "spec.cache.highWatermark", "must be at least 2, got 1"),
    ({"lowWatermark": 0}, "spec.cache.lowWatermark", "must be at least 1, got 0"),
    ({"lowWatermark": 95}, "spec.cache.lowWatermark", "must be at most 94, got 95"),
])
def test_fleet_cluster_watermarks_are_bounded(cache, path, message):
    xr = fleet_cluster(cache=cache)
    assert (path, message) in [(v.path, v.message) for v in xrd_for(xr).violations(xr)]


def test_fleet_cluster_adopting_a_provider_config_is_accepted():
    xr = fleet_cluster(providerConfigRef={"name": "existing"})
    del xr["spec"]["kubeconfigSecretRef"]
    assert messages(xr) == []


def test_fleet_cluster_is_cluster_scoped():
    xr = fleet_cluster()
    xr["metadata"]["namespace"] = "default"
    assert messages(xr) == ["FleetCluster is cluster-scoped"]


def test_an_xr_name_longer_than_63_characters_is_rejected():
    xr = fleet_cluster()
    xr["metadata"]["name"] = "g" * 64
    assert messages(xr)


def test_hydration_commit_must_be_a_full_commit():
    assert messages(hydration(commit="main"))
    assert messages(hydration(commit=COMMIT[:8]))


def test_hydration_cluster_name_cannot_change():
    old = hydration()
    assert cel_messages(hydration(clusterName="gpu-west-1"), old) == [
        "spec.clusterName is immutable; a cache moves by creating a new hydration"]
    assert cel_messages(hydration(), old) == []


def test_hydration_model_cache_name_cannot_change():
    assert cel_messages(hydration(modelCacheName="other"), hydration()) == [
        "spec.modelCacheName is immutable"]


def test_hydration_needs_a_storage_size():
    assert messages(hydration(storage={"storageClassName": "fast-rwx"}))


def test_hydration_progress_percent_stays_within_0_and_100():
    obj = hydration()
    obj["status"] = {"progress": {"percent": 101}}
    assert messages(obj)


@pytest.mark.parametrize("field, value", [
    ("backoffLimit", -1), ("activeDeadlineSeconds", 0), ("ttlSecondsAfterFinished", -1),
])
def test_job_limits_reject_nonsense(field, value):
    assert messages(model_cache(job={field: value}))


def without_prose(node):
    """A schema without its descriptions and CEL rules (their messages name their own path)."""
    if isinstance(node, dict):
        return {k: without_prose(v) for k, v in node.items() if k not in ("description", "x-kubernetes-validations")}
    if isinstance(node, list):
        return [without_prose(v) for v in node]
    return node


@pytest.mark.parametrize("props", [spec_props, status_props], ids=["spec", "status"])
def test_a_named_node_pool_is_what_the_node_cache_declares_plus_its_name(props):
    """The XRD writes the pool schema twice (spec.nodeCache is the pool default): they must not drift."""
    default = props("FleetCluster")["nodeCache"]["properties"]
    named = dict(props("FleetCluster")["nodePools"]["items"]["properties"])
    assert set(named.pop("name")) >= {"type"}
    assert without_prose(named) == without_prose(default)


def test_a_hydration_image_is_the_cache_image_plus_its_pinned_digest():
    """spec.images is written twice (the ModelCache's, and the hydration's with the digest): they must not drift."""
    cache = spec_props("ModelCache")["images"]["items"]["properties"]
    pinned = dict(spec_props("ModelCacheHydration")["images"]["items"]["properties"])
    assert set(pinned.pop("digest")) >= {"type", "pattern"}
    assert {k: without_prose({**v, "pattern": None}) for k, v in pinned.items()} == \
        {k: without_prose({**v, "pattern": None}) for k, v in cache.items()}


@pytest.mark.parametrize("image", [
    "docker.io/vllm/vllm-openai:v0.11.0", "localhost:5000/engines/vllm:v1",
    "registry.example.com/vllm@sha256:" + "a" * 64,
])
def test_an_image_with_a_tag_or_a_digest_is_accepted(image):
    assert not messages(model_cache(images=[{"image": image, "command": ["vllm", "--help"]}]))


@pytest.mark.parametrize("image", ["docker.io/vllm/vllm-openai", "localhost:5000/engines/vllm"])
def test_an_image_without_a_tag_or_digest_is_refused_naming_the_field(image):
    assert any("spec.images[].image needs a tag or a digest" in m
               for m in messages(model_cache(images=[{"image": image}])))


def test_at_most_eight_images_are_kept():
    images = [{"image": f"docker.io/vllm/engine-{i}:v1"} for i in range(9)]
    assert messages(model_cache(images=images))


def test_an_image_is_listed_once():
    images = [{"image": "docker.io/vllm/vllm-openai:v1"}] * 2
    assert messages(model_cache(images=images))
