"""Total readers of observed state: a missing or mistyped step reads as absent, never as
an exception, because another composite's status or a remote object is input."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fleetcache import shapes


def get_path(obj: Any, path: str, default: Any = None) -> Any:
    """Read a dotted path from nested dicts; any missing or mistyped step gives `default`."""
    current = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    return current


def condition_of(resource: dict | None, type_: str) -> dict:
    """The condition of that type; a conditions value that is not a list reads as none."""
    conditions = get_path(resource, "status.conditions")
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return dict(cond)
    return {}


def mapping_at(obj: Any, path: str) -> dict:
    """The object at a dotted path; absent or not an object reads as {}."""
    value = get_path(obj, path)
    return value if isinstance(value, dict) else {}


def is_true(resource: dict | None, type_: str) -> bool:
    return condition_of(resource, type_).get("status") == "True"



INT64_MAX = 2**63 - 1  # the API server's integer (format int64)


def as_int(value: Any, default: int = 0) -> int:
    """Numbers arrive as floats through protobuf Struct and as strings from ConfigMaps;
    anything that is not a number Kubernetes can store (NaN, Infinity, beyond int64, a
    list) is `default`."""
    if isinstance(value, bool):
        return default
    try:
        number = float(value)
        return int(number) if math.isfinite(number) and abs(number) <= INT64_MAX else default
    except (TypeError, ValueError, OverflowError):
        return default



def name_or_empty(value: Any) -> str:
    """A Kubernetes object name read from another resource, or "" when it is not one."""
    return value if shapes.is_object_name(value) else ""
