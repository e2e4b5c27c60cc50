"""Generate the typed API models from the XRDs: `python -m fleetcache.devtools.apigen` (`make models`).

The XRDs under `apis/` are the one definition of each API. This turns each XRD's
`openAPIV3Schema` into a pydantic v2 module under `apis/models/`
(`fleetcache.apis.models.<kind_snake>`) with datamodel-code-generator, so the
composers read their spec through the same types, defaults, enums, patterns and bounds
the API server enforces. The modules are checked in; `tests/test_models.py` regenerates
them and compares byte for byte, so an XRD edit without `make models` fails the tests.

Before generating, the schema becomes what Crossplane's CRD holds and pydantic can
express: Crossplane's own fields are added (`apiVersion`, `kind`, `metadata`,
`spec.crossplane`, `status.conditions`, `status.crossplane`, all left open) and `spec`
is required, an
`x-kubernetes-int-or-string` value becomes integer-or-string, and an
`x-kubernetes-preserve-unknown-fields` object keeps its unknown fields. Every other
object forbids unknown fields, as the API server refuses or prunes them. CEL rules
(`x-kubernetes-validations`) are cross-field and stay in the XRD: the composers evaluate
them separately.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
APIS = REPO / "apis"
MODELS = REPO / "apis" / "models"
GENERATOR_VERSION = "0.89.0"

# Pinned datamodel-code-generator options: pydantic v2 models, field names in snake case
# with the API's camelCase as aliases, XRD defaults applied (nested objects defaulted to
# `{}` are validated, so their own defaults fill in), enums as Literal so an error lists
# the allowed values, int and bool strict (no "3" or True for a count; the function server
# has already turned protobuf's whole-number floats back into ints), and the built-in
# formatter only, so the output does not depend on which black or isort is installed.
OPTIONS: dict[str, Any] = {
    "output_model_type": "pydantic_v2.BaseModel",
    "target_python_version": "3.11",
    "extra_fields": "forbid",
    "snake_case_field": True,
    "allow_population_by_field_name": False,
    "apply_default_values_for_required_fields": True,
    "field_constraints": True,
    "use_annotated": True,
    "enum_field_as_literal": "all",
    "strict_types": ["int", "bool"],
    "use_standard_collections": True,
    "use_union_operator": True,
    "use_default_kwarg": True,
    "keep_model_order": True,
    "collapse_root_models": True,
    "disable_timestamp": True,
    "formatters": ["builtin"],
}

OPEN_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CROSSPLANE_ROOT_PROPS = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {**OPEN_OBJECT, "description": "Kubernetes object metadata."},
}
CROSSPLANE_SPEC_PROPS = {
    "crossplane": {**OPEN_OBJECT, "description": "Composition selection and resource "
                   "references, written by Crossplane."},
}
CROSSPLANE_STATUS_PROPS = {
    "conditions": {"type": "array", "description": "Conditions, written by Crossplane.",
                   "items": OPEN_OBJECT},
    "crossplane": {**OPEN_OBJECT, "description": "Crossplane's own status."},
}


def snake_case(kind: str) -> str:
    """`ModelCacheHydration` -> `model_cache_hydration`: the module name of a kind."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def xrd_paths(apis: Path = APIS) -> list[Path]:
    return sorted(apis.glob("*/definition.yaml"))


def load_xrd(path: Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def api_schema(xrd: dict) -> dict:
    """The openAPIV3Schema of the XRD's referenceable version, as Crossplane's CRD has it,
    translated for the generator."""
    versions = xrd["spec"]["versions"]
    version = next((v for v in versions if v.get("referenceable")), versions[0])
    schema = translate(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    schema["required"] = sorted(set(schema.get("required", [])) | {"spec"})
    props = schema.setdefault("properties", {})
    props.update(copy.deepcopy(CROSSPLANE_ROOT_PROPS))
    for part, added in (("spec", CROSSPLANE_SPEC_PROPS), ("status", CROSSPLANE_STATUS_PROPS)):
        props.setdefault(part, {"type": "object"}).setdefault("properties", {}).update(
            copy.deepcopy(added))
    return schema


def translate(node: Any) -> Any:
    """Kubernetes schema extensions as plain JSON Schema; CEL rules are dropped here."""
    if isinstance(node, list):
        return [translate(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: translate(value) for key, value in node.items()
            if key != "x-kubernetes-validations"}
    if node.pop("x-kubernetes-int-or-string", False):
        string = {"type": "string"}
        for key in ("pattern", "maxLength", "minLength"):
            if key in node:
                string[key] = node.pop(key)
        node["anyOf"] = [{"type": "integer"}, string]
    if node.pop("x-kubernetes-preserve-unknown-fields", False):
        node["additionalProperties"] = True
    return node


def header(path: Path) -> str:
    source = path.relative_to(path.parents[2]).as_posix()
    return (f"# Generated from {source} by `python -m fleetcache.devtools.apigen` (make models)\n"
            f"# with datamodel-code-generator {GENERATOR_VERSION}. Do not edit: edit the XRD "
            "and regenerate.")


def generate(path: Path) -> tuple[str, str]:
    """(module name, source) of the models of one XRD."""
    from datamodel_code_generator import InputFileType
    from datamodel_code_generator import generate as codegen

    xrd = load_xrd(path)
    kind = xrd["spec"]["names"]["kind"]
    source = codegen(json.dumps(api_schema(xrd)), input_file_type=InputFileType.JsonSchema,
                     class_name=kind, custom_file_header=header(path), **OPTIONS)
    return snake_case(kind), str(source)


PACKAGE_DOC = '''"""Typed models of the fleetcache APIs, generated from the XRDs by fleetcache.devtools.apigen.

Do not edit: edit apis/<plural>/definition.yaml and run `make models`.
"""
'''


def generate_all(apis: Path = APIS) -> dict[str, str]:
    """Every generated file by name, the package's `__init__.py` included."""
    files = {"__init__.py": PACKAGE_DOC}
    for path in xrd_paths(apis):
        module, source = generate(path)
        files[f"{module}.py"] = source
    return files


def write(files: dict[str, str], output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(files.items()):
        (output / name).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcache.devtools.apigen", description=__doc__
                                     .splitlines()[0])
    parser.add_argument("--output", type=Path, default=MODELS,
                        help="directory of the generated modules (default: apis/models)")
    args = parser.parse_args(argv)
    files = generate_all()
    write(files, args.output)
    print(f"wrote {len(files)} files to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
