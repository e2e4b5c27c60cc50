"""Kubernetes label selectors, matched as the API server matches them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetcache.apis.specs import InputError
from fleetcache.messages import shown

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: Any, labels: Mapping[str, str], field_path: str) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector matches everything."""
    if not isinstance(selector, Mapping):
        raise InputError(f"{field_path}: must be an object with matchLabels/matchExpressions")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise InputError(f"{field_path}.matchLabels: must map label keys to values")
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InputError(f"{field_path}.matchExpressions: must be a list")
    for index, expr in enumerate(expressions):
        where = f"{field_path}.matchExpressions[{index}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise InputError(f"{where}: needs a key and an operator")
        key, operator, values = expr["key"], expr.get("operator"), expr.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            raise InputError(f"{where}.operator: {shown(operator)} is not one of "
                             f"{', '.join(SELECTOR_OPERATORS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InputError(f"{where}.values: {shown(values)} must be a list of label "
                             "values, e.g. [h100, a100]")
        if operator in ("In", "NotIn") and not values:
            raise InputError(f"{where}.values: {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InputError(f"{where}.values: {operator} takes no values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
