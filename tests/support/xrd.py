"""Load the project's XRDs and validate objects against them the way the API server would.

Crossplane turns each `apis/<plural>/definition.yaml` into a CRD: it adds its own fields
(`spec.crossplane`, `status.conditions`, `status.crossplane`), caps `metadata.name` at 63
characters and appends its printer columns. `Xrd.crd_schema` reproduces that, so what is
validated here is what a cluster would enforce:

* defaults are applied first (`apply_defaults`), as the API server does;
* the OpenAPI v3 schema is checked with `jsonschema` after translating the Kubernetes
  extensions (unknown fields are errors, as with `kubectl apply` strict field validation;
  `x-kubernetes-list-type: set|map` means unique items / unique keys);
* every `x-kubernetes-validations` rule is evaluated with cel-python, `self` bound to the
  value at the rule's level; transition rules (those using `oldSelf`) only when an old
  object is given.

Use `xrd_for(obj).violations(obj)` (or `assert_valid(obj)`) from any test: examples, the
composed ModelCacheHydrations of a render, status written by a composer.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import celpy
import jsonschema
import yaml

from fleetcache import render

REPO = Path(__file__).resolve().parents[2]
APIS = REPO / "apis"
COMPOSITIONS = REPO / "compositions"
EXAMPLES = REPO / "examples"

XRD_API_VERSION = "apiextensions.crossplane.io/v2"
CROSSPLANE_NAME_MAX = 63

# Columns Crossplane appends to every modern (Namespaced or Cluster) XR's CRD.
CROSSPLANE_PRINTER_COLUMNS: tuple[dict, ...] = (
    {"name": "SYNCED", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Synced')].status"},
    {"name": "READY", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    {"name": "COMPOSITION", "type": "string", "jsonPath": ".spec.crossplane.compositionRef.name"},
    {"name": "COMPOSITIONREVISION", "type": "string", "priority": 1,
     "jsonPath": ".spec.crossplane.compositionRevisionRef.name"},
    {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)

_NAME_REF = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
_MATCH_LABELS = {"type": "object", "required": ["matchLabels"], "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}}
CROSSPLANE_SPEC_PROPS = {
    "crossplane": {"type": "object", "properties": {
        "compositionRef": _NAME_REF,
        "compositionSelector": _MATCH_LABELS,
        "compositionRevisionRef": _NAME_REF,
        "compositionRevisionSelector": _MATCH_LABELS,
        "compositionUpdatePolicy": {"type": "string", "enum": ["Automatic", "Manual"]},
        "resourceRefs": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {
            "type": "object", "required": ["apiVersion", "kind"], "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "name": {"type": "string"}, "namespace": {"type": "string"}}}},
    }},
}
CROSSPLANE_STATUS_PROPS = {
    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                   "x-kubernetes-list-map-keys": ["type"], "items": {
                       "type": "object",
                       "required": ["lastTransitionTime", "reason", "status", "type"],
                       "properties": {
                           "lastTransitionTime": {"type": "string", "format": "date-time"},
                           "message": {"type": "string"}, "reason": {"type": "string"},
                           "status": {"type": "string"}, "type": {"type": "string"},
                           "observedGeneration": {"type": "integer", "format": "int64"}}}},
    "crossplane": {"type": "object", "properties": {"connectionDetails": {
        "type": "object", "properties": {"lastPublishedTime": {"type": "string"}}}}},
}

OBJECT_META_FIELDS = {name: {"type": "string"} for name in (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
    "generateName")}
OBJECT_META_FIELDS["generation"] = {"type": "integer"}

# Keywords a structural schema may not use (apiextensions "structural schema" rules).
FORBIDDEN_KEYWORDS = ("$ref", "definitions", "dependencies", "id", "uniqueItems",
                      "patternProperties", "additionalItems", "$schema")


@dataclass(frozen=True)
class Violation:
    path: str  # e.g. "spec.placement"
    message: str
    rule: str = ""  # the CEL rule, when a CEL rule produced it

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


def load_yaml_docs(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


class Xrd:
    """One CompositeResourceDefinition and the CRD Crossplane derives from it."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        self.doc = doc
        spec = doc["spec"]
        self.group: str = spec["group"]
        self.kind: str = spec["names"]["kind"]
        self.plural: str = spec["names"]["plural"]
        self.scope: str = spec.get("scope", "Namespaced")
        referenceable = [v for v in spec["versions"] if v.get("referenceable")]
        self.version_doc: dict = referenceable[0] if referenceable else spec["versions"][0]
        self.version: str = self.version_doc["name"]
        self.api_version = f"{self.group}/{self.version}"
        self.schema: dict = self.version_doc["schema"]["openAPIV3Schema"]

    def __repr__(self) -> str:
        return f"Xrd({self.kind})"

    @property
    def printer_columns(self) -> list[dict]:
        return list(self.version_doc.get("additionalPrinterColumns") or [])

    @property
    def effective_printer_columns(self) -> list[dict]:
        """What `kubectl get` shows: ours, then the ones Crossplane appends."""
        return self.printer_columns + [dict(c) for c in CROSSPLANE_PRINTER_COLUMNS]

    @functools.cached_property
    def crd_schema(self) -> dict:
        """The openAPIV3Schema of the CRD Crossplane generates from this XRD."""
        schema = copy.deepcopy(self.schema)
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "properties": {"name": {"type": "string",
                                                     "maxLength": CROSSPLANE_NAME_MAX}}}
        props.setdefault("spec", {"type": "object", "properties": {}})
        props["spec"].setdefault("properties", {}).update(copy.deepcopy(CROSSPLANE_SPEC_PROPS))
        props.setdefault("status", {"type": "object", "properties": {}})
        props["status"].setdefault("properties", {}).update(copy.deepcopy(CROSSPLANE_STATUS_PROPS))
        schema["required"] = sorted(set(schema.get("required", [])) | {"spec"})
        return schema

    @functools.cached_property
    def _validator(self) -> jsonschema.Draft7Validator:
        return jsonschema.Draft7Validator(to_jsonschema(self.crd_schema))

    def with_defaults(self, obj: Mapping) -> dict:
        return apply_defaults(self.crd_schema, obj)

    def violations(self, obj: Mapping, old: Mapping | None = None) -> list[Violation]:
        """Everything the API server would reject in `obj` (after defaulting)."""
        found: list[Violation] = []
        if obj.get("apiVersion") != self.api_version:
            found.append(Violation("apiVersion", f"must be {self.api_version}"))
        if obj.get("kind") != self.kind:
            found.append(Violation("kind", f"must be {self.kind}"))
        namespace = (obj.get("metadata") or {}).get("namespace")
        if self.scope == "Cluster" and namespace:
            found.append(Violation("metadata.namespace", f"{self.kind} is cluster-scoped"))
        defaulted = self.with_defaults(obj)
        for error in sorted(self._validator.iter_errors(defaulted), key=str):
            found.append(Violation(".".join(str(p) for p in error.absolute_path), error.message))
        found += list_key_violations(self.crd_schema, defaulted)
        old_defaulted = self.with_defaults(old) if old is not None else None
        found += cel_violations(self.crd_schema, defaulted, old_defaulted)
        return found

    def cel_messages(self, obj: Mapping, old: Mapping | None = None) -> list[str]:
        return [v.message for v in self.violations(obj, old) if v.rule]


