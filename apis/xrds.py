"""Validate objects against fleetcache's XRDs the way the API server would.

Crossplane turns each `apis/<plural>/definition.yaml` into a CRD: it adds its own fields
(`spec.crossplane`, `status.conditions`, `status.crossplane`), caps `metadata.name` at 63
characters and appends its printer columns. `Xrd.crd_schema` reproduces that, so what is
checked here is what a cluster would enforce:

* defaults are applied first (`with_defaults`), as the API server does on admission;
* the OpenAPI v3 schema is checked with `jsonschema` after translating the Kubernetes
  extensions (an unknown field is a violation, since the API server would prune it;
  `x-kubernetes-list-type: set|map` means unique items / unique keys);
* every `x-kubernetes-validations` rule is evaluated (apis/cel.py), `self` bound to the
  value at the rule's level; transition rules (those using `oldSelf`) only when an old
  object is given, and only where the old object has a value at that level;
* `metadata.name` must be an RFC 1123 subdomain of at most 63 characters (Crossplane's cap).

Each rule is compiled once per process and evaluated per call, so composers can afford to
check a spec on every request (apis/specs.py does). design/testing.md says where this
differs from a real API server.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from fleetcache.apis.cel import evaluate_rule, is_transition_rule
from fleetcache.apis.documents import DocumentError, load_documents
from fleetcache.apis.patterns import PATTERN_MEANINGS
from fleetcache.messages import clipped, counted, shown
from fleetcache.shapes import DNS_LABEL, DNS_LABEL_MAX, DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, LABEL_NAME, LABEL_VALUE

APIS = Path(str(importlib.resources.files("fleetcache.apis")))

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


@dataclass(frozen=True)
class Violation:
    """One thing the API server would refuse: where (a dotted field path) and why."""

    path: str  # e.g. "spec.placement"; "" for the object itself
    message: str
    rule: str = ""  # the CEL rule, when a CEL rule produced it
    unevaluable: bool = False  # the rule could not be evaluated on the value (a type error)

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"




class Xrd:
    """One CompositeResourceDefinition and the CRD Crossplane derives from it."""

    def __init__(self, path: Path | None, doc: dict):
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
        """Everything the API server would reject in `obj` (after defaulting), creating it
        or, given `old`, updating `old` to it."""
        found: list[Violation] = []
        if obj.get("apiVersion") != self.api_version:
            found.append(Violation("apiVersion", f"must be {self.api_version}, "
                                                 f"got {shown(obj.get('apiVersion'))}"))
        if obj.get("kind") != self.kind:
            found.append(Violation("kind", f"must be {self.kind}"))
        meta = self.metadata_violations(obj)
        found += meta
        defaulted = self.with_defaults(obj)
        # The CRD schema caps metadata.name too: a name the metadata rules refused is said once.
        said = {m.path for m in meta}
        shape = [v for v in schema_violations(self._validator, defaulted) if v.path not in said]
        found += shape + list_key_violations(self.crd_schema, defaulted)
        old_defaulted = self.with_defaults(old) if old is not None else None
        # A rule cannot be evaluated on a value of the wrong type; the schema said so already.
        found += [v for v in self.cel_violations(defaulted, old_defaulted)
                  if not (shape and v.unevaluable)]
        return found

    def metadata_violations(self, obj: Mapping) -> list[Violation]:
        """The name, namespace and label rules the CRD schema cannot express."""
        found = object_meta_violations(obj, CROSSPLANE_NAME_MAX, DNS_SUBDOMAIN)
        if self.scope == "Cluster" and (obj.get("metadata") or {}).get("namespace"):
            found.append(Violation("metadata.namespace", f"{self.kind} is cluster-scoped"))
        return found

    def cel_violations(self, obj: Mapping, old: Mapping | None = None) -> list[Violation]:
        """Only the CEL rules, on `obj` as given (no defaulting): the cheap check a composer
        can run on every request."""
        return cel_walk(self.crd_schema, obj, old)

    def cel_messages(self, obj: Mapping, old: Mapping | None = None) -> list[str]:
        return [v.message for v in self.violations(obj, old) if v.rule]


def xrds_in(docs: Iterable[Mapping], path: Path | None = None) -> dict[str, Xrd]:
    """The XRDs among `docs`, by the kind each defines."""
    return {xrd.kind: xrd for xrd in (Xrd(path, dict(doc)) for doc in docs
                                      if doc.get("kind") == "CompositeResourceDefinition")}


@functools.cache
def _repo_xrds() -> dict[str, Xrd]:
    """The repository's XRDs. None found is an error, not an empty set: checking against
    no XRD would pass everything silently (e.g. an install that left apis/ behind)."""
    xrds: dict[str, Xrd] = {}
    for path in sorted(APIS.glob("*/definition.yaml")):
        xrds.update(xrds_in(load_documents(path), path))
    if not xrds:
        raise DocumentError(f"{APIS}: no apis/*/definition.yaml; fleetcache.validation needs "
                            f"the XRDs shipped as the fleetcache.apis package (or pass the XRD files)")
    return xrds


def load_xrds(paths: Iterable[str | os.PathLike] | None = None) -> dict[str, Xrd]:
    """XRDs by kind: from the given files or directories, or by default every
    `apis/*/definition.yaml` of the repository (loaded once per process)."""
    if paths is None:
        return dict(_repo_xrds())
    xrds: dict[str, Xrd] = {}
    for path in paths:
        xrds.update(xrds_in(load_documents(path), Path(path)))
    return xrds


def xrd_for_kind(kind: object, xrds: Mapping[str, Xrd] | None = None) -> Xrd | None:
    """The XRD defining `kind`, or None (also for a kind that is no string)."""
    if not isinstance(kind, str):
        return None
    return (_repo_xrds() if xrds is None else xrds).get(kind)


def violations(obj: Mapping, old: Mapping | None = None,
               xrds: Mapping[str, Xrd] | None = None) -> list[Violation]:
    """Everything the API server would refuse in `obj` (and in the update from `old`)."""
    xrd = xrd_for_kind(obj.get("kind"), xrds)
    if xrd is None:
        return [Violation("kind", f"no XRD defines kind {shown(obj.get('kind'))}")]
    return xrd.violations(obj, old)


def with_defaults(obj: Mapping, xrds: Mapping[str, Xrd] | None = None) -> dict:
    """`obj` as the API server would store it: defaulted by its kind's XRD, if any."""
    xrd = xrd_for_kind(obj.get("kind"), xrds)
    return xrd.with_defaults(obj) if xrd is not None else copy.deepcopy(dict(obj))


