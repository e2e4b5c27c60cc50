"""Crossplane package metadata, Compositions and image build files.

What a build and an install rely on, read from the sources: the metadata's apiVersions, kinds
and dependencies, that every Composition is one Pipeline step calling the one Function, and
that every Dockerfile is multi-stage and runs as a non-root user. The packages themselves are
built and parsed back by tests/test_xpkg.py, and the images built and run by
tests/package/ (make test-package).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from fleetcache.apis.xrds import load_xrds
from tests.support.xrd import COMPOSITIONS, REPO, load_yaml_docs

PACKAGE = REPO / "package"
FUNCTION_NAME = "function-fleetcache"
FUNCTION_PACKAGE = "ghcr.io/fleetcache/function-fleetcache"
PROVIDER_KUBERNETES = "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"

XRDS = load_xrds()
COMPOSITION_FILES = sorted(COMPOSITIONS.glob("*.yaml"))
COMPOSITIONS_BY_KIND = {d["spec"]["compositeTypeRef"]["kind"]: d
                        for p in COMPOSITION_FILES for d in load_yaml_docs(p)}
DOCKERFILES = sorted(PACKAGE.glob("**/Dockerfile"))
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def only_doc(path: Path) -> dict:
    docs = load_yaml_docs(path)
    assert len(docs) == 1, f"{path} must hold exactly one document"
    return docs[0]


def configuration() -> dict:
    return only_doc(PACKAGE / "crossplane.yaml")


def dependency(package: str) -> dict:
    found = [d for d in configuration()["spec"].get("dependsOn", []) if d.get("package") == package]
    assert len(found) == 1, f"the Configuration must depend on {package} once"
    return found[0]


# --- semver constraints, as Crossplane reads them (the subset we use) ----------------------


def version_tuple(text: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    assert match, f"{text!r} is not a version"
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


def admits(constraint: str, version: str) -> bool:
    """Whether a comma- or space-separated list of >=, >, <=, <, = bounds admits version."""
    have = version_tuple(version)
    bounds = [b for b in re.split(r"[,\s]+", constraint.strip()) if b]
    checks = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
              "<": lambda a, b: a < b, "=": lambda a, b: a == b}
    for bound in bounds:
        op = re.match(r"(>=|<=|>|<|=)?", bound).group(1) or "="
        if not checks[op](have, version_tuple(bound[len(op) if bound[0] in "<>=" else 0:])):
            return False
    return True


def test_the_constraint_reader_understands_ranges():
    assert admits(">=v1.0.0", "v1.2.3") and not admits(">=v1.0.0", "v0.18.0")
    assert admits(">=v1.0.0, <v2.0.0", "v1.9.0") and not admits(">=v1.0.0, <v2.0.0", "v2.0.0")


# --- the Configuration ------------------------------------------------------------------------


def test_configuration_metadata_is_a_v1_configuration():
    doc = configuration()
    assert doc["apiVersion"] == "meta.pkg.crossplane.io/v1"
    assert doc["kind"] == "Configuration"
    assert doc["metadata"]["name"] == "fleetcache"


def test_configuration_needs_crossplane_v2():
    constraint = configuration()["spec"]["crossplane"]["version"]
    assert admits(constraint, "v2.0.0") and not admits(constraint, "v1.20.0")


def test_configuration_depends_on_the_fleetcache_function():
    dep = dependency(FUNCTION_PACKAGE)
    assert (dep["apiVersion"], dep["kind"]) == ("pkg.crossplane.io/v1", "Function")
    assert admits(dep["version"], "v0.1.0")


def test_configuration_depends_on_provider_kubernetes_with_namespaced_objects():
    dep = dependency(PROVIDER_KUBERNETES)
    assert (dep["apiVersion"], dep["kind"]) == ("pkg.crossplane.io/v1", "Provider")
    assert admits(dep["version"], "v1.0.0"), "v1.0.0 brought kubernetes.m.crossplane.io Objects"
    assert not admits(dep["version"], "v0.18.0"), "before v1.0.0 there are no namespaced Objects"


def test_configuration_depends_on_nothing_else():
    packages = sorted(d["package"] for d in configuration()["spec"]["dependsOn"])
    assert packages == sorted([FUNCTION_PACKAGE, PROVIDER_KUBERNETES])


def test_configuration_describes_itself():
    annotations = configuration()["metadata"]["annotations"]
    for key in ("maintainer", "source", "description", "readme"):
        assert annotations.get(f"meta.crossplane.io/{key}")


# --- the Function -------------------------------------------------------------------------------


def function_meta() -> dict:
    return only_doc(PACKAGE / "function" / "crossplane.yaml")


def test_function_metadata_is_a_v1beta1_function_named_function_fleetcache():
    doc = function_meta()
    assert doc["apiVersion"] == "meta.pkg.crossplane.io/v1beta1"
    assert doc["kind"] == "Function"
    assert doc["metadata"]["name"] == FUNCTION_NAME


def test_function_package_path_ends_in_the_function_name():
    assert FUNCTION_PACKAGE.rsplit("/", 1)[1] == FUNCTION_NAME


def test_function_package_root_holds_no_other_yaml():
    extra = [p.name for p in (PACKAGE / "function").iterdir()
             if p.suffix in (".yaml", ".yml") and p.name != "crossplane.yaml"]
    assert extra == [], "crossplane xpkg build would try to package them"


def test_function_entrypoint_is_a_console_script_of_the_distribution():
    assert PYPROJECT["project"]["scripts"]["fleetcache-function"]


# --- Compositions -------------------------------------------------------------------------------


def step_name(kind: str) -> str:
    return "compose-" + re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower()


def test_step_names_follow_the_kind():
    assert step_name("ModelCacheHydration") == "compose-model-cache-hydration"
    assert step_name("FleetCluster") == "compose-fleet-cluster"


def test_every_xrd_has_exactly_one_composition():
    kinds = [d["spec"]["compositeTypeRef"]["kind"] for p in COMPOSITION_FILES
             for d in load_yaml_docs(p)]
    assert sorted(kinds) == sorted(XRDS)


@pytest.mark.parametrize("path", COMPOSITION_FILES, ids=lambda p: p.name)
def test_composition_is_a_v1_pipeline_for_an_existing_xrd(path):
    doc = only_doc(path)
    assert (doc["apiVersion"], doc["kind"]) == ("apiextensions.crossplane.io/v1", "Composition")
    assert doc["spec"]["mode"] == "Pipeline"
    ref = doc["spec"]["compositeTypeRef"]
    assert ref["kind"] in XRDS, f"no XRD defines {ref['kind']}"
    assert ref["apiVersion"] == XRDS[ref["kind"]].api_version


@pytest.mark.parametrize("path", COMPOSITION_FILES, ids=lambda p: p.name)
def test_composition_is_one_step_named_for_its_kind_calling_the_one_function(path):
    doc = only_doc(path)
    kind = doc["spec"]["compositeTypeRef"]["kind"]
    assert doc["spec"]["pipeline"] == [
        {"step": step_name(kind), "functionRef": {"name": FUNCTION_NAME}}]


@pytest.mark.parametrize("path", COMPOSITION_FILES, ids=lambda p: p.name)
def test_composition_file_is_named_for_its_kinds_plural(path):
    kind = only_doc(path)["spec"]["compositeTypeRef"]["kind"]
    assert path.stem == XRDS[kind].plural


@pytest.mark.parametrize("kind, step", [
    ("FleetCluster", "compose-fleet-cluster"),
    ("ModelCache", "compose-model-cache"),
    ("ModelCacheHydration", "compose-model-cache-hydration"),
])
def test_core_kinds_compose_with_the_designed_step(kind, step):
    assert COMPOSITIONS_BY_KIND[kind]["spec"]["pipeline"][0]["step"] == step


# --- Dockerfiles ---------------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_there_is_a_function_dockerfile():
    assert PACKAGE / "function" / "Dockerfile" in DOCKERFILES


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_dockerfile_is_multi_stage(path):
    steps = instructions(path)
    assert sum(word == "FROM" for word, _ in steps) >= 2
    assert any(word == "COPY" and "--from=" in args for word, args in final_stage(path))


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_dockerfile_runs_as_a_non_root_user(path):
    users = [args for word, args in final_stage(path) if word == "USER"]
    assert users, "the final stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and user.isdigit(), \
        f"USER {users[-1]!r}: use a numeric non-root uid so runAsNonRoot can verify it"


def test_function_image_serves_fleetcache_function_on_9443():
    stage = final_stage(PACKAGE / "function" / "Dockerfile")
    entrypoint = [args for word, args in stage if word == "ENTRYPOINT"]
    assert entrypoint and "fleetcache-function" in entrypoint[-1]
    assert ("EXPOSE", "9443") in stage


def test_package_readme_documents_the_release_and_the_install_by_digest():
    readme = (PACKAGE / "README.md").read_text()
    assert "make package" in readme and "make push-package" in readme
    assert "crossplane xpkg install function" in readme and "@sha256:" in readme
