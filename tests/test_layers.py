"""The house's layers (design/layout.md): imports point down, never sideways between the
agent and the functions, never between composers, and never in a cycle - lazy imports inside
functions included. The graph is read from the source (the folders are remapped, so it maps
each file to its import name as pyproject.toml does), and design/layout.md lists every module."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]

# The parts of the house. Each may import its own part and the parts it lists below it; the
# agent and the functions share nothing but the contract (each image holds its layers only).
CONTRACT, APIS, AGENT, TOOLS = "fleetcache", "fleetcache.apis", "fleetcache.agent", "fleetcache.devtools"
FUNCTIONS = ("fleetcache.functions.basics", "fleetcache.functions.k8s", "fleetcache.functions.views",
             "fleetcache.functions.decisions", "fleetcache.functions.node_tier",
             "fleetcache.functions.composers", "fleetcache.functions.server")  # bottom up
BELOW = {
    CONTRACT: set(),
    APIS: {CONTRACT},
    AGENT: {CONTRACT},
    **{name: {CONTRACT, APIS, *FUNCTIONS[:i]} for i, name in enumerate(FUNCTIONS)},
    TOOLS: {CONTRACT, APIS, AGENT, *FUNCTIONS},
}
AMONG_THEMSELVES = {"fleetcache.functions.composers"}  # parts whose modules never import each other


def module_files() -> dict[str, Path]:
    """Every module of the distribution by import name, from the package-dir remap."""
    remaps = PROJECT["package-dir"]
    modules = {}
    for package in PROJECT["packages"]:
        prefix = max((p for p in remaps if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / remaps[prefix] / package[len(prefix):].lstrip(".").replace(".", "/")
        for file in folder.glob("*.py"):
            modules[package if file.stem == "__init__" else f"{package}.{file.stem}"] = file
    return modules


MODULES = module_files()


def part(module: str) -> str:
    """The part of the house a module belongs to (its key in BELOW)."""
    found = next(p for p in sorted(BELOW, key=len, reverse=True) if module == p or module.startswith(p + "."))
    if found == "fleetcache" and (module + ".").startswith("fleetcache.functions."):
        return "fleetcache.functions.basics"  # protocol, read, naming, quantities, times
    return found


def imports(module: str) -> set[str]:
    """The distribution's modules `module` imports, at module level or inside a function."""
    file = MODULES[module]
    package = module if file.stem == "__init__" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).rstrip(".")
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
            names = [node.value]  # a module imported by name (the server's composers)
        found |= {name for name in names if name in MODULES and name != module}
    return found


GRAPH = {module: imports(module) for module in MODULES}


def allowed(module: str, imported: str) -> bool:
    """Its own part, or a part below it."""
    return part(imported) == part(module) or part(imported) in BELOW[part(module)]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_part_or_lower_ones(module):
    assert [imported for imported in sorted(GRAPH[module]) if not allowed(module, imported)] == []


@pytest.mark.parametrize("module, imported", [
    ("fleetcache.functions.composers.model_replica", "fleetcache.agent.layout"),  # sideways
    ("fleetcache.agent.cli", "fleetcache.apis.specs"),  # the agent image has no apis/
    ("fleetcache.functions.views.hydration", "fleetcache.functions.decisions.retention"),  # up
    ("fleetcache.reasons", "fleetcache.functions.read"),  # the contract imports nothing of ours
    ("fleetcache.functions.server", "fleetcache.devtools.render"),  # the tools are on top
])
def test_what_the_layers_refuse(module, imported):
    assert not allowed(module, imported)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) in AMONG_THEMSELVES))
def test_a_composer_imports_no_other_composer(module):
    assert [m for m in GRAPH[module] if part(m) == part(module)] == []


def test_there_is_no_import_cycle():
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError(" -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for imported in sorted(GRAPH[module]):
            visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(MODULES):
        visit(module)


def test_the_graph_sees_lazy_imports_and_modules_imported_by_name():
    server = GRAPH["fleetcache.functions.server"]
    assert "fleetcache.functions.composers.model_cache" in server  # importlib, by name


def test_the_layout_map_lists_every_module():
    listed = (ROOT / "design" / "layout.md").read_text()
    missing = []
    for _module, file in sorted(MODULES.items()):
        path = str(file.relative_to(ROOT))
        folder = str(file.parent.relative_to(ROOT)) + "/"
        if file.stem != "__init__" and f"`{path}`" not in listed and not (
                folder.startswith(("devtools/simulation/", "devtools/demo/", "devtools/testhub/",
                                   "apis/models/")) and f"`{folder}`" in listed):
            missing.append(path)
    assert missing == [], "add them to design/layout.md"


def test_every_folder_is_its_import_name():
    """One rule a newcomer can guess: `X/` is fleetcache.X, and `fleetcache/` is fleetcache."""
    for package, folder in PROJECT["package-dir"].items():
        assert package == ("fleetcache" if folder == "fleetcache" else f"fleetcache.{folder}")


def test_every_folder_of_code_or_xrds_is_a_listed_package():
    """A folder the build would find code or an XRD in, but that pyproject.toml does not list,
    is left out of the images or installed with a setuptools warning."""
    packages = set(PROJECT["packages"])
    for package, folder in PROJECT["package-dir"].items():
        for found in (ROOT / folder).rglob("*"):
            if found.suffix == ".py" or found.name == "definition.yaml":
                name = ".".join([package, *found.parent.relative_to(ROOT / folder).parts])
                assert name in packages, f"add {name!r} to pyproject.toml's packages"
