"""The Crossplane packages, built and read back (fleetcache.devtools.package.xpkg).

Both packages are built here from the repository and a tiny runtime image made in the test (a
one-layer OCI image layout in a tar, as `buildah push IMAGE oci-archive:PATH` writes one), then
read back the way Crossplane's package manager reads them: the layer annotated
`io.crossplane.xpkg: base`, its `package.yaml`, the meta object and the kinds beside it. The
layout is what `crossplane xpkg build --package-file` writes (design/packages.md says which
upstream file each expectation follows); packages Crossplane or the release would refuse are
refused with one line naming the problem.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from fleetcache.devtools.package import oci, xpkg
from tests.support.xrd import COMPOSITIONS, EXAMPLES, REPO, load_yaml_docs

ENTRYPOINT = ["fleetcache-function"]
FUNCTION_META = load_yaml_docs(REPO / "package" / "function" / "crossplane.yaml")[0]
CONFIGURATION_META = load_yaml_docs(REPO / "package" / "crossplane.yaml")[0]


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def runtime_archive(path: Path, content: bytes = b"print('serving')\n", diff_id: str | None = None,
                    layer_type: str = oci.OCI_LAYER) -> Path:
    """A one-layer image as an OCI image layout in a tar."""
    layer = tar_of({"app/server.py": content})
    blob = gzip.compress(layer, mtime=0)
    config = json.dumps({
        "created": "2026-01-02T03:04:05.600Z", "architecture": "amd64", "os": "linux",
        "config": {"User": "65532:65532", "Entrypoint": ENTRYPOINT, "ExposedPorts": {"9443/tcp": {}},
                   "Env": ["PATH=/usr/bin"], "Labels": {"io.buildah.version": "1.28.2"}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id or sha256(layer)]},
        "history": [{"created": "2026-01-02T03:04:05Z", "created_by": "COPY app/ /app/"}]}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(config),
                   "size": len(config)},
        "layers": [{"mediaType": layer_type, "digest": sha256(blob), "size": len(blob)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": oci.OCI_MANIFEST, "digest": sha256(manifest), "size": len(manifest)}]}).encode()
    files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    files.update({f"blobs/sha256/{sha256(b)[7:]}": b for b in (config, manifest, blob)})
    path.write_bytes(tar_of(files))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("package")
    runtime = runtime_archive(folder / "function-runtime.tar")
    return {"runtime": runtime,
            "function": xpkg.build_function(runtime, folder / "function-fleetcache.xpkg"),
            "configuration": xpkg.build_configuration(folder / "configuration-fleetcache.xpkg")}


@pytest.fixture(scope="module")
def function(built) -> xpkg.Package:
    return xpkg.read_package(built["function"].path)


@pytest.fixture(scope="module")
def configuration(built) -> xpkg.Package:
    return xpkg.read_package(built["configuration"].path)


def members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as archive:
        return archive.getmembers()


def package_with(tmp_path: Path, documents: list[dict], annotate: bool = True) -> Path:
    """A one-layer package holding `documents` as package.yaml."""
    stream = "".join("---\n" + yaml.safe_dump(d) for d in documents) + "---\n"
    image = xpkg.with_layers(None, [xpkg.xpkg_layer("package.yaml", stream.encode(), "base")])
    if not annotate:
        image = oci.Image({**image.config, "config": {}}, image.layers)
    path = tmp_path / "crafted.xpkg"
    xpkg.write_package(image, path)
    return path


def refusal(path: Path, check=None) -> str:
    with pytest.raises(xpkg.PackageError) as caught:
        package = xpkg.read_package(path)
        if check is not None:
            check(package)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- the Function package ----------------------------------------------------------------------


def test_function_package_is_the_runtime_layers_with_the_package_layer_on_top(built, function):
    runtime = oci.read_image_archive(built["runtime"])
    assert [la.digest for la in function.image.layers[:-1]] == [la.digest for la in runtime.layers]
    assert function.base_layer == len(function.image.layers) - 1


def test_function_package_layer_is_annotated_base_through_its_config_label(function):
    top = function.image.layers[-1]
    assert function.image.config["config"]["Labels"][f"io.crossplane.xpkg:{top.digest}"] == "base"
    assert [la.annotations for la in function.image.layers] == [{}, {"io.crossplane.xpkg": "base"}]


def test_function_package_runs_as_the_runtime_image_runs(function):
    run = function.image.config["config"]
    assert (run["Entrypoint"], run["User"], run["ExposedPorts"]) == (ENTRYPOINT, "65532:65532", {"9443/tcp": {}})
    assert run["Labels"]["io.buildah.version"] == "1.28.2"


def test_function_package_adds_one_diff_id_and_one_empty_history_entry(function):
    config = function.image.config
    assert config["rootfs"]["diff_ids"][-1] == function.image.layers[-1].diff_id
    assert config["history"][-1] == {"created": oci.ZERO_TIME}
    assert len(config["history"]) == 2


def test_function_package_yaml_is_the_function_meta_alone(function):
    assert function.documents == [FUNCTION_META]
    assert function.stream.startswith(b"---\n") and function.stream.endswith(b"---\n")


def test_function_package_has_no_examples_layer(function):
    assert function.examples is None


def test_a_docker_archive_runtime_is_embedded_with_its_layers_gzipped(tmp_path):
    source = oci.read_image_archive(runtime_archive(tmp_path / "oci.tar"))
    docker = tmp_path / "docker.tar"
    oci.write_docker_tarball(oci.Image(source.config, (oci.Layer(source.layers[0].tar(), source.layers[0].diff_id),)),
                             docker)
    built = xpkg.build_function(docker, tmp_path / "function.xpkg")
    layer = built.package.image.layers[0]
    assert layer.blob[:2] == b"\x1f\x8b" and layer.diff_id == source.layers[0].diff_id


def test_a_function_package_over_another_runtime_is_refused(built, tmp_path):
    other = oci.read_image_archive(runtime_archive(tmp_path / "other.tar", content=b"print('other')\n"))
    message = refusal(built["function"].path, lambda p: xpkg.check_function(p, runtime=other))
    assert message.startswith("layer 1 is sha256:") and "the runtime image's is sha256:" in message


def test_a_runtime_whose_layer_is_not_its_diff_id_is_refused(tmp_path):
    runtime = runtime_archive(tmp_path / "runtime.tar", diff_id="sha256:" + "0" * 64)
    with pytest.raises(xpkg.PackageError, match="layer 1: holds a tar of sha256:.*diff_id is sha256:0000"):
        xpkg.build_function(runtime, tmp_path / "function.xpkg")
    assert not (tmp_path / "function.xpkg").exists()


def test_a_runtime_with_zstd_layers_is_refused(tmp_path):
    runtime = runtime_archive(tmp_path / "runtime.tar", layer_type="application/vnd.oci.image.layer.v1.tar+zstd")
    with pytest.raises(xpkg.PackageError, match=r"layer 1: media type 'application/vnd.oci.image.layer.v1.tar\+zstd' "
                                                r"is not a gzip or plain tar layer; rebuild the image with gzip"):
        xpkg.build_function(runtime, tmp_path / "function.xpkg")


# --- the Configuration package -----------------------------------------------------------------


def test_configuration_package_yaml_is_the_meta_then_the_xrds_then_the_compositions(configuration):
    xrds = [d for p in sorted((REPO / "apis").glob("*/definition.yaml")) for d in load_yaml_docs(p)]
    compositions = [d for p in sorted(COMPOSITIONS.glob("*.yaml")) for d in load_yaml_docs(p)]
    assert configuration.documents == [CONFIGURATION_META, *xrds, *compositions]


def test_configuration_package_layer_is_the_first_layer_annotated_base(configuration):
    assert configuration.base_layer == 0
    with tarfile.open(fileobj=io.BytesIO(configuration.image.layers[0].tar())) as layer:
        assert layer.getnames() == ["package.yaml"]


def test_configuration_examples_layer_holds_examples_as_the_cli_concatenates_them(configuration):
    layer = configuration.image.layers[1]
    assert layer.annotations == {"io.crossplane.xpkg": "upbound"}
    with tarfile.open(fileobj=io.BytesIO(layer.tar())) as archive:
        assert archive.getnames() == [".up/examples.yaml"]
    files = xpkg.example_files(EXAMPLES)
    assert configuration.examples == b"".join(p.read_bytes() + b"\n...\n\n---\n" for p in files)
    assert len(configuration.example_documents) == sum(len(load_yaml_docs(p)) for p in files)


def test_configuration_dependencies_are_those_of_package_crossplane_yaml(configuration):
    assert configuration.meta["spec"]["dependsOn"] == CONFIGURATION_META["spec"]["dependsOn"]


def test_a_configuration_pinned_to_a_function_digest_depends_on_that_digest(built, tmp_path):
    digest = built["function"].digest
    pinned = xpkg.build_configuration(tmp_path / "configuration.xpkg", function_digest=digest)
    function_dependency = xpkg.function_dependency(pinned.package.meta)
    assert function_dependency is not None and function_dependency["version"] == digest
    message = refusal(pinned.path, lambda p: xpkg.check_configuration(p, function_digest="sha256:" + "1" * 64))
    assert message == f"the Function dependency's version is {digest!r}, not the package digest sha256:{'1' * 64}"


def test_a_configuration_with_an_invalid_example_is_not_written(tmp_path):
    root = tmp_path / "repo"
    for folder in ("package", "apis", "compositions", "examples"):
        (root / folder).mkdir(parents=True)
    (root / "package" / "crossplane.yaml").write_bytes((REPO / "package" / "crossplane.yaml").read_bytes())
    for path in (REPO / "apis").glob("*/definition.yaml"):
        (root / "apis" / path.parent.name).mkdir()
        (root / "apis" / path.parent.name / "definition.yaml").write_bytes(path.read_bytes())
    for path in COMPOSITIONS.glob("*.yaml"):
        (root / "compositions" / path.name).write_bytes(path.read_bytes())
    (root / "examples" / "cache.yaml").write_text(
        "apiVersion: fleetcache.dev/v1alpha1\nkind: ModelCache\nmetadata: {name: c, namespace: a}\n"
        "spec: {unknownField: 1}\n")
    with pytest.raises(xpkg.PackageError, match=r"^example fleetcache.dev/v1alpha1 ModelCache 'c' is invalid: "):
        xpkg.build_configuration(tmp_path / "configuration.xpkg", root)
    assert list(tmp_path.glob("configuration.xpkg*")) == []


# --- the file, its media types and its digest ------------------------------------------------


def test_xpkg_file_is_the_docker_tarball_go_containerregistry_writes(built, configuration):
    entries = members(built["configuration"].path)
    layers = [la.digest[7:] + ".tar.gz" for la in configuration.image.layers]
    assert [e.name for e in entries] == [configuration.image.config_digest, *layers, "manifest.json"]
    assert {(e.mode, e.mtime, e.uid, e.gid, e.uname, e.type) for e in entries} == {
        (0o644, 0, 0, 0, "", tarfile.REGTYPE)}
    with tarfile.open(built["configuration"].path) as archive:
        handle = archive.extractfile("manifest.json")
        assert handle is not None
        assert json.loads(handle.read()) == [{"Config": configuration.image.config_digest, "RepoTags": None,
                                              "Layers": layers}]


def test_pushed_manifest_is_docker_schema_2_with_the_xpkg_annotations_on_its_layers(configuration):
    manifest = json.loads(configuration.image.manifest)
    assert (manifest["schemaVersion"], manifest["mediaType"], manifest["config"]["mediaType"]) == (
        2, "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.container.image.v1+json")
    assert [(la["mediaType"], la.get("annotations")) for la in manifest["layers"]] == [
        ("application/vnd.docker.image.rootfs.diff.tar.gzip", {"io.crossplane.xpkg": "base"}),
        ("application/vnd.docker.image.rootfs.diff.tar.gzip", {"io.crossplane.xpkg": "upbound"})]


@pytest.mark.parametrize("kind", ["function", "configuration"])
def test_the_digest_file_holds_the_digest_of_the_manifest_a_push_sends(built, kind):
    package = xpkg.read_package(built[kind].path)
    written = xpkg.digest_path(built[kind].path).read_text()
    assert written == f"{built[kind].digest}\n" == f"{sha256(package.image.manifest)}\n"


def test_two_builds_write_the_same_bytes(built, tmp_path):
    again = {"function": xpkg.build_function(built["runtime"], tmp_path / "function-fleetcache.xpkg"),
             "configuration": xpkg.build_configuration(tmp_path / "configuration-fleetcache.xpkg")}
    for kind, package in again.items():
        assert package.digest == built[kind].digest
        assert package.path.read_bytes() == built[kind].path.read_bytes()


def test_the_config_is_written_as_go_containerregistry_marshals_it():
    config = {"os": "linux", "config": {"Env": ["A=<&>"], "WorkingDir": "", "Unknown": 1, "Entrypoint": ["x"]},
              "created": "2026-01-02T03:04:05.500000+00:00", "rootfs": {"diff_ids": [], "type": "layers"},
              "architecture": "arm64", "history": [{"created_by": "RUN x", "empty_layer": True}]}
    assert oci.Image(config, ()).config_json == (
        b'{"architecture":"arm64","created":"2026-01-02T03:04:05.5Z","history":[{"created":"0001-01-01T00:00:00Z",'
        b'"created_by":"RUN x","empty_layer":true}],"os":"linux","rootfs":{"type":"layers","diff_ids":[]},'
        b'"config":{"Entrypoint":["x"],"Env":["A=\\u003c\\u0026\\u003e"]}}')


# --- refusals ---------------------------------------------------------------------------------


def test_a_configuration_whose_meta_is_a_function_is_refused(tmp_path):
    path = package_with(tmp_path, [FUNCTION_META])
    assert refusal(path, xpkg.check_configuration) == \
        "package meta type is not Configuration (meta.pkg.crossplane.io/v1beta1 Function 'function-fleetcache')"


def test_a_package_without_a_meta_object_is_refused(tmp_path):
    xrd = load_yaml_docs(REPO / "apis" / "modelcaches" / "definition.yaml")[0]
    assert refusal(package_with(tmp_path, [xrd])) == "package.yaml: not exactly one package meta type (0)"


def test_a_package_holding_a_kind_crossplane_cannot_decode_is_refused(tmp_path):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}}
    assert refusal(package_with(tmp_path, [CONFIGURATION_META, config_map])) == (
        "package.yaml object 2 (v1 ConfigMap 'extra'): no kind 'ConfigMap' is registered for version 'v1' "
        "in Crossplane's package scheme")


def test_a_configuration_holding_a_crd_is_refused_as_not_an_xrd(tmp_path):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"}}
    assert refusal(package_with(tmp_path, [CONFIGURATION_META, crd])) == (
        "package.yaml object 2 (apiextensions.k8s.io/v1 CustomResourceDefinition 'x') is not an XRD, a "
        "Composition, a ManagedResourceActivationPolicy or an Operation, so a Configuration package may not hold it")


def test_a_configuration_holding_a_v1_xrd_is_refused_by_the_release(tmp_path):
    xrd = load_yaml_docs(REPO / "apis" / "modelcaches" / "definition.yaml")[0]
    path = package_with(tmp_path, [CONFIGURATION_META, {**xrd, "apiVersion": "apiextensions.crossplane.io/v1"}])
    assert refusal(path, xpkg.check_configuration) == (
        "package.yaml object 2 (apiextensions.crossplane.io/v1 CompositeResourceDefinition "
        "'modelcaches.fleetcache.dev') is neither an apiextensions.crossplane.io/v2 CompositeResourceDefinition "
        "nor an apiextensions.crossplane.io/v1 Composition")


def test_a_package_without_the_base_annotation_is_read_from_its_layers_but_refused(tmp_path):
    path = package_with(tmp_path, [CONFIGURATION_META], annotate=False)
    assert xpkg.read_package(path).base_layer is None  # Crossplane falls back to the flattened layers
    assert refusal(path, xpkg.check_configuration) == (
        "no layer is annotated io.crossplane.xpkg: base (Crossplane would read the image's flattened "
        "filesystem; crossplane xpkg build always annotates)")


def test_a_file_that_is_no_image_is_refused(tmp_path):
    path = tmp_path / "empty.xpkg"
    path.write_bytes(tar_of({"README": b"hello"}))
    assert refusal(path) == f"{path}: neither an OCI image layout (index.json) nor a docker archive (manifest.json)"


# --- the command line -----------------------------------------------------------------------


def test_build_prints_the_digest(tmp_path, capsys):
    runtime = runtime_archive(tmp_path / "runtime.tar")
    assert xpkg.main(["function", "--runtime", str(runtime), "--out", str(tmp_path / "f.xpkg")]) == 0
    assert capsys.readouterr().out == (tmp_path / "f.xpkg.digest").read_text()


def test_inspect_prints_one_line_per_object(built, configuration, capsys):
    assert xpkg.main(["inspect", str(built["configuration"].path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"configuration-fleetcache.xpkg: Configuration fleetcache {configuration.digest}, 2 layers"
    assert lines[3].startswith("meta.pkg.crossplane.io/v1 Configuration 'fleetcache': crossplane >=v2.0.0; ")
    assert len(lines) == 3 + len(configuration.documents) + len(configuration.example_documents)


def test_inspect_of_an_invalid_package_exits_1_with_one_line(tmp_path, capsys):
    path = package_with(tmp_path, [FUNCTION_META])
    assert xpkg.main(["inspect", str(path)]) == 1
    assert capsys.readouterr().err == f"xpkg: {path}: the image has no Entrypoint: Crossplane runs the Function " \
                                      f"package image as the function\n"
