"""Kubernetes manifests checked as the API server would: each kind's strict OpenAPI schema
(kubernetes-validate), quantities parsed by fleetcache.quantity, names and labels.
`fleetcache render` and the tests check every composed manifest here."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate.utils
import referencing

from fleetcache import quantity
from fleetcache.apis.xrds import Violation, object_meta_violations, schema_violations
from fleetcache.shapes import DNS_LABEL, DNS_LABEL_MAX, DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX

# Kubernetes kinds whose names must be DNS labels (63), not just subdomains (253).
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service", "Job"})
K8S_VERSION = "1.37.0"  # the kubernetes-validate schemas render checks manifests against


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
