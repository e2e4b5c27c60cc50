"""Field paths as provider-kubernetes reads them (`references[].patchesFrom.fieldPath`,
`toFieldPath`): crossplane-runtime's pkg/fieldpath (fieldpath.go's lexer, paved.go's
GetValue/SetValue). Periods separate fields except inside brackets, so a Secret key with a
period is written `data[.dockerconfigjson]`; `data..dockerconfigjson` is refused."""

from __future__ import annotations

from typing import Any

Segment = str | int


class FieldPathError(ValueError):
    """What fieldpath.Parse or Paved.GetValue returns as an error."""


def parse(path: str) -> list[Segment]:
    """fieldpath.Parse: fields and bracketed fields or indexes, with its error messages."""
    segments: list[Segment] = []
    pos = 0
    while pos < len(path):
        if path[pos] == "[":
            close = path.find("]", pos)
            if close < 0:
                raise FieldPathError(f"unterminated '[' at position {pos}")
            inner = path[pos + 1:close]
            if not inner:
                raise FieldPathError(f"unexpected ']' at position {pos + 1}")
            if "[" in inner:
                raise FieldPathError(f"unexpected '[' at position {pos + 1 + inner.index('[')}")
            segments.append(int(inner) if inner.isdigit() and int(inner) < 2**32
                            else inner.strip("'\""))
            pos = close + 1
            continue
        if path[pos] == ".":
            if pos == 0 or pos == len(path) - 1 or path[pos + 1] in ".[":
                at = pos if pos == 0 or pos == len(path) - 1 else pos + 1
                raise FieldPathError(f"unexpected {path[at]!r} at position {at}")
            pos += 1
            continue
        end = pos
        while end < len(path) and path[end] not in ".[":
            if path[end] == "]":
                raise FieldPathError(f"unexpected ']' at position {end}")
            end += 1
        segments.append(path[pos:end].strip("'\""))
        pos = end
    return segments


def shown(segments: list[Segment]) -> str:
    """Segments.String: how upstream names a path in its errors."""
    text = ""
    for segment in segments:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif "." in segment or segment == "*":
            text += f"[{segment}]"
        else:
            text += f".{segment}"
    return text.removeprefix(".")


def get_value(obj: Any, path: str) -> Any:
    """Paved.GetValue: the value at the path, or an error naming the first missing part."""
    segments = parse(path)
    value = obj
    for i, segment in enumerate(segments):
        if isinstance(segment, int):
            if not isinstance(value, list) or segment >= len(value):
                raise FieldPathError(f"{shown(segments[:i + 1])}: no such element")
            value = value[segment]
        else:
            if not isinstance(value, dict) or segment not in value:
                raise FieldPathError(f"{shown(segments[:i + 1])}: no such field")
            value = value[segment]
    return value


def set_value(obj: dict, path: str, value: Any) -> None:
    """Paved.SetValue for object fields (the only kind a patchesFrom writes here)."""
    *parents, last = parse(path)
    target = obj
    for segment in parents:
        if isinstance(segment, int):
            raise FieldPathError(f"{path}: setting array elements is not modelled")
        target = target.setdefault(segment, {})
    if isinstance(last, int):
        raise FieldPathError(f"{path}: setting array elements is not modelled")
    target[last] = value
