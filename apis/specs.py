"""Reading a composite's spec through the model generated from its XRD.

Types, enums, patterns, bounds and the XRD's defaults come from the model; the XRD's CEL
rules from apis/xrds.py. Every problem becomes one InputError line that names the field
and what is allowed there."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from fleetcache.apis import xrds
from fleetcache.apis.patterns import PATTERN_MEANINGS
from fleetcache.messages import clipped, counted, shown


class InputError(ValueError):
    """Bad user input: the message names the field and the fix. Becomes a fatal result."""



TYPE_NAMES = {"int_type": "an integer", "string_type": "a string", "bool_type": "true or false",
              "dict_type": "an object", "model_type": "an object",
              "model_attributes_type": "an object", "list_type": "a list"}
TIME_ERRORS = ("datetime_parsing", "datetime_from_date_parsing", "datetime_type", "timezone_aware")


def read_spec(model: type[BaseModel], spec: Any) -> dict:
    """A composite's spec read through the root model generated from its XRD, e.g.
    `models.model_cache.ModelCache` (see read_model), then held to the XRD's CEL rules
    (the cross-field ones: "exactly one of", "required when"); Crossplane's
    spec.crossplane left out. InputError names the first problem."""
    spec = read_model(model, {"spec": spec})["spec"]
    spec.pop("crossplane", None)
    broken = xrds.cel_violations({"kind": model.__name__, "spec": spec})
    if broken:
        first = broken[0]
        message = first.message if first.message.startswith(first.path) \
            else f"{first.path}: {first.message}"
        raise InputError(message + and_more(len(broken) - 1))
    return spec


def read_model(model: type[BaseModel], value: Any, path: str = "") -> dict:
    """`value` read through a model generated from an XRD (types, enums, patterns, bounds,
    and the XRD's defaults filled in), in API form (camelCase, unset fields absent), or
    InputError naming the first wrong field, under `path` when the value sits there."""
    try:
        typed = model.model_validate(as_stored(value))
    except ValidationError as err:
        raise input_error(err, model, path) from None
    return typed.model_dump(by_alias=True, exclude_none=True)


def as_stored(value: Any) -> Any:
    """Input as the API server stores it: a null field is pruned, so its default applies.
    (Whole numbers are ints already: the server turns protobuf's floats back, see
    server.plain.)"""
    if isinstance(value, Mapping):
        return {key: as_stored(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    return value


def input_error(error: ValidationError, model: type[BaseModel], path: str = "") -> InputError:
    """One line for `model`'s ValidationError: the first problem's field path in API form
    (under `path`), what is wrong and what is allowed, and how many more problems there are."""
    problems = distinct_problems(error.errors(include_url=False), path)
    where, first = problems[0]
    if first["type"] == "missing":
        message = f"{where} is required"
    elif first["type"] == "extra_forbidden":
        known = ", ".join(fields_at(model, first["loc"][:-1]))
        message = f"{where}: is not a field of this API" + (f"; the fields here are {known}"
                                                           if known else "")
    else:
        message = f"{where}: {problem_text(first)}"
    return InputError(message + and_more(len(problems) - 1))


def and_more(count: int) -> str:
    return f" (and {count} more problem{'s' if count > 1 else ''})" if count else ""


def distinct_problems(errors: list[ErrorDetails], path: str = "") -> list[tuple[str, ErrorDetails]]:
    """(API path, error) per field. An int-or-string value that fails both members of its
    union (pydantic tags each member's error: `int`, then the string type's name) is one
    problem, reported by its string member (the pattern) over the integer type error."""
    unions = {tuple(e["loc"][:-1]) for e in errors if e["loc"][-1:] == ("int",)}
    by_path: dict[str, ErrorDetails] = {}
    for error in errors:
        loc = error["loc"]
        where = api_path(loc[:-1] if tuple(loc[:-1]) in unions else loc, path)
        kept = by_path.get(where)
        if kept is None or (kept["type"].endswith("_type") and not error["type"].endswith("_type")):
            by_path[where] = error
    return list(by_path.items())


def api_path(loc: Iterable[Any], path: str = "") -> str:
    """`('spec', 'placement', 'clusterNames', 3)` -> `spec.placement.clusterNames[3]`,
    after `path` when given."""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return clipped(path)


def fields_at(model: type[BaseModel], loc: Iterable[Any]) -> list[str]:
    """The API names of the fields of the object at `loc` in `model` (Crossplane's own
    spec.crossplane left out), or [] when `loc` leads to no object."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: the item's model is already current
        found = next((f for name, f in model_fields(current).items()
                      if (f.alias or name) == part), None)
        current = model_in(found.annotation) if found else None
    return [f.alias or name for name, f in model_fields(current).items() if name != "crossplane"]


def model_fields(model: Any) -> dict:
    """A generated model's fields with their types resolved (the modules define models
    before the models they refer to; pydantic resolves those names on first rebuild)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return {}
    if not model.__pydantic_complete__:
        model.model_rebuild()
    return model.model_fields


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside a field's type (`Storage | None`, `list[MatchExpression]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def problem_text(error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, shown(error.get("input"))
    if kind == "literal_error":
        allowed = re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected", "")))
        return f"{value} is not one of {', '.join(allowed)}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return f"{value} is not {PATTERN_MEANINGS.get(pattern, f'of the form {pattern}')}"
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("greater than", "gt"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"{value} must be {words} {ctx.get(key)}"
    if kind == "string_too_short":
        limit = ctx.get("min_length")
        return "must not be empty" if limit == 1 else f"{value} is shorter than {limit} characters"
    if kind == "string_too_long":
        return f"{value} is longer than {counted(ctx.get('max_length', 0), 'character')}"
    if kind == "too_short":
        return f"needs at least {counted(ctx.get('min_length', 0), 'item')}"
    if kind == "too_long":
        return f"has more than {counted(ctx.get('max_length', 0), 'item')}"
    if kind in TIME_ERRORS:
        return f"{value} is not an RFC 3339 time with its zone, e.g. 2026-05-01T12:00:00Z"
    if kind in TYPE_NAMES:
        return f"{value} must be {TYPE_NAMES[kind]}"
    return f"{value}: {clipped(error.get('msg', 'is not valid'))}"