def cel_violations(obj: Mapping, old: Mapping | None = None,
                   xrds: Mapping[str, Xrd] | None = None) -> list[Violation]:
    """Only the CEL rules of `obj`'s XRD (none when no XRD defines its kind)."""
    xrd = xrd_for_kind(obj.get("kind"), xrds)
    return xrd.cel_violations(obj, old) if xrd is not None else []


def object_meta_violations(obj: Mapping, name_limit: int, name_shape: re.Pattern
                           ) -> list[Violation]:
    """What the API server refuses in metadata whatever the kind: the name (`name_limit`
    characters shaped like `name_shape`), the namespace (a DNS label), label keys and values,
    and annotation keys."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return [Violation("metadata", "must be an object with a name")]
    found = name_violations(meta.get("name"), "metadata.name", name_limit, name_shape)
    if meta.get("namespace") is not None:
        found += name_violations(meta["namespace"], "metadata.namespace", DNS_LABEL_MAX,
                                 DNS_LABEL)
    for field in ("labels", "annotations"):
        entries = meta.get(field)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            found.append(Violation(f"metadata.{field}", f"must map keys to strings, got "
                                                        f"{shown(entries)}"))
            continue
        for key, value in entries.items():
            where = f"metadata.{field}.{clipped(key)}"
            if not qualified_name_ok(key):
                found.append(Violation(where, f"key {shown(key)} is not a qualified name "
                                              f"(an optional DNS subdomain prefix and '/', then "
                                              f"at most 63 letters, digits, '-', '_' or '.')"))
            if field == "labels" and not (isinstance(value, str) and len(value) <= 63
                                          and LABEL_VALUE.fullmatch(value)):
                found.append(Violation(where, f"value {shown(value)} is not a label value "
                                              f"(at most 63 letters, digits, '-', '_' or '.', "
                                              f"starting and ending with a letter or digit)"))
            elif field == "annotations" and not isinstance(value, str):
                found.append(Violation(where, f"must be a string, got {shown(value)}"))
    return found


def qualified_name_ok(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= DNS_SUBDOMAIN_MAX and DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and LABEL_NAME.fullmatch(name) is not None


def name_violations(name: Any, path: str, limit: int, shape: re.Pattern) -> list[Violation]:
    """`name` must be a non-empty string of at most `limit` characters shaped like `shape`
    (an RFC 1123 label or subdomain)."""
    what = "an RFC 1123 label" if shape is DNS_LABEL else "an RFC 1123 subdomain"
    if not isinstance(name, str) or not name:
        return [Violation(path, f"is required and must be {what}, got {shown(name)}")]
    if len(name) > limit:
        return [Violation(path, f"must be at most {counted(limit, 'character')}, got {len(name)}")]
    if not shape.fullmatch(name):
        dots = ", dots between labels" if shape is DNS_SUBDOMAIN else ""
        return [Violation(path, f"{shown(name)} is not {what} (lower case letters, digits "
                                f"and '-'{dots}; start and end with a letter or digit)")]
    return []



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


def cel_rules(schema: Mapping) -> Iterator[tuple[str, dict]]:
    """(schema path, rule entry) for every CEL rule in a schema."""
    for path, node in walk_schema(schema):
        for entry in node.get("x-kubernetes-validations") or []:
            yield path, entry


def joined(path: str, name: Any) -> str:
    """`path` one step down: `[index]` into a list, `.name` into an object (a name from
    input cut to 200 characters, so no path carries a hostile key whole)."""
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{clipped(name)}" if path else clipped(name)


# --- defaults ------------------------------------------------------------------------------


def apply_defaults(schema: Mapping, value: Any) -> Any:
    """A copy of `value` with OpenAPI defaults filled in the way the API server does on
    admission, top down: a missing field with a default gets it, and present (or just
    defaulted) objects, maps and arrays are defaulted inside."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out = dict(value)
        for name, prop in props.items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = apply_defaults(prop, out[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key in out:
                if key not in props:
                    out[key] = apply_defaults(extra, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], item) for item in value]
    return copy.deepcopy(value)


