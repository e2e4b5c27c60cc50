"""Each image holds its layers and nothing else (DESIGN.md §1).

The function image is the contract (`fleetcache/`), the APIs with their validation (`apis/`)
and the functions (`functions/`); the agent image is the contract and the agent (`agent/`).
Each image installs its own distribution, `package/<image>/pyproject.toml`, from the folders
its Dockerfile copies. These tests read what each Dockerfile copies, follow every import of
that code (lazy ones inside functions too) and fail on a module outside the image's layers,
on a distribution the image does not declare, and on a layer copied that the image does not
need.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.support.xrd import REPO

PACKAGE = REPO / "package"
LAYERS = {"function": {"fleetcache", "apis", "functions"}, "agent": {"fleetcache", "agent"}}
MAIN = tomllib.loads((REPO / "pyproject.toml").read_text())


def image_project(image: str) -> dict:
    return tomllib.loads((PACKAGE / image / "pyproject.toml").read_text())


def copied_sources(image: str) -> set[str]:
    """The repository folders the build stage of the image's Dockerfile copies."""
    folders = set()
    for line in (PACKAGE / image / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            folders |= {w.rstrip("/") for w in words[1:-1] if w.endswith("/")}
    return folders


def package_dirs(project: dict) -> dict[str, Path]:
    """Import name -> folder, for every package the project lists."""
    remaps = project["tool"]["setuptools"]["package-dir"]
    out = {}
    for name in project["tool"]["setuptools"]["packages"]:
        prefix = max((p for p in remaps if name == p or name.startswith(p + ".")), key=len)
        out[name] = REPO / remaps[prefix] / name[len(prefix):].lstrip(".").replace(".", "/")
    return out


def imports_of(path: Path, package: str) -> set[str]:
    """Every module name `path` imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def closure(image: str) -> tuple[set[str], set[str]]:
    """(fleetcache modules outside the image, third-party top-level modules) its code imports."""
    packages = package_dirs(image_project(image))
    modules = {}
    for name, folder in packages.items():
        if (folder / "__init__.py").exists():  # an XRD folder is a data-only package
            modules[name] = folder / "__init__.py"
        for file in folder.glob("*.py"):
            if file.name != "__init__.py":
                modules[f"{name}.{file.stem}"] = file
    outside, third_party = set(), set()
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rsplit(".", 1)[0]
        for imported in imports_of(file, package):
            top = imported.split(".")[0]
            if top == "fleetcache":
                if imported not in modules and imported.rsplit(".", 1)[0] not in modules:
                    outside.add(f"{name} imports {imported}")
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.add(top)
    return outside, third_party


def distribution_names(requirements: list[str]) -> set[str]:
    return {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
            .replace("_", "-") for r in requirements}


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_the_dockerfile_copies_exactly_the_image_layers(image):
    assert copied_sources(image) == LAYERS[image]


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_the_image_distribution_is_made_of_its_layers_only(image):
    folders = {path.relative_to(REPO).parts[0] for path in package_dirs(image_project(image)).values()}
    assert folders == LAYERS[image]


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_the_image_code_imports_nothing_outside_its_layers(image):
    outside, _ = closure(image)
    assert not outside, sorted(outside)


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_the_image_declares_every_distribution_its_code_imports(image):
    _, modules = closure(image)
    by_module = packages_distributions()
    needed = {dist.lower().replace("_", "-") for top in modules for dist in by_module.get(top, [top])}
    declared = distribution_names(image_project(image)["project"]["dependencies"])
    assert needed - declared == set(), f"package/{image}/pyproject.toml lacks {sorted(needed - declared)}"
    assert declared - needed == set(), f"package/{image}/pyproject.toml needs no {sorted(declared - needed)}"


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_every_package_of_the_image_layers_is_in_the_image(image):
    """A package added to the distribution in one of the image's folders must reach the image."""
    image_packages = set(image_project(image)["tool"]["setuptools"]["packages"])
    in_layers = {name for name, path in package_dirs(MAIN).items()
                 if path.relative_to(REPO).parts[0] in LAYERS[image]}
    assert in_layers == image_packages


@pytest.mark.parametrize("image, script", [("function", "fleetcache-function"), ("agent", "fleetcache-agent")])
def test_the_image_console_script_is_the_distribution_s(image, script):
    assert image_project(image)["project"]["scripts"] == {script: MAIN["project"]["scripts"][script]}


@pytest.mark.parametrize("image", sorted(LAYERS))
def test_the_image_dependencies_are_the_distribution_s_own(image):
    main = {r.split(";")[0].strip() for r in MAIN["project"]["dependencies"]}
    assert set(image_project(image)["project"]["dependencies"]) <= main
