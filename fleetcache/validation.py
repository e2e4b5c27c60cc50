"""Validate objects against fleetcache's XRDs the way the API server would.

Crossplane turns each `apis/<plural>/definition.yaml` into a CRD: it adds its own fields
(`spec.crossplane`, `status.conditions`, `status.crossplane`), caps `metadata.name` at 63
characters and appends its printer columns. `Xrd.crd_schema` reproduces that, so what is
checked here is what a cluster would enforce:

* defaults are applied first (`with_defaults`), as the API server does on admission;
* the OpenAPI v3 schema is checked with `jsonschema` after translating the Kubernetes
  extensions (an unknown field is a violation, since the API server would prune it;
  `x-kubernetes-list-type: set|map` means unique items / unique keys);
* every `x-kubernetes-validations` rule is evaluated with cel-python, `self` bound to the
  value at the rule's level; transition rules (those using `oldSelf`) only when an old
  object is given, and only where the old object has a value at that level;
* `metadata.name` must be an RFC 1123 subdomain of at most 63 characters (Crossplane's cap).

Each rule is compiled once per process and evaluated per call, so composers can afford to
check a spec on every request. Public API: `load_xrds`, `xrd_for_kind`, `violations`,
`with_defaults`, `cel_violations`, `Violation`.

Kubernetes manifests (`manifest_violations`) are checked against kubernetes-validate's
strict 1.37 schemas, quantities parsed by `fleetcache.quantity`, names and labels as the
API server requires. `load_documents` reads YAML with bounded cost. `fleetcache render`
uses all of it; design/testing.md says where it differs from a real API server.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import celpy
import jsonschema
import kubernetes_validate.utils
import referencing
import yaml

from fleetcache import quantity
from fleetcache.functions import kit

APIS = Path(str(importlib.resources.files("fleetcache.apis")))

XRD_API_VERSION = "apiextensions.crossplane.io/v2"
CROSSPLANE_NAME_MAX = 63
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# Kubernetes kinds whose names must be DNS labels (63), not just subdomains (253).
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service", "Job"})
K8S_VERSION = "1.37.0"  # the kubernetes-validate schemas render checks manifests against

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


# --- loading -------------------------------------------------------------------------------


class DocumentError(ValueError):
    """A file that cannot be read as YAML documents; the message is one line naming it."""


MAX_FILE_BYTES = 64 * 2**20  # a render request carries at most 64 MiB
MAX_NODES = 2_000_000  # values in one file, counting each alias again
MAX_DEPTH = 64  # nesting; real manifests stay under 20


def load_documents(path: str | os.PathLike) -> list[dict]:
    """Every YAML mapping in a file, or in every *.yaml/*.yml file under a directory.
    Raises DocumentError for a missing, oversized, undecodable or malformed file, and for
    one whose aliases or nesting would make checking it unbounded."""
    root = Path(path)
    if not root.exists():
        raise DocumentError(f"{path}: no such file or directory")
    files = sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml")) \
        if root.is_dir() else [root]
    docs: list[dict] = []
    for file in files:
        docs += [d for d in _parsed(file) if isinstance(d, dict)]
    return docs


def _parsed(file: Path) -> list[Any]:
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise DocumentError(f"{file}: larger than {MAX_FILE_BYTES // 2**20} MiB")
        docs = list(yaml.safe_load_all(file.read_text(encoding="utf-8")))
    except OSError as err:
        raise DocumentError(f"{file}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise DocumentError(f"{file}: not UTF-8 text") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise DocumentError(f"{file}: not valid YAML: {kit.clipped(err.problem or err.context)}"
                            f"{where}") from None
    except yaml.YAMLError as err:
        raise DocumentError(f"{file}: not valid YAML: {kit.clipped(err)}") from None
    except RecursionError:
        raise DocumentError(f"{file}: nested too deeply to be a Kubernetes object") from None
    if not bounded(docs):
        raise DocumentError(f"{file}: more than {MAX_NODES} values or {MAX_DEPTH} levels of "
                            f"nesting once aliases are expanded; write the values out")
    return docs


def bounded(value: Any) -> bool:
    """Whether `value` has at most MAX_NODES values and MAX_DEPTH levels, counting a value
    reached through several aliases each time (as every later step would walk it)."""
    budget = MAX_NODES
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > MAX_DEPTH:
            return False
        if isinstance(node, dict):
            stack += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            stack += [(v, depth + 1) for v in node]
    return True


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
                                                 f"got {kit.shown(obj.get('apiVersion'))}"))
        if obj.get("kind") != self.kind:
            found.append(Violation("kind", f"must be {self.kind}"))
        found += self.metadata_violations(obj)
        defaulted = self.with_defaults(obj)
        shape = schema_violations(self._validator, defaulted)
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


@functools.lru_cache(maxsize=None)
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


def xrd_for_kind(kind: str, xrds: Mapping[str, Xrd] | None = None) -> Xrd | None:
    """The XRD defining `kind`, or None (also for a kind that is no string)."""
    if not isinstance(kind, str):
        return None
    return (_repo_xrds() if xrds is None else xrds).get(kind)


def violations(obj: Mapping, old: Mapping | None = None,
               xrds: Mapping[str, Xrd] | None = None) -> list[Violation]:
    """Everything the API server would refuse in `obj` (and in the update from `old`)."""
    xrd = xrd_for_kind(obj.get("kind"), xrds)
    if xrd is None:
        return [Violation("kind", f"no XRD defines kind {kit.shown(obj.get('kind'))}")]
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
                                                        f"{kit.shown(entries)}"))
            continue
        for key, value in entries.items():
            where = f"metadata.{field}.{kit.clipped(key)}"
            if not qualified_name_ok(key):
                found.append(Violation(where, f"key {kit.shown(key)} is not a qualified name "
                                              f"(an optional DNS subdomain prefix and '/', then "
                                              f"at most 63 letters, digits, '-', '_' or '.')"))
            if field == "labels" and not (isinstance(value, str) and len(value) <= 63
                                          and LABEL_VALUE.fullmatch(value)):
                found.append(Violation(where, f"value {kit.shown(value)} is not a label value "
                                              f"(at most 63 letters, digits, '-', '_' or '.', "
                                              f"starting and ending with a letter or digit)"))
            elif field == "annotations" and not isinstance(value, str):
                found.append(Violation(where, f"must be a string, got {kit.shown(value)}"))
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
        return [Violation(path, f"is required and must be {what}, got {kit.shown(name)}")]
    if len(name) > limit:
        return [Violation(path, f"must be at most {limit} characters, got {len(name)}")]
    if not shape.fullmatch(name):
        dots = ", dots between labels" if shape is DNS_SUBDOMAIN else ""
        return [Violation(path, f"{kit.shown(name)} is not {what} (lower case letters, digits "
                                f"and '-'{dots}; start and end with a letter or digit)")]
    return []


# --- Kubernetes manifests ------------------------------------------------------------------


def manifest_violations(manifest: Mapping) -> list[Violation]:
    """Everything the API server would refuse in a Kubernetes manifest: its kind's OpenAPI
    schema (strict: an unknown field is a violation), quantities, names and labels. A kind
    the Kubernetes schemas do not know gets only the metadata checks; `has_k8s_schema`
    tells which."""
    kind = str(manifest.get("kind"))
    limit, shape = (DNS_LABEL_MAX, DNS_LABEL) if kind in LABEL_NAMED_KINDS \
        else (DNS_SUBDOMAIN_MAX, DNS_SUBDOMAIN)
    found = object_meta_violations(manifest, limit, shape)
    validator = k8s_validator(str(manifest.get("apiVersion")), kind)
    if validator is not None:
        found += schema_violations(validator, dict(manifest))
    return found


def has_k8s_schema(manifest: Mapping) -> bool:
    return k8s_validator(str(manifest.get("apiVersion")), str(manifest.get("kind"))) is not None


_K8S_SCHEMAS = Path(kubernetes_validate.utils.__file__).parent / "kubernetes-json-schema" / \
    f"v{K8S_VERSION}-local-strict"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
QUANTITY_FORMAT = "Kubernetes quantity such as 20Gi or 500M"
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks(QUANTITY_FORMAT, raises=quantity.QuantityError)
def _is_quantity(value: Any) -> bool:
    """The API server refuses a quantity it cannot parse; fleetcache's bounded parser also
    refuses negatives, which no field fleetcache composes allows."""
    return value is None or quantity.parse(value) is not None


@functools.lru_cache(maxsize=1)
def _k8s_registry() -> referencing.Registry:
    """kubernetes-validate's shared definitions, with Quantity checked by format."""
    definitions = json.loads((_K8S_SCHEMAS / "_definitions.json").read_text())
    definitions["$defs"][_QUANTITY]["format"] = QUANTITY_FORMAT
    return referencing.Resource.from_contents(definitions) @ referencing.Registry()


@functools.lru_cache(maxsize=1)
def _k8s_schema_files() -> frozenset[str]:
    return frozenset(os.listdir(_K8S_SCHEMAS))


@functools.lru_cache(maxsize=256)
def k8s_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """The strict Kubernetes schema of `kind`, compiled once, or None for a kind it does not
    define (custom resources)."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    name = f"{kind.lower()}-{group_version}.json"
    if name not in _k8s_schema_files():
        return None
    schema = json.loads((_K8S_SCHEMAS / name).read_text())
    if api_version not in ((schema.get("properties") or {}).get("apiVersion") or {}).get("enum", ()):
        return None
    return jsonschema.Draft202012Validator(schema, registry=_k8s_registry(),
                                           format_checker=_FORMATS)


# --- schema walking ------------------------------------------------------------------------


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
    return f"{path}.{kit.clipped(name)}" if path else kit.clipped(name)


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
                                       f"unknown field {kit.shown(name)}: the API server would "
                                       f"drop it; check its spelling and indentation"))
            continue
        if error.validator == "required" and isinstance(error.instance, Mapping):
            for name in error.validator_value:
                if name not in error.instance:
                    found.append(Violation(joined(path, name),
                                           f"required field {kit.shown(name)} is missing"))
            continue
        found.append(Violation(path, schema_message(error)))
    return sorted(set(found), key=lambda v: (v.path, v.message))


def schema_message(error: jsonschema.ValidationError) -> str:
    """What a schema keyword demands, and the offending value cut to 200 characters."""
    got = kit.shown(error.instance)
    rule = error.validator_value
    demands = {
        "type": lambda: f"must be of type {rule}",
        "enum": lambda: f"must be one of {', '.join(map(str, rule))}",
        "pattern": lambda: f"must be {kit.PATTERN_MEANINGS[rule]}"
        if rule in kit.PATTERN_MEANINGS else f"must match {kit.shown(rule)}",
        "maxLength": lambda: f"must be at most {rule} characters",
        "minLength": lambda: f"must be at least {rule} characters",
        "maximum": lambda: f"must be at most {rule}",
        "minimum": lambda: f"must be at least {rule}",
        "maxItems": lambda: f"must have at most {rule} items",
        "minItems": lambda: f"must have at least {rule} items",
        "maxProperties": lambda: f"must have at most {rule} entries",
        "minProperties": lambda: f"must have at least {rule} entries",
        "uniqueItems": lambda: "must not repeat an item",
        "format": lambda: f"must be a {rule}",
        "anyOf": lambda: "must match one of the allowed shapes",
        "oneOf": lambda: "must match exactly one of the allowed shapes",
    }
    if error.validator in demands:
        return f"{demands[error.validator]()}, got {got}"
    return kit.shown(error.message).strip("'\"")


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
                        shown_keys = ", ".join(f"{k}={kit.shown(item.get(k))}" for k in keys)
                        found.append(Violation(joined(path, index),
                                               f"duplicate entry for key {shown_keys}"))
                    seen.add(ident)
        for index, item in enumerate(value):
            found += list_key_violations(schema["items"], item, joined(path, index))
    return found


# --- CEL -------------------------------------------------------------------------------------

_CEL = celpy.Environment()


@dataclass(frozen=True)
class CelQuantity:
    """A value of Kubernetes' CEL quantity library (`quantity("10Ti")`), exact."""

    value: Decimal


def cel_quantity(text: Any) -> CelQuantity:
    """`quantity(s)`: parsed by fleetcache.quantity (bounded cost); a string that is not a
    quantity is an evaluation error, as in Kubernetes."""
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    return CelQuantity(quantity.parse(text))


def cel_is_quantity(text: Any) -> celpy.celtypes.BoolType:
    try:
        cel_quantity(text)
    except (TypeError, quantity.QuantityError):
        return celpy.celtypes.BoolType(False)
    return celpy.celtypes.BoolType(True)


def cel_compare(left: CelQuantity, right: CelQuantity) -> celpy.celtypes.IntType:
    if not (isinstance(left, CelQuantity) and isinstance(right, CelQuantity)):
        raise TypeError("compareTo compares two quantities")
    return celpy.celtypes.IntType((left.value > right.value) - (left.value < right.value))


# The part of Kubernetes' CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go)
# fleetcache's XRDs use; methods are functions whose first argument is the receiver.
QUANTITY_FUNCTIONS = {
    "quantity": cel_quantity,
    "isQuantity": cel_is_quantity,
    "compareTo": cel_compare,
    "isLessThan": lambda a, b: celpy.celtypes.BoolType(cel_compare(a, b) < 0),
    "isGreaterThan": lambda a, b: celpy.celtypes.BoolType(cel_compare(a, b) > 0),
}


@functools.lru_cache(maxsize=None)
def compile_rule(rule: str) -> celpy.Runner:
    """A runnable program for one CEL rule, compiled once per process (raises on a syntax
    error), with the quantity library."""
    return _CEL.program(_CEL.compile(rule), functions=QUANTITY_FUNCTIONS)


@functools.lru_cache(maxsize=None)
def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def evaluate_rule(rule: str, self_value: Any, old_value: Any = None) -> bool | str:
    """True or False, or the error text when the rule cannot be evaluated."""
    try:
        activation = {"self": celpy.json_to_cel(self_value)}
        if old_value is not None:
            activation["oldSelf"] = celpy.json_to_cel(old_value)
    except (ValueError, TypeError) as err:  # e.g. an integer beyond CEL's 64 bits
        return f"evaluation error: {kit.clipped(err)}"
    try:
        result = compile_rule(rule).evaluate(activation)
    except celpy.CELEvalError as err:
        return f"evaluation error: {kit.shown(err.args[0] if err.args else str(err))}"
    if isinstance(result, celpy.CELEvalError):
        return f"evaluation error: {kit.shown(result.args[0] if result.args else str(result))}"
    return bool(result)


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
            message = entry.get("message") or f"failed rule: {kit.shown(rule)}"
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
            old_item = old_items.get(map_list_key(schema, item)) if old_items else None
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
