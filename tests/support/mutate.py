"""Hostile mutations of function requests, as hypothesis strategies, for every composer.

A request is three JSON documents — the composite, the observed resources (key ->
object) and the required resources (key -> list of objects). `mutated_request` takes a
valid one and replaces, deletes or reshapes one to three of its nodes, at any depth, with
the values a mutation fuzzer sends: wrong types, huge and non-finite numbers, numeric
strings no float can hold, 400- and 5,000-digit numbers inside text, 100 KB strings,
unicode. It keeps only what the protocol itself guarantees:

- the composite and every observed or required resource stays a JSON object (protobuf
  Struct), and each required key a list of them;
- an observed resource keeps its metadata and spec: it is what the function composed and
  the API server admitted; only its status (and a provider-kubernetes Object's
  status.atProvider.manifest, the remote object as last seen) comes from elsewhere. An
  observed resource may also vanish whole.

Everything else, the composite's metadata included, is fair game.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Path = tuple[Any, ...]

LONG_TEXT = "A" * 100_000
DIGITS_400 = "9" * 400
UNICODE = "модель-🚀-模型-\u202e-\u0000"
# Plain JSON numbers a protobuf Struct can carry (doubles): no int beyond 1.8e308.
HOSTILE_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, -1, 1.5, -0.5, 2**53 + 1, 2**63, 1e308, -1e308, 5e-324,
    float("inf"), float("-inf"), float("nan"),
    "", " ", "0", "-1", "1.5", "true", "null",
    "1e999999999", "-1e999999999", "1e-999999999", "Infinity", "-Infinity", "NaN", "-inf",
    "inf", "0x1F", "1_000", DIGITS_400, "-" + DIGITS_400, DIGITS_400 + "Ei", "9" * 5_000,
    "1" + "0" * 4_999 + "Gi", "0." + DIGITS_400, "9e+99999999999999999999Ki",
    LONG_TEXT, UNICODE, "UPPER_case.name", "a..b", "-a-", "a" * 64, "a" * 254,
    "a" * 253, ".".join(["b" * 63] * 4)[:253],  # valid object names, too long for labels
    "../../etc/passwd", "a b\tc\nd", "$(FLEETCACHE_MODEL)", "${HOME}", "' OR 1=1 --",
)
HOSTILE_CONTAINERS: tuple[Any, ...] = (
    [], {}, [None], [""], [{}], [[]], {"": None}, {"a": {"b": {"c": {}}}},
    list(range(1_000)), [LONG_TEXT], {f"k{i}": i for i in range(1_000)},
)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for index in range(depth):
        value = {"x": value} if index % 2 else [value]
    return value


DEEP = _nested(20)  # each JSON level is three protobuf levels; protobuf parses at most 100

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
hostile_values = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.sampled_from(HOSTILE_CONTAINERS + (DEEP,)).map(copy.deepcopy),
    json_values,
)


def inflate_numbers(text: str, digits: int) -> str:
    """Every run of digits in `text` made `digits` long: "exit code 3" -> "exit code 999…"."""
    return re.sub(r"\d+", "9" * digits, text)


def derived_from(old: Any) -> st.SearchStrategy:
    """Values made from the node being replaced: the right text in the wrong type, a scalar
    where a list is expected, a message whose numbers no longer fit anything."""
    options: list[Any] = [[old], {"value": old}]
    if isinstance(old, (dict, list)):
        options += [str(old), len(old)]
    elif isinstance(old, str):
        options += [inflate_numbers(old, 400), inflate_numbers(old, 5_000), old * 3,
                    (old * (100_000 // max(1, len(old)) + 1))[:100_000], old.upper(),
                    old + " ", old + UNICODE]
        if old.isascii() and old.isdigit() and len(old) <= 300:
            options += [int(old), -int(old)]  # a Struct number: at most 1.8e308
    elif isinstance(old, bool) or old is None:
        options += [str(old), int(bool(old))]
    elif isinstance(old, (int, float)):
        options += [str(old), -old, old * 1e300, f"{old}e999999999", str(old) * 100]
    return st.sampled_from(options)


# --- where a node may be mutated, and into what ---------------------------------------------

ANY, OBJECT, OBJECT_LIST, DELETE_ONLY, FIXED = "any", "object", "object-list", "delete", "fixed"


def request_shape(path: Path) -> str:
    """What a node of {composite, observed, required} may become (see the module docstring)."""
    if len(path) <= 1:
        return OBJECT if path == ("composite",) else FIXED
    section = path[0]
    if section == "observed":
        if len(path) == 2:
            return DELETE_ONLY  # not composed yet, or gone; never an object without metadata
        return ANY if path[2] == "status" else FIXED
    if section == "required":
        if len(path) == 2:
            return OBJECT_LIST
        if len(path) == 3:
            return OBJECT
    return ANY


def node_paths(doc: Any, prefix: Path = ()) -> list[Path]:
    """The path of every node of `doc`, the root first, in document order."""
    paths = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            paths += node_paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            paths += node_paths(value, prefix + (index,))
    return paths


def value_at(doc: Any, path: Path) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def with_node(doc: Any, path: Path, value: Any) -> Any:
    out = copy.deepcopy(doc)
    value_at(out, path[:-1])[path[-1]] = value
    return out


def without_node(doc: Any, path: Path) -> Any:
    out = copy.deepcopy(doc)
    del value_at(out, path[:-1])[path[-1]]
    return out


def document_of(path: Path) -> Path:
    """The request document a node belongs to: the composite, an observed resource, or a
    required key's list or one of its items."""
    if path[0] == "composite":
        return path[:1]
    return path[:3] if path[0] == "required" else path[:2]


