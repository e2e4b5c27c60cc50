"""CEL rules of the XRDs, evaluated with cel-python and the part of Kubernetes' quantity
library the XRDs use; each rule compiled once per process."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy

from fleetcache import quantity
from fleetcache.messages import clipped, shown

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
QUANTITY_FUNCTIONS: dict[str, Callable[..., Any]] = {  # CEL values, and the opaque CelQuantity
    "quantity": cel_quantity,
    "isQuantity": cel_is_quantity,
    "compareTo": cel_compare,
    "isLessThan": lambda a, b: celpy.celtypes.BoolType(cel_compare(a, b) < 0),
    "isGreaterThan": lambda a, b: celpy.celtypes.BoolType(cel_compare(a, b) > 0),
}


def cel_join(items: Any, separator: Any = "") -> celpy.celtypes.StringType:
    """`list.join(sep)` of cel-go's strings extension, which Kubernetes' CEL environment
    includes (k8s.io/apiserver/pkg/cel/environment/base.go: ext.Strings)."""
    if not (isinstance(items, list) and all(isinstance(i, str) for i in items) and isinstance(separator, str)):
        raise TypeError("join() joins a list of strings with a string")
    return celpy.celtypes.StringType(separator.join(items))


LIBRARY_FUNCTIONS: dict[str, Callable[..., Any]] = {**QUANTITY_FUNCTIONS, "join": cel_join}


@functools.cache
def compile_rule(rule: str) -> celpy.Runner:
    """A runnable program for one CEL rule, compiled once per process (raises on a syntax
    error), with the quantity library and the strings extension's join."""
    return _CEL.program(_CEL.compile(rule), functions=LIBRARY_FUNCTIONS)


@functools.cache
def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def evaluate_rule(rule: str, self_value: Any, old_value: Any = None) -> bool | str:
    """True or False, or the error text when the rule cannot be evaluated."""
    try:
        activation = {"self": celpy.json_to_cel(self_value)}
        if old_value is not None:
            activation["oldSelf"] = celpy.json_to_cel(old_value)
    except (ValueError, TypeError) as err:  # e.g. an integer beyond CEL's 64 bits
        return f"evaluation error: {clipped(err)}"
    try:
        result = compile_rule(rule).evaluate(activation)
    except celpy.CELEvalError as err:
        return f"evaluation error: {shown(err.args[0] if err.args else str(err))}"
    if isinstance(result, celpy.CELEvalError):
        return f"evaluation error: {shown(result.args[0] if result.args else str(result))}"
    return bool(result)
