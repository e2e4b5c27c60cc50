"""Both xpkgs of build/package/ parsed back as Crossplane's package manager parses them, and
checked as a release is (`python -m fleetcache.devtools.package.xpkg inspect`,
design/packages.md): the Function package embedding the runtime image built beside it, each
at the digest written beside it."""

from __future__ import annotations

import pytest

from fleetcache.devtools.package import xpkg
from tests.package.conftest import IMAGES, XPKGS, built

pytestmark = pytest.mark.package

KINDS = {"function": "Function", "configuration": "Configuration"}


@pytest.mark.parametrize("name", sorted(XPKGS))
def test_the_xpkg_parses_back_and_passes_the_release_checks(name, capsys):
    runtime = ["--runtime", str(built(IMAGES["function"]))] if name == "function" else []
    assert xpkg.main(["inspect", str(built(XPKGS[name])), *runtime]) == 0, capsys.readouterr().err
    package = xpkg.read_package(XPKGS[name])
    assert package.kind == KINDS[name]
    assert package.digest == XPKGS[name].with_name(XPKGS[name].name + ".digest").read_text().strip()


def test_the_function_package_is_the_runtime_image_plus_its_package_layer():
    package = xpkg.read_package(built(XPKGS["function"]))
    runtime = xpkg.read_image_archive(built(IMAGES["function"]))
    assert [layer.digest for layer in package.image.layers[:-1]] == [layer.digest for layer in runtime.layers]
    assert package.base_layer == len(package.image.layers) - 1
    assert package.image.config["config"]["Entrypoint"] == runtime.config["config"]["Entrypoint"]
    assert package.image.config["config"]["User"] == "65532:65532"


def test_the_configuration_pins_its_function_to_the_function_package_built_beside_it():
    configuration = xpkg.read_package(built(XPKGS["configuration"]))
    function = xpkg.read_package(built(XPKGS["function"]))
    dependency = xpkg.function_dependency(configuration.meta)
    assert dependency is not None
    assert dependency["version"] == function.digest