def _replacements(shape: str, old: Any) -> st.SearchStrategy:
    if shape == OBJECT:
        return st.one_of(st.just({}), st.dictionaries(st.text(max_size=10), hostile_values,
                                                      max_size=3))
    if shape == OBJECT_LIST:
        return st.lists(st.just({}), max_size=2)
    return st.one_of(hostile_values, derived_from(old))


def spelled(path: Path) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")


def brief(value: Any, limit: int = 60) -> str:
    """A value as a failure report shows it: its repr, long ones cut with their length."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@st.composite
def mutation(draw: Callable, doc: dict, shape_of: Callable[[Path], str] = request_shape
             ) -> tuple[dict, str]:
    """`doc` with one node replaced or deleted, a map given an unexpected key or a list a
    second copy of an item, and what was done, in words."""
    paths = [p for p in node_paths(doc) if shape_of(p) != FIXED]
    # Pick a document first (the composite half the time, else one observed or required
    # resource), then a node in it, so a small composite is hit as often as a large Job.
    documents = sorted({document_of(p) for p in paths}, key=repr)
    others = [d for d in documents if d != ("composite",)]
    if ("composite",) in documents and (not others or draw(st.booleans())):
        document = ("composite",)
    else:
        document = draw(st.sampled_from(others))
    # Then a depth, then a node at that depth, so `kind` is hit as often as a deep field.
    inside = [p for p in paths if p[:len(document)] == document]
    depth = draw(st.sampled_from(sorted({len(p) for p in inside})))
    path = draw(st.sampled_from([p for p in inside if len(p) == depth]))
    old = value_at(doc, path)
    operations = [] if shape_of(path) == DELETE_ONLY else ["replace"]
    if len(path) >= 2:
        operations.append("delete")
    if isinstance(old, dict) and shape_of(path + ("extra",)) == ANY:
        operations.append("add")
    if isinstance(old, list) and old and shape_of(path) != DELETE_ONLY:
        operations.append("duplicate")
    operation = draw(st.sampled_from(operations))
    if operation == "duplicate":
        index = draw(st.integers(0, len(old) - 1))
        return (with_node(doc, path, old + [copy.deepcopy(old[index])]),
                f"{spelled(path)} gets a second copy of its item [{index}]")
    if operation == "delete":
        return without_node(doc, path), f"delete {spelled(path)}"
    if operation == "add":
        key = draw(st.sampled_from(["extra", "", "spec", "status", "metadata", UNICODE]))
        value = draw(hostile_values)
        return with_node(doc, path + (key,), value), f"{spelled(path + (key,))} = {brief(value)}"
    value = draw(_replacements(shape_of(path), old))
    return with_node(doc, path, value), f"{spelled(path)} = {brief(value)} (was {brief(old)})"


@dataclass(frozen=True, repr=False)
class Mutated:
    """A mutated request; its repr is the seed and the mutations, not the whole request."""

    composite: dict
    observed: dict
    required: dict
    origin: str
    changes: tuple[str, ...]

    def __repr__(self) -> str:
        return f"{self.origin}: {'; '.join(self.changes)}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints with it
        printer.text(repr(self))


@st.composite
def mutated_request(draw: Callable, composite: dict, observed: dict, required: dict,
                    origin: str = "request", max_mutations: int = 3) -> Mutated:
    """The request after one to `max_mutations` hostile mutations."""
    doc = copy.deepcopy({"composite": composite, "observed": observed, "required": required})
    changes = []
    for _ in range(draw(st.integers(1, max_mutations))):
        doc, change = draw(mutation(doc))
        changes.append(change)
    return Mutated(doc["composite"], doc["observed"], doc["required"], origin, tuple(changes))


# --- every single mutation, for a systematic sweep ------------------------------------------

SWEEP_VALUES: tuple[Any, ...] = (
    None, [], {}, "", -1, 1e308, float("nan"), "1e999999999", DIGITS_400, "x" * 5_000,
    "a" * 253,
)


def single_mutations(doc: dict, values: tuple[Any, ...] = SWEEP_VALUES,
                     shape_of: Callable[[Path], str] = request_shape
                     ) -> Iterator[tuple[str, dict]]:
    """(what was done, `doc` after it) for every mutable node deleted, every list given a
    second copy of its first item and, where any value may go, every node replaced by each
    of `values` and, in text with digits, given 5,000-digit numbers: what random search
    reaches only by luck, once each."""
    for path in node_paths(doc):
        shape = shape_of(path)
        if shape == FIXED:
            continue
        if len(path) >= 2:
            yield f"delete {spelled(path)}", without_node(doc, path)
        old = value_at(doc, path)
        if isinstance(old, list) and old:
            yield (f"{spelled(path)} gets a second copy of its item [0]",
                   with_node(doc, path, old + [copy.deepcopy(old[0])]))
        if shape != ANY:
            continue
        for value in values:
            yield f"{spelled(path)} = {brief(value)}", with_node(doc, path, value)
        if isinstance(old, str) and re.search(r"\d", old):
            yield (f"{spelled(path)}: numbers made 5,000 digits long in {brief(old)}",
                   with_node(doc, path, inflate_numbers(old, 5_000)))
