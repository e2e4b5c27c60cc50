"""The project's XRDs for tests: the helpers only tests need beside `fleetcache.apis.xrds`
(what the composers and `fleetcache render` check).

Use `xrd_for(obj).violations(obj)` (or `assert_valid(obj)`) from any test: examples, the
composed ModelCacheHydrations of a render, status written by a composer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from fleetcache.apis.xrds import Xrd, load_xrds, xrd_for_kind

REPO = Path(__file__).resolve().parents[2]
COMPOSITIONS = REPO / "compositions"
EXAMPLES = REPO / "examples"

OBJECT_META_FIELDS = {name: {"type": "string"} for name in (
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
    "generateName")}
OBJECT_META_FIELDS["generation"] = {"type": "integer"}

# Keywords a structural schema may not use (apiextensions "structural schema" rules).
FORBIDDEN_KEYWORDS = ("$ref", "definitions", "dependencies", "id", "uniqueItems",
                      "patternProperties", "additionalItems", "$schema")


def load_yaml_docs(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def xrd_for(obj: Mapping) -> Xrd:
    """The XRD defining `obj`'s kind (KeyError naming the kind when there is none)."""
    xrd = xrd_for_kind(obj.get("kind"))
    if xrd is None:
        raise KeyError(f"no XRD under apis/ defines kind {obj.get('kind')!r}")
    return xrd


def assert_valid(obj: Mapping, old: Mapping | None = None) -> None:
    """Fail with every violation listed when `obj` would be rejected by its CRD."""
    problems = xrd_for(obj).violations(obj, old)
    name = (obj.get("metadata") or {}).get("name")
    assert not problems, f"{obj.get('kind')} {name!r} is invalid:\n" + "\n".join(
        f"  - {p}" for p in problems)


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
    return group in {xrd.group for xrd in load_xrds().values()}
