"""YAML files read with bounded cost: a missing, oversized, undecodable or malformed file,
or one whose aliases would make checking it unbounded, is one DocumentError line naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from fleetcache.messages import clipped


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
        raise DocumentError(f"{file}: not valid YAML: {clipped(err.problem or err.context)}"
                            f"{where}") from None
    except yaml.YAMLError as err:
        raise DocumentError(f"{file}: not valid YAML: {clipped(err)}") from None
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