def xrd_schemas(docs: Iterable[Mapping]) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema, for every served version of every XRD."""
    schemas = {}
    for doc in docs:
        if doc.get("kind") != "CompositeResourceDefinition":
            continue
        group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
        for version in doc["spec"].get("versions", []):
            schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


def admit(obj: dict, schemas: Mapping[tuple[str, str], dict]) -> dict:
    """An object as the API server would store it: defaulted by its XRD, when there is one."""
    schema = schemas.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    return apply_defaults(schema, obj) if schema else obj


# --- OpenAPI (Kubernetes dialect) to JSON Schema ------------------------------------------

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

_K8S_ONLY = ("x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
             "x-kubernetes-map-type", "x-kubernetes-embedded-resource",
             "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "nullable",
             "format", "default", "description", "example", "externalDocs")


def to_jsonschema(schema: Mapping) -> dict:
    """Translate a structural Kubernetes schema to JSON Schema (draft 7).

    Objects with `properties` reject unknown fields unless they preserve them; a `set` list
    must hold unique items; `x-kubernetes-int-or-string` is integer or string; `nullable`
    admits null; an integer is an int64. Descriptions, formats and defaults do not validate
    anything."""
    out: dict = {k: v for k, v in schema.items()
                 if k not in _K8S_ONLY and k not in ("properties", "items", "additionalProperties",
                                                     "allOf", "anyOf", "oneOf", "not")}
    if out.get("type") == "integer":  # the API server decodes JSON integers as int64
        out.setdefault("minimum", INT64_MIN)
        out.setdefault("maximum", INT64_MAX)
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


def schema_violations(validator: jsonschema.protocols.Validator, value: Any) -> list[Violation]:
    """Every schema error as a violation whose message quotes at most 200 characters of
    input; an unknown field is named on its own path."""
    found: list[Violation] = []
    for error in validator.iter_errors(value):
        path = ""
        for step in error.absolute_path:
            path = joined(path, step)
        if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
            known = set(error.schema.get("properties") or {})
            for name in sorted(set(error.instance) - known, key=str):
                found.append(Violation(joined(path, name),
                                       f"unknown field {shown(name)}: the API server would "
                                       f"drop it; check its spelling and indentation"))
            continue
        if error.validator == "required" and isinstance(error.instance, Mapping):
            for name in error.validator_value:
                if name not in error.instance:
                    found.append(Violation(joined(path, name),
                                           f"required field {shown(name)} is missing"))
            continue
        found.append(Violation(path, schema_message(error)))
    return sorted(set(found), key=lambda v: (v.path, v.message))


def schema_message(error: jsonschema.ValidationError) -> str:
    """What a schema keyword demands, and the offending value cut to 200 characters."""
    got = shown(error.instance)
    rule = error.validator_value
    demands = {
        "type": lambda: f"must be of type {rule}",
        "enum": lambda: f"must be one of {', '.join(map(str, rule))}",
        "pattern": lambda: f"must be {PATTERN_MEANINGS[rule]}"
        if rule in PATTERN_MEANINGS else f"must match {shown(rule)}",
        "maxLength": lambda: f"must be at most {counted(rule, 'character')}",
        "minLength": lambda: f"must be at least {counted(rule, 'character')}",
        "maximum": lambda: f"must be at most {rule}",
        "minimum": lambda: f"must be at least {rule}",
        "maxItems": lambda: f"must have at most {counted(rule, 'item')}",
        "minItems": lambda: f"must have at least {counted(rule, 'item')}",
        "maxProperties": lambda: f"must have at most {counted(rule, 'entry', 'entries')}",
        "minProperties": lambda: f"must have at least {counted(rule, 'entry', 'entries')}",
        "uniqueItems": lambda: "must not repeat an item",
        "format": lambda: f"must be a {rule}",
        "anyOf": lambda: "must match one of the allowed shapes",
        "oneOf": lambda: "must match exactly one of the allowed shapes",
    }
    if error.validator in demands:
        return f"{demands[error.validator]()}, got {got}"
    return shown(error.message).strip("'\"")


def list_key_violations(schema: Mapping, value: Any, path: str = "") -> list[Violation]:
    """`x-kubernetes-list-type: map` lists may not repeat a key."""
    found: list[Violation] = []
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                found += list_key_violations(sub, value[name], joined(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set = set()
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    ident = tuple(repr(item.get(k)) for k in keys)
                    if ident in seen:
                        shown_keys = ", ".join(f"{k}={shown(item.get(k))}" for k in keys)
                        found.append(Violation(joined(path, index),
                                               f"duplicate entry for key {shown_keys}"))
                    seen.add(ident)
        for index, item in enumerate(value):
            found += list_key_violations(schema["items"], item, joined(path, index))
    return found



def cel_walk(schema: Mapping, value: Any, old: Any = None, path: str = "") -> list[Violation]:
    """Evaluate every x-kubernetes-validations rule on the values that are present; old
    values follow by field name, by map key, and by key in `x-kubernetes-list-type: map`
    lists, as the API server correlates them."""
    found: list[Violation] = []
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = entry["rule"]
        if is_transition_rule(rule) and old is None:
            continue  # Kubernetes skips transition rules on create and on new values
        outcome = evaluate_rule(rule, value, old)
        if outcome is not True:
            message = entry.get("message") or f"failed rule: {shown(rule)}"
            if isinstance(outcome, str):
                message = f"{message} ({outcome})"
            found.append(Violation(path, message, rule, isinstance(outcome, str)))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        old_map = old if isinstance(old, dict) else {}
        for name, sub in props.items():
            if name in value:
                found += cel_walk(sub, value[name], old_map.get(name), joined(path, name))
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, sub_value in value.items():
                if key not in props:
                    found += cel_walk(extra, sub_value, old_map.get(key), joined(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        old_items = correlated_items(schema, old)
        for index, item in enumerate(value):
            item_key = map_list_key(schema, item) if old_items else None
            old_item = old_items.get(item_key) if item_key is not None else None
            found += cel_walk(schema["items"], item, old_item, joined(path, index))
    return found


def map_list_key(schema: Mapping, item: Any) -> tuple | None:
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if not keys or not isinstance(item, dict):
        return None
    return tuple(repr(item.get(k)) for k in keys)


def correlated_items(schema: Mapping, old: Any) -> dict[tuple, Any]:
    """Old items of a `map` list by key; other lists do not correlate (Kubernetes gives
    their items no oldSelf)."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return {}
    return {key: item for item in old if (key := map_list_key(schema, item)) is not None}