@functools.lru_cache(maxsize=None)
def _load_all() -> tuple[Xrd, ...]:
    xrds = []
    for path in sorted(APIS.glob("*/definition.yaml")):
        for doc in load_yaml_docs(path):
            xrds.append(Xrd(path, doc))
    return tuple(xrds)


def load_xrds() -> dict[str, Xrd]:
    """Every XRD under apis/, by the kind it defines."""
    return {xrd.kind: xrd for xrd in _load_all()}


def xrd_for(obj: Mapping) -> Xrd:
    """The XRD defining `obj`'s kind (KeyError naming the kind when there is none)."""
    kind = obj.get("kind")
    xrds = load_xrds()
    if kind not in xrds:
        raise KeyError(f"no XRD under apis/ defines kind {kind!r}")
    return xrds[kind]


def assert_valid(obj: Mapping, old: Mapping | None = None) -> None:
    """Fail with every violation listed when `obj` would be rejected by its CRD."""
    problems = xrd_for(obj).violations(obj, old)
    name = (obj.get("metadata") or {}).get("name")
    assert not problems, f"{obj.get('kind')} {name!r} is invalid:\n" + "\n".join(
        f"  - {p}" for p in problems)


# --- schema walking ------------------------------------------------------------------


def walk_schema(schema: Mapping, path: str = "") -> Iterator[tuple[str, Mapping]]:
    """Every schema node with a readable path: properties by name, `[]` for array items,
    `{}` for map values."""
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk_schema(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), Mapping):
        yield from walk_schema(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from walk_schema(schema["additionalProperties"], f"{path}{{}}")


def schema_at(schema: Mapping, json_path: str) -> Mapping | None:
    """The schema node a printer-column JSONPath such as `.status.progress.percent` or
    `.status.conditions[?(@.type=='Ready')].status` reads, or None if it reads nothing."""
    meta = re.fullmatch(r"\.metadata\.([A-Za-z]+)", json_path)
    if meta:  # the API server owns ObjectMeta; these are its printable fields
        return OBJECT_META_FIELDS.get(meta.group(1))
    node: Mapping | None = schema
    for token in re.findall(r"\.([A-Za-z0-9_-]+)|\[[^\]]*\]", json_path):
        if node is None:
            return None
        if token == "":  # an index or filter: step into the array's items
            node = node.get("items") if node.get("type") == "array" else None
        elif token in (node.get("properties") or {}):
            node = node["properties"][token]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return None
    return node


# --- defaults ------------------------------------------------------------------------


def apply_defaults(schema: Mapping, value: Any) -> Any:
    """A copy of `value` with the schema's defaults filled in, as the API server does;
    the same defaulting `fleetcache render --xrd` applies."""
    return render.with_defaults(value, schema)


# --- OpenAPI (Kubernetes dialect) to JSON Schema --------------------------------------

_K8S_ONLY = ("x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
             "x-kubernetes-map-type", "x-kubernetes-embedded-resource",
             "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "nullable",
             "format", "default", "description", "example", "externalDocs")


def to_jsonschema(schema: Mapping) -> dict:
    """Translate a structural Kubernetes schema to JSON Schema (draft 7).

    Objects with `properties` reject unknown fields unless they preserve them; a `set` list
    must hold unique items; `x-kubernetes-int-or-string` is integer or string; `nullable`
    admits null. Descriptions, formats and defaults do not validate anything."""
    out: dict = {k: v for k, v in schema.items()
                 if k not in _K8S_ONLY and k not in ("properties", "items", "additionalProperties",
                                                     "allOf", "anyOf", "oneOf", "not")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema:
        out["properties"] = {k: to_jsonschema(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), Mapping):
        out["items"] = to_jsonschema(schema["items"])
    if isinstance(schema.get("additionalProperties"), Mapping):
        out["additionalProperties"] = to_jsonschema(schema["additionalProperties"])
    elif "additionalProperties" in schema:
        out["additionalProperties"] = schema["additionalProperties"]
    elif "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out.setdefault(key, [])
            out[key] = out[key] + [to_jsonschema(s) for s in schema[key]]
    if "not" in schema:
        out["not"] = to_jsonschema(schema["not"])
    if schema.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def list_key_violations(schema: Mapping, value: Any, path: str = "") -> list[Violation]:
    """`x-kubernetes-list-type: map` lists may not repeat a key."""
    found: list[Violation] = []
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                found += list_key_violations(sub, value[name], f"{path}.{name}" if path else name)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set = set()
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    ident = tuple(repr(item.get(k)) for k in keys)
                    if ident in seen:
                        found.append(Violation(f"{path}[{index}]",
                                               f"duplicate entry for key {dict(zip(keys, ident))}"))
                    seen.add(ident)
        for index, item in enumerate(value):
            found += list_key_violations(schema["items"], item, f"{path}[{index}]")
    return found


# --- CEL ---------------------------------------------------------------------------------

_CEL = celpy.Environment()


@functools.lru_cache(maxsize=None)
def compile_rule(rule: str):
    """A runnable program for one CEL rule (raises on a syntax error)."""
    return _CEL.program(_CEL.compile(rule))


def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def evaluate_rule(rule: str, self_value: Any, old_value: Any = None) -> bool | str:
    """True or False, or the error text when the rule cannot be evaluated."""
    activation = {"self": celpy.json_to_cel(self_value)}
    if old_value is not None:
        activation["oldSelf"] = celpy.json_to_cel(old_value)
    try:
        result = compile_rule(rule).evaluate(activation)
    except celpy.CELEvalError as err:
        return f"evaluation error: {err.args[0] if err.args else err}"
    if isinstance(result, celpy.CELEvalError):
        return f"evaluation error: {result.args[0] if result.args else result}"
    return bool(result)


def cel_violations(schema: Mapping, value: Any, old: Any = None, path: str = "") -> list[Violation]:
    """Evaluate every x-kubernetes-validations rule on the values that are present."""
    found: list[Violation] = []
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = entry["rule"]
        if is_transition_rule(rule) and old is None:
            continue  # Kubernetes skips transition rules on create
        outcome = evaluate_rule(rule, value, old)
        if outcome is not True:
            message = entry.get("message") or f"failed rule: {rule}"
            if isinstance(outcome, str):
                message = f"{message} ({outcome})"
            found.append(Violation(path, message, rule))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name in value:
                old_sub = old.get(name) if isinstance(old, dict) else None
                found += cel_violations(sub, value[name], old_sub, f"{path}.{name}" if path else name)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, sub_value in value.items():
                if key not in props:
                    old_sub = old.get(key) if isinstance(old, dict) else None
                    found += cel_violations(extra, sub_value, old_sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            # Kubernetes correlates old list items only for map lists; none here need it.
            found += cel_violations(schema["items"], item, None, f"{path}[{index}]")
    return found


def cel_rules(schema: Mapping) -> Iterator[tuple[str, dict]]:
    """(schema path, rule entry) for every CEL rule in a schema."""
    for path, node in walk_schema(schema):
        for entry in node.get("x-kubernetes-validations") or []:
            yield path, entry


# --- examples --------------------------------------------------------------------------


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("**/*.yaml") if p.is_file()) + sorted(
        p for p in EXAMPLES.glob("**/*.yml") if p.is_file())


def example_docs() -> list[tuple[Path, int, dict]]:
    """(file, index in file, document) for every YAML document under examples/."""
    return [(path, index, doc) for path in example_files()
            for index, doc in enumerate(load_yaml_docs(path))]


def is_fleetcache_kind(obj: Mapping) -> bool:
    group = str(obj.get("apiVersion", "")).split("/")[0]
    return group in {xrd.group for xrd in _load_all()}
