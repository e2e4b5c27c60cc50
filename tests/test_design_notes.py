"""The design notes and the README follow the code: every path, module and `module.name`
they mention exists, so a note never sends a reader to code that moved or is gone."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = sorted((ROOT / "design").glob("*.md")) + [ROOT / "README.md", ROOT / "package" / "README.md"]
FOLDERS = ("agent", "apis", "bench", "compositions", "design", "devtools", "examples", "fleetcache",
           "functions", "package", "tests")
# a path: a file with its extension, or a folder written with its trailing slash
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/(?:[\w./*<>{{}},-]*\.\w+|[\w./*<>-]*/))(?![\w/])")
MODULE = re.compile(r"(?<![\w.-])(fleetcache(?:\.\w+)+)(?![\w/-])")  # not the API group fleetcache.dev/...
# `hydration.report_of`, `capacity.allocates()`, `reasons.Reason`: a module's short name, then a
# name that can only be Python's (snake_case, UPPER_CASE, CamelCase, or called); a spec path
# such as `storage.size` is none of these
QUALIFIED = re.compile(r"`(?:\w+\.)*(\w+)\.([a-z]\w*_\w*|[A-Z][A-Z0-9_]+|[A-Z][a-z]+(?:[A-Z][a-z0-9]+)+"
                       r"|[A-Z][a-z]+|\w+(?=\())(?:\([^`]*\))?`")
NOT_PYTHON = {"json", "yaml", "md", "py", "txt", "toml", "tar", "xpkg"}


def all_modules() -> dict[str, object]:
    """Every module of the distribution by its full name (its packages as pyproject.toml lists
    them: the folders are remapped, so walking fleetcache/ alone would miss them)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {}
    for name in packages:
        package = importlib.import_module(name)
        found[name] = package
        for info in pkgutil.iter_modules(package.__path__, f"{name}."):
            found[info.name] = importlib.import_module(info.name)
    return found


MODULES = all_modules()
BY_SHORT_NAME: dict[str, list[object]] = {}
for _name, _module in MODULES.items():
    BY_SHORT_NAME.setdefault(_name.rsplit(".", 1)[-1], []).append(_module)


# What a run writes (bench figures) exists only after it ran: a note may name it.
WRITTEN_BY_RUNS = ("bench/out/",)


def path_exists(text: str) -> bool:
    """A path as a note writes it; `<placeholder>` and `*` stand for any name, and `{a,b}`
    for each of its names."""
    if text.startswith(WRITTEN_BY_RUNS):
        return True
    if braces := re.search(r"\{([^}]*)\}", text):
        return all(path_exists(text[:braces.start()] + choice + text[braces.end():])
                   for choice in braces.group(1).split(","))
    if "<" in text or "*" in text:
        pattern = re.sub(r"<[^>]*>", "*", text).rstrip("/")
        return any(ROOT.glob(pattern))
    return (ROOT / text.rstrip("/.")).exists()


def resolves(dotted: str) -> bool:
    """fleetcache.a.b: a module, or an attribute of one."""
    if dotted in MODULES:
        return True
    module, _, attribute = dotted.rpartition(".")
    return module in MODULES and hasattr(MODULES[module], attribute)


def stale_references(note: Path) -> list[str]:
    text = note.read_text()
    stale = [p for p in PATH.findall(text) if not path_exists(p)]
    stale += [m for m in MODULE.findall(text) if m != "fleetcache.dev" and not resolves(m)]
    for module, name in QUALIFIED.findall(text):
        if name in NOT_PYTHON:
            continue
        if module in BY_SHORT_NAME:  # the module exists: it must hold the name
            found = any(hasattr(m, name) for m in BY_SHORT_NAME[module])
        else:  # no such module: stale if the name is surely ours (it moved); a bare word such
            # as `self.matches(...)` in a CEL rule or `aio.server()` is someone else's
            found = not ("_" in name or name[0].isupper()) or not any(hasattr(m, name) for m in MODULES.values())
        if not found:
            stale.append(f"{module}.{name}")
    return sorted(set(stale))


@pytest.mark.parametrize("note", NOTES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_name_a_note_mentions_exists(note):
    assert stale_references(note) == []


def test_the_scan_finds_what_moved(tmp_path):
    note = tmp_path / "note.md"
    note.write_text("See `functions/kit.py`, fleetcache.simulation.XR_KINDS, `capacity.nothing_here` and "
                    "`kit.with_remedy`; `functions/views/`, `fleetcache.reasons.with_remedy`, "
                    "`reasons.with_remedy` and `spec.storage.size` are fine.")
    assert stale_references(note) == ["capacity.nothing_here", "fleetcache.simulation.XR_KINDS",
                                      "functions/kit.py", "kit.with_remedy"]
