"""The two Crossplane packages, built as `crossplane xpkg build --package-file` writes them and
read back as Crossplane's package manager reads them (design/packages.md cites each file).

* The Function package: the runtime image (an OCI or docker archive) with one layer on top, a
  tar of `package.yaml` (the meta object from `package/function/crossplane.yaml`), annotated
  `io.crossplane.xpkg: base` through the config label the CLI writes. Crossplane runs the
  package image itself as the function, so the runtime's config (entrypoint, user) stays.
* The Configuration package: from an empty image, the `package.yaml` layer (the meta object
  from `package/crossplane.yaml`, then every XRD in `apis/*/definition.yaml`, then every
  Composition in `compositions/`) and the examples layer (`io.crossplane.xpkg: upbound`, the
  files of `examples/` as the CLI concatenates them).

Each is written as go-containerregistry's docker tarball (`*.xpkg`), deterministically, and
`<name>.xpkg.digest` beside it holds the manifest digest a registry reports once it is pushed
(with `crossplane xpkg push`, or blob by blob from `Package.image`).

    python -m fleetcache.devtools.package.xpkg function --runtime PATH --out PATH
    python -m fleetcache.devtools.package.xpkg configuration --out PATH [--function-digest sha256:...]
    python -m fleetcache.devtools.package.xpkg inspect PATH [--runtime PATH]
"""

from __future__ import annotations

import argparse
import copy
import posixpath
import re
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from fleetcache.apis.cel import compile_rule
from fleetcache.apis.documents import bounded
from fleetcache.apis.xrds import XRD_API_VERSION, Xrd, cel_rules, to_jsonschema, xrd_for_kind, xrds_in
from fleetcache.devtools.manifests import has_k8s_schema, manifest_violations
from fleetcache.devtools.package.oci import (
    Image,
    ImageError,
    Layer,
    empty_config,
    gzip_layer,
    read_image_archive,
    tar_bytes,
    tar_files,
    write_atomically,
    write_docker_tarball,
)
from fleetcache.messages import clipped, shown

REPO = Path(__file__).resolve().parents[2]
FUNCTION_META = Path("package/function/crossplane.yaml")
CONFIGURATION_META = Path("package/crossplane.yaml")
FUNCTION_NAME = "function-fleetcache"  # what every Composition's functionRef names

# crossplane-runtime pkg/xpkg/name.go
ANNOTATION_KEY = "io.crossplane.xpkg"
BASE = "base"  # the layer holding package.yaml
EXAMPLES = "upbound"  # the examples layer (kept for existing packages, says name.go)
STREAM_FILE = "package.yaml"
EXAMPLES_FILE = ".up/examples.yaml"

META_GROUP = "meta.pkg.crossplane.io"
XRD = "CompositeResourceDefinition"
COMPOSITION_API_VERSION = "apiextensions.crossplane.io/v1"
CRD = "CustomResourceDefinition"

# crossplane-runtime pkg/xpkg/scheme.go: what the parser decodes. The meta scheme...
META_TYPES = frozenset({
    (f"{META_GROUP}/v1alpha1", "Configuration"), (f"{META_GROUP}/v1alpha1", "Provider"),
    (f"{META_GROUP}/v1beta1", "Function"),
    (f"{META_GROUP}/v1", "Configuration"), (f"{META_GROUP}/v1", "Provider"), (f"{META_GROUP}/v1", "Function"),
})
# ...and the object scheme; anything else fails to decode ("no kind is registered").
_ADMISSION = "admissionregistration.k8s.io/v1"
OBJECT_TYPES = frozenset({
    ("apiextensions.crossplane.io/v1", XRD), ("apiextensions.crossplane.io/v1", "Composition"),
    ("apiextensions.crossplane.io/v1", "CompositionRevision"),
    ("apiextensions.crossplane.io/v1alpha1", "Usage"),
    ("apiextensions.crossplane.io/v1alpha1", "ManagedResourceDefinition"),
    ("apiextensions.crossplane.io/v1alpha1", "ManagedResourceActivationPolicy"),
    ("apiextensions.crossplane.io/v2", XRD),
    ("ops.crossplane.io/v1alpha1", "Operation"), ("ops.crossplane.io/v1alpha1", "CronOperation"),
    ("ops.crossplane.io/v1alpha1", "WatchOperation"),
    ("apiextensions.k8s.io/v1", CRD), ("apiextensions.k8s.io/v1beta1", CRD),
    (_ADMISSION, "ValidatingWebhookConfiguration"), (_ADMISSION, "MutatingWebhookConfiguration"),
    (_ADMISSION, "ValidatingAdmissionPolicy"), (_ADMISSION, "ValidatingAdmissionPolicyBinding"),
})
# crossplane-runtime pkg/xpkg/lint.go: the objects each kind of package may hold.
LINTED_OBJECTS: dict[str, tuple[frozenset[tuple[str, str]], str]] = {
    "Configuration": (frozenset({
        ("apiextensions.crossplane.io/v1", XRD), ("apiextensions.crossplane.io/v2", XRD),
        ("apiextensions.crossplane.io/v1", "Composition"),
        ("apiextensions.crossplane.io/v1alpha1", "ManagedResourceActivationPolicy"),
        ("ops.crossplane.io/v1alpha1", "Operation"), ("ops.crossplane.io/v1alpha1", "CronOperation"),
        ("ops.crossplane.io/v1alpha1", "WatchOperation")}),
        "an XRD, a Composition, a ManagedResourceActivationPolicy or an Operation"),
    "Function": (frozenset({("apiextensions.k8s.io/v1", CRD), ("apiextensions.k8s.io/v1beta1", CRD)}),
                 "a CRD (a Function package carries only its input's CRDs)"),
    "Provider": (frozenset({("apiextensions.k8s.io/v1", CRD), ("apiextensions.k8s.io/v1beta1", CRD),
                            ("apiextensions.crossplane.io/v1alpha1", "ManagedResourceDefinition"),
                            (_ADMISSION, "ValidatingWebhookConfiguration"),
                            (_ADMISSION, "MutatingWebhookConfiguration")}),
                 "a CRD, an MRD or a webhook configuration"),
}

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# libyaml where PyYAML has it: the XRDs are large, and the pure-Python parser takes a second
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A Masterminds/semver constraint, as PackageValidSemver parses spec.crossplane.version.
_VERSION = r"v?\d+(\.(\d+|[xX*]))?(\.(\d+|[xX*]))?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?"
_CONSTRAINT = re.compile(rf"\s*(!=|>=|<=|=>|=<|>|<|=|~>|~|\^)?\s*{_VERSION}\s*")


class PackageError(ValueError):
    """A package that cannot be built, or that Crossplane (or this project's release) would
    refuse; the message is one line naming the problem."""


# --- building -----------------------------------------------------------------------------------


def package_stream(meta: Mapping[str, Any], objects: Sequence[Mapping[str, Any]]) -> bytes:
    """`package.yaml`: the meta object, then every object, each opened with `---` and the
    stream closed with one, as the CLI's encode writes it (keys sorted, as its YAML
    serializer sorts them)."""
    parts = ["---\n", _dumped(meta), "---\n"]
    for obj in objects:
        parts += [_dumped(obj), "---\n"]
    return "".join(parts).encode("utf-8")


def _dumped(obj: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(obj), sort_keys=True, default_flow_style=False, allow_unicode=True)


def example_files(root: Path) -> list[Path]:
    """What the CLI's examples walk reads: every non-empty `*.yaml`/`*.yml` file under `root`,
    in the order a walk of sorted directory entries meets them."""
    return sorted((p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")
                   and p.stat().st_size > 0), key=lambda p: p.relative_to(root).parts)


def examples_stream(root: Path) -> bytes | None:
    """The examples layer's file as the CLI builds it: each file's bytes followed by the
    `\\n...\\n` and `\\n---\\n` its reader puts between files; None without an examples folder."""
    if not root.is_dir():
        return None
    return b"".join(p.read_bytes() + b"\n...\n" + b"\n---\n" for p in example_files(root))


def xpkg_layer(name: str, content: bytes, annotation: str) -> Layer:
    """A layer of one file, mode 0644, as the CLI's Layer() writes it, annotated by value."""
    return gzip_layer(tar_bytes([(name, content)]), {ANNOTATION_KEY: annotation})


def label(layer: Layer) -> str:
    """The config label that carries a layer's annotation in a tarball (layers.go Label)."""
    return f"{ANNOTATION_KEY}:{layer.digest}"


def with_layers(base: Image | None, layers: Sequence[Layer]) -> Image:
    """`base` (an empty image when None) with `layers` appended as the CLI appends them: a
    diff_id and an empty history entry each, and each layer's annotation as a config label."""
    config = copy.deepcopy(dict(base.config)) if base is not None else empty_config()
    config["rootfs"]["diff_ids"] = list(config["rootfs"]["diff_ids"] or []) + [la.diff_id for la in layers]
    config["history"] = list(config.get("history") or []) + [{} for _ in layers]
    labels = config["config"].setdefault("Labels", {})
    labels.update({label(la): la.annotations[ANNOTATION_KEY] for la in layers})
    kept = tuple(la.with_annotations({}) for la in base.layers) if base is not None else ()
    return Image(config, kept + tuple(layers))


@dataclass(frozen=True)
class Built:
    path: Path
    digest: str  # the manifest digest a registry reports after a push
    package: Package


def write_package(image: Image, out: Path) -> str:
    """The package as `<out>` (a docker tarball) and its digest as `<out>.digest`."""
    write_docker_tarball(image, out)
    digest = image.digest
    write_atomically(digest_path(out), lambda handle: handle.write(f"{digest}\n".encode()))
    return digest


def digest_path(out: Path) -> Path:
    return out.with_name(out.name + ".digest")


def file_documents(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PackageError(f"{path}: {err.strerror or err}") from None
    return yaml_stream(data, str(path))


def only_document(path: Path) -> dict[str, Any]:
    docs = file_documents(path)
    if len(docs) != 1:
        raise PackageError(f"{path}: must hold exactly one YAML document, not {len(docs)}")
    return docs[0]


def documents_of(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in file_documents(path)]


def build_function(runtime: Path, out: Path, root: Path = REPO) -> Built:
    """The Function package: `runtime`'s image with the `package.yaml` layer on top, written to
    `out`, read back and checked (a package that fails is removed)."""
    _cleared(out)
    meta = only_document(root / FUNCTION_META)
    try:
        base = read_image_archive(runtime)
    except ImageError as err:
        raise PackageError(f"runtime image: {err}") from None
    image = with_layers(base, [xpkg_layer(STREAM_FILE, package_stream(meta, []), BASE)])
    return _written(image, out, lambda package: check_function(package, root, base))


def build_configuration(out: Path, root: Path = REPO, function_digest: str | None = None) -> Built:
    """The Configuration package from `root`'s metadata, XRDs, Compositions and examples,
    written to `out`, read back and checked. With `function_digest`, the dependency on the
    Function is pinned to that package digest (see package/README.md)."""
    _cleared(out)
    meta = only_document(root / CONFIGURATION_META)
    if function_digest is not None:
        meta = pinned(meta, function_digest)
    objects = documents_of(xrd_files(root)) + documents_of(composition_files(root))
    layers = [xpkg_layer(STREAM_FILE, package_stream(meta, objects), BASE)]
    examples = examples_stream(root / "examples")
    if examples is not None:
        layers.append(xpkg_layer(EXAMPLES_FILE, examples, EXAMPLES))
    image = with_layers(None, layers)
    return _written(image, out, lambda package: check_configuration(package, root, function_digest))


def xrd_files(root: Path) -> list[Path]:
    return sorted((root / "apis").glob("*/definition.yaml"))


def composition_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "compositions").glob("*") if p.suffix in (".yaml", ".yml"))


def function_dependency(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    deps = (meta.get("spec") or {}).get("dependsOn") or []
    found = [d for d in deps if isinstance(d, dict) and d.get("kind") == "Function"]
    return found[0] if len(found) == 1 else None


def pinned(meta: Mapping[str, Any], function_digest: str) -> dict[str, Any]:
    """The meta object with its Function dependency's version set to a package digest, which
    Crossplane compares exactly (dependency.go) where a range needs a semver tag."""
    if not _DIGEST.fullmatch(function_digest):
        raise PackageError(f"--function-digest {shown(function_digest)} is not sha256:<64 hex digits>")
    out = copy.deepcopy(dict(meta))
    dependency = function_dependency(out)
    if dependency is None:
        raise PackageError(f"{CONFIGURATION_META}: has no single Function dependency to pin")
    dependency["version"] = function_digest
    return out


def _cleared(out: Path) -> Path:
    """No package at `out` until this build writes one: a failed build leaves none behind."""
    out.unlink(missing_ok=True)
    digest_path(out).unlink(missing_ok=True)
    return out


def _written(image: Image, out: Path, check: Callable[[Package], None]) -> Built:
    digest = write_package(image, out)
    try:
        package = read_package(out)
        check(package)
    except PackageError:
        out.unlink(missing_ok=True)
        digest_path(out).unlink(missing_ok=True)
        raise
    return Built(out, digest, package)


# --- reading, as Crossplane's package manager reads a package ------------------------------------


@dataclass(frozen=True)
class Package:
    """A package as Crossplane parses it: its image (layers annotated from the config labels,
    as a push annotates them), the layer `package.yaml` came from, and what that held."""

    path: Path
    image: Image
    base_layer: int | None  # index of the annotated layer; None: read from all layers
    stream: bytes  # package.yaml
    documents: list[dict[str, Any]]  # its objects in order, the meta among them
    meta: dict[str, Any]
    objects: list[dict[str, Any]]  # every other object
    examples: bytes | None  # the examples layer's file, when there is one
    example_documents: list[dict[str, Any]]

    @property
    def digest(self) -> str:
        return self.image.digest

    @property
    def kind(self) -> str:
        return str(self.meta.get("kind"))


def annotated(image: Image) -> Image:
    """The image as `crossplane xpkg push` pushes it (AnnotateLayers): each layer annotated
    with what its config label says, other annotations dropped."""
    labels = image.config["config"].get("Labels") or {}
    layers = []
    for layer in image.layers:
        value = labels.get(label(layer), annotation_of(layer))  # a manifest's own, read from an OCI layout
        layers.append(layer.with_annotations({ANNOTATION_KEY: value} if value is not None else {}))
    return Image(image.config, tuple(layers))


def annotation_of(layer: Layer) -> str | None:
    return layer.annotations.get(ANNOTATION_KEY)


def read_package(path: str | Path) -> Package:
    """Parse a package as Crossplane does (client.go ExtractPackageYAML, parser.go, lint.go):
    `package.yaml` from the first layer annotated `io.crossplane.xpkg: base`, else from the
    image's layers flattened; its YAML stream decoded; one meta object; every other object
    of a kind the package's kind may hold."""
    path = Path(path)
    try:
        image = annotated(read_image_archive(path))
    except ImageError as err:
        raise PackageError(str(err)) from None
    bases = [i for i, layer in enumerate(image.layers) if annotation_of(layer) == BASE]
    if bases:
        stream = file_in(image.layers[bases[0]], STREAM_FILE, f"layer {bases[0] + 1}")
        if stream is None:
            raise PackageError(f"the layer annotated {ANNOTATION_KEY}: {BASE} holds no {STREAM_FILE}")
    else:
        stream = flattened_file(image.layers, STREAM_FILE)
        if stream is None:
            raise PackageError(f"{STREAM_FILE} not found in package")
    documents = yaml_stream(stream, STREAM_FILE)
    metas = [d for d in documents if type_of(d) in META_TYPES]
    for index, doc in enumerate(documents):
        if type_of(doc) not in META_TYPES | OBJECT_TYPES:
            raise PackageError(f"{STREAM_FILE} object {index + 1} ({described(doc)}): no kind "
                               f"{shown(doc.get('kind'))} is registered for version "
                               f"{shown(doc.get('apiVersion'))} in Crossplane's package scheme")
    if len(metas) != 1:
        raise PackageError(f"{STREAM_FILE}: not exactly one package meta type ({len(metas)})")
    meta = metas[0]
    objects = [d for d in documents if d is not meta]
    allowed, what = LINTED_OBJECTS[str(meta["kind"])]
    for index, doc in enumerate(documents):
        if doc is not meta and type_of(doc) not in allowed:
            raise PackageError(f"{STREAM_FILE} object {index + 1} ({described(doc)}) is not {what}, "
                               f"so a {meta['kind']} package may not hold it")
    constraint = ((meta.get("spec") or {}).get("crossplane") or {}).get("version")
    if constraint is not None and not valid_constraint(constraint):
        raise PackageError(f"package version constraints are poorly formatted: spec.crossplane.version "
                           f"{shown(constraint)}")
    examples_layers = [layer for layer in image.layers if annotation_of(layer) == EXAMPLES]
    examples = file_in(examples_layers[0], EXAMPLES_FILE, "the examples layer") if examples_layers else None
    example_documents = yaml_stream(examples, EXAMPLES_FILE) if examples is not None else []
    return Package(path, image, bases[0] if bases else None, stream, documents, meta, objects, examples,
                   example_documents)


def type_of(doc: Mapping[str, Any]) -> tuple[str, str]:
    return (str(doc.get("apiVersion")), str(doc.get("kind")))


def described(doc: Mapping[str, Any]) -> str:
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    return f"{clipped(doc.get('apiVersion'), 80)} {clipped(doc.get('kind'), 80)} {shown(name, 80)}"


def valid_constraint(text: Any) -> bool:
    """A semver constraint as Masterminds/semver reads one: comparisons joined by commas or
    spaces, alternatives by ||, or a hyphen range."""
    if not isinstance(text, str) or not text.strip():
        return False
    for alternative in text.split("||"):
        bounds = re.split(r"\s*,\s*|\s+(?=[!<>=~^])", alternative.strip())
        hyphen = re.fullmatch(rf"\s*{_VERSION}\s+-\s+{_VERSION}\s*", alternative)
        if not hyphen and not all(_CONSTRAINT.fullmatch(b) for b in bounds):
            return False
    return True


def file_in(layer: Layer, name: str, where: str) -> bytes | None:
    """The first regular file of a layer at path `name` or, as ExtractPackageYAML matches
    `package.yaml`, with base name `name`."""
    try:
        entries = tar_files(layer.tar(), where)
    except (ImageError, zlib.error) as err:
        raise PackageError(f"{where}: {err}") from None
    return next((data for entry, data in entries if data is not None
                 and name in (posixpath.basename(entry), posixpath.normpath(entry.lstrip("/")))), None)


def flattened_file(layers: Sequence[Layer], name: str) -> bytes | None:
    """A file as the image's flattened filesystem shows it (mutate.Extract): the topmost
    layer's, unless a whiteout above it removed it."""
    removed: set[str] = set()
    for index in range(len(layers) - 1, -1, -1):
        try:
            entries = tar_files(layers[index].tar(), f"layer {index + 1}")
        except (ImageError, zlib.error) as err:
            raise PackageError(f"layer {index + 1}: {err}") from None
        for entry, data in entries:
            path = posixpath.normpath(entry.lstrip("/"))
            base = posixpath.basename(path)
            if base.startswith(".wh."):
                removed.add(posixpath.join(posixpath.dirname(path), base[4:]))
            elif base == name and data is not None and path not in removed:
                return data
    return None


def yaml_stream(data: bytes, where: str) -> list[dict[str, Any]]:
    """Every non-empty document of a YAML stream, each a Kubernetes object."""
    try:
        documents = [d for d in yaml.load_all(data.decode("utf-8"), Loader=LOADER) if d is not None]
    except UnicodeDecodeError:
        raise PackageError(f"{where}: not UTF-8 text") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        at = f" at line {mark.line + 1}" if mark else ""
        raise PackageError(f"{where}: not a valid YAML stream: {clipped(err.problem or err.context)}{at}") from None
    except (yaml.YAMLError, RecursionError) as err:
        raise PackageError(f"{where}: not a valid YAML stream: {clipped(err)}") from None
    if not bounded(documents):
        raise PackageError(f"{where}: too large or too deeply nested to check")
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict) or not isinstance(doc.get("apiVersion"), str) \
                or not isinstance(doc.get("kind"), str):
            raise PackageError(f"{where} document {index + 1}: not a Kubernetes object "
                               f"(an apiVersion and a kind)")
    return documents


# --- this project's release checks -----------------------------------------------------------


def check(package: Package, root: Path = REPO, runtime: Image | None = None,
          function_digest: str | None = None) -> None:
    """The checks for the package's kind: check_function or check_configuration."""
    if package.kind == "Function":
        check_function(package, root, runtime)
    elif package.kind == "Configuration":
        check_configuration(package, root, function_digest)
    else:
        raise PackageError(f"a {package.kind} package: fleetcache ships a Function and a Configuration")


def _base_layer(package: Package, expected: int) -> None:
    if package.base_layer is None:
        raise PackageError(f"no layer is annotated {ANNOTATION_KEY}: {BASE} (Crossplane would read the "
                           f"image's flattened filesystem; crossplane xpkg build always annotates)")
    bases = [i for i, la in enumerate(package.image.layers) if annotation_of(la) == BASE]
    if len(bases) != 1 or bases[0] != expected:
        raise PackageError(f"layers {', '.join(str(i + 1) for i in bases)} are annotated {ANNOTATION_KEY}: "
                           f"{BASE}; the package layer must be layer {expected + 1} and the only one")


def _meta_first(package: Package, source: Mapping[str, Any], source_path: Path) -> None:
    first = package.documents[0]
    if type_of(first) != type_of(source):
        raise PackageError(f"{STREAM_FILE} starts with {described(first)}, not the {source.get('apiVersion')} "
                           f"{source.get('kind')} meta object of {source_path}")
    difference = first_difference(first, source)
    if difference is not None:
        raise PackageError(f"the meta object differs from {source_path} at {difference}")


def first_difference(found: Any, expected: Any, path: str = "") -> str | None:
    """The first field path where two objects differ (None when equal)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected), key=str):
            deeper = first_difference(found.get(key), expected.get(key), f"{path}.{key}" if path else str(key))
            if deeper is not None:
                return deeper
        return None
    if isinstance(found, list) and isinstance(expected, list):
        for index in range(max(len(found), len(expected))):
            deeper = first_difference(found[index] if index < len(found) else None,
                                      expected[index] if index < len(expected) else None, f"{path}[{index}]")
            if deeper is not None:
                return deeper
        return None
    return None if found == expected else (path or "<root>")


def check_function(package: Package, root: Path = REPO, runtime: Image | None = None) -> None:
    """The Function package fleetcache releases: `package.yaml` is the meta object of
    package/function/crossplane.yaml alone, in the top layer (the only one annotated base,
    no examples), and the image under it is the runtime: given `runtime`, its layers byte
    for byte and its config with only the package layer's diff_id, history entry and label
    added (the CLI's Build); without it, at least an entrypoint to run."""
    if package.kind != "Function":
        raise PackageError(f"package meta type is not Function ({described(package.meta)})")
    layers = package.image.layers
    _base_layer(package, len(layers) - 1)
    _meta_first(package, only_document(root / FUNCTION_META), FUNCTION_META)
    if package.objects:
        raise PackageError(f"{STREAM_FILE} holds {len(package.objects)} objects besides the meta object "
                           f"({described(package.objects[0])}); package/function/ holds none")
    others = [annotation_of(la) for la in layers[:-1] if annotation_of(la) is not None]
    if others:
        raise PackageError(f"a runtime layer is annotated {ANNOTATION_KEY}: {others[0]}")
    if not package.image.config["config"].get("Entrypoint"):
        raise PackageError("the image has no Entrypoint: Crossplane runs the Function package image as "
                           "the function")
    if runtime is not None:
        check_embedded(package.image, runtime)


def check_embedded(image: Image, runtime: Image) -> None:
    """`image` is `runtime` with exactly one layer added the way the CLI adds it."""
    below = image.layers[:-1]
    if len(below) != len(runtime.layers):
        raise PackageError(f"the package has {len(below)} layers under its package layer, the runtime "
                           f"image {len(runtime.layers)}")
    for index, (ours, theirs) in enumerate(zip(below, runtime.layers, strict=True)):
        if (ours.digest, ours.diff_id) != (theirs.digest, theirs.diff_id):
            raise PackageError(f"layer {index + 1} is {ours.digest}, the runtime image's is {theirs.digest}")
    top = image.layers[-1]
    expected = with_layers(runtime, [top.with_annotations({ANNOTATION_KEY: BASE})]).config
    difference = first_difference(image.config, expected)
    if difference is not None:
        raise PackageError(f"the package's image config differs from the runtime image's at {difference} "
                           f"(beyond the package layer's diff_id, history entry and label)")


def check_configuration(package: Package, root: Path = REPO, function_digest: str | None = None) -> None:
    """The Configuration package fleetcache releases: `package.yaml` is the meta object of
    package/crossplane.yaml (its Function dependency possibly pinned to a package digest),
    then exactly the XRDs of apis/ and the Compositions of compositions/, in layer 1
    (annotated base); layer 2 is examples/ (annotated upbound). Every object is checked as
    the tests check it: each XRD builds the CRD schema `fleetcache.apis.xrds` validates with
    and its CEL rules compile; each Composition is a Pipeline for a packaged XRD calling only
    function-fleetcache; each example validates against the packaged XRDs (fleetcache kinds)
    or the Kubernetes OpenAPI (kubernetes-validate)."""
    if package.kind != "Configuration":
        raise PackageError(f"package meta type is not Configuration ({described(package.meta)})")
    _base_layer(package, 0)
    source_meta = only_document(root / CONFIGURATION_META)
    dependency = function_dependency(package.meta)
    version = dependency.get("version") if dependency else None
    if function_digest is not None and version != function_digest:
        raise PackageError(f"the Function dependency's version is {shown(version)}, not the package digest "
                           f"{function_digest}")
    if isinstance(version, str) and _DIGEST.fullmatch(version):
        source_meta = pinned(source_meta, version)
    _meta_first(package, source_meta, CONFIGURATION_META)
    for index, doc in enumerate(package.objects):
        if type_of(doc) not in {(XRD_API_VERSION, XRD), (COMPOSITION_API_VERSION, "Composition")}:
            raise PackageError(f"{STREAM_FILE} object {index + 2} ({described(doc)}) is neither an "
                               f"{XRD_API_VERSION} {XRD} nor an {COMPOSITION_API_VERSION} Composition")
    _same_objects(package.objects, documents_of(xrd_files(root)) + documents_of(composition_files(root)))
    xrds = checked_xrds([d for d in package.objects if d["kind"] == XRD])
    for doc in package.objects:
        if doc["kind"] == "Composition":
            check_composition(doc, xrds)
    layers = package.image.layers
    if len(layers) != 2 or annotation_of(layers[1]) != EXAMPLES:
        raise PackageError(f"the package has {len(layers)} layers; it must have 2, the second annotated "
                           f"{ANNOTATION_KEY}: {EXAMPLES}")
    if package.examples is None:
        raise PackageError(f"the examples layer holds no {EXAMPLES_FILE}")
    if package.examples != examples_stream(root / "examples"):
        raise PackageError(f"the examples layer does not hold examples/ as {EXAMPLES_FILE}")
    for doc in package.example_documents:
        check_example(doc, xrds)


def _same_objects(found: Sequence[Mapping[str, Any]], expected: Sequence[Mapping[str, Any]]) -> None:
    found_ids = [described(d) for d in found]
    expected_ids = [described(d) for d in expected]
    if found_ids != expected_ids:
        missing = [i for i in expected_ids if i not in found_ids]
        extra = [i for i in found_ids if i not in expected_ids]
        what = f"missing {missing[0]}" if missing else f"not in apis/ or compositions/: {extra[0]}" if extra \
            else "in another order"
        raise PackageError(f"the package's objects are not the XRDs of apis/ and the Compositions of "
                           f"compositions/ ({what})")
    for ours, theirs in zip(found, expected, strict=True):
        difference = first_difference(ours, theirs)
        if difference is not None:
            raise PackageError(f"{described(ours)} differs from the repository's at {difference}")


def checked_xrds(docs: Sequence[Mapping[str, Any]]) -> dict[str, Xrd]:
    """The packaged XRDs, each as `fleetcache.apis.xrds` reads it: its CRD schema a valid
    JSON schema once translated, its CEL rules compiled."""
    try:
        xrds = xrds_in(docs)
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise PackageError(f"an XRD is malformed: {clipped(err)} missing or wrong") from None
    if len(xrds) != len(docs):
        raise PackageError(f"{len(docs)} XRDs define only {len(xrds)} kinds")
    for xrd in xrds.values():
        try:
            jsonschema.Draft7Validator.check_schema(to_jsonschema(xrd.crd_schema))
        except jsonschema.SchemaError as err:
            raise PackageError(f"XRD {xrd.plural}.{xrd.group}: its schema is invalid: {clipped(err.message)}") \
                from None
        for where, rule in cel_rules(xrd.schema):
            try:
                compile_rule(rule["rule"])
            except Exception as err:  # celpy raises its own and parser errors
                raise PackageError(f"XRD {xrd.plural}.{xrd.group}: the CEL rule at {where or '<root>'} does not "
                                   f"compile: {clipped(err, 120)}") from None
    return xrds


def check_composition(doc: Mapping[str, Any], xrds: Mapping[str, Xrd]) -> None:
    name = (doc.get("metadata") or {}).get("name")
    spec = doc.get("spec") or {}
    ref = spec.get("compositeTypeRef") or {}
    xrd = xrd_for_kind(ref.get("kind"), xrds)
    if xrd is None or ref.get("apiVersion") != xrd.api_version:
        raise PackageError(f"Composition {shown(name)}: composes {shown(ref.get('apiVersion'))} "
                           f"{shown(ref.get('kind'))}, which no packaged XRD serves")
    steps = spec.get("pipeline")
    if spec.get("mode") != "Pipeline" or not isinstance(steps, list) or not steps:
        raise PackageError(f"Composition {shown(name)}: not a Pipeline of steps")
    for step in steps:
        called = ((step or {}).get("functionRef") or {}).get("name") if isinstance(step, dict) else None
        if called != FUNCTION_NAME:
            raise PackageError(f"Composition {shown(name)}: a step calls {shown(called)}, not {FUNCTION_NAME}")


def served_by(doc: Mapping[str, Any], xrds: Mapping[str, Xrd]) -> Xrd | None:
    return next((x for x in xrds.values() if (x.api_version, x.kind) == type_of(doc)), None)


def example_schema(doc: Mapping[str, Any], xrds: Mapping[str, Xrd]) -> str | None:
    """What an example is checked against: a packaged XRD, the Kubernetes OpenAPI, or nothing
    here (Argo CD's kinds: tests/test_argocd.py checks those)."""
    if served_by(doc, xrds) is not None:
        return "its packaged XRD"
    return "the Kubernetes OpenAPI" if has_k8s_schema(doc) else None


def check_example(doc: Mapping[str, Any], xrds: Mapping[str, Xrd]) -> None:
    """An example as tests/test_apis.py checks it."""
    xrd = served_by(doc, xrds)
    if xrd is not None:
        problems = [str(v) for v in xrd.violations(doc)]
    elif has_k8s_schema(doc):
        problems = [str(v) for v in manifest_violations(doc)]
    else:
        return
    if problems:
        raise PackageError(f"example {described(doc)} is invalid: {clipped(problems[0])}"
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


# --- summaries ----------------------------------------------------------------------------------


def summary(package: Package) -> list[str]:
    """One line for the package, one per layer xpkg annotates, one per object."""
    image = package.image
    entrypoint = image.config["config"].get("Entrypoint")
    name = (package.meta.get("metadata") or {}).get("name")
    lines = [f"{package.path.name}: {package.kind} {name} {package.digest}, "
             f"{len(image.layers)} layers" + (f", entrypoint {entrypoint}" if entrypoint else "")]
    for index, layer in enumerate(image.layers):
        value = annotation_of(layer)
        if value is not None:
            held = f"{STREAM_FILE}, objects: {len(package.documents)}" if value == BASE \
                else f"{EXAMPLES_FILE}, objects: {len(package.example_documents)}" if value == EXAMPLES else "?"
            lines.append(f"layer {index + 1} {layer.digest} ({layer.size} bytes) {ANNOTATION_KEY}: {value}: {held}")
    lines += [object_line(doc) for doc in package.documents]
    xrds = xrds_in(d for d in package.objects if type_of(d) == (XRD_API_VERSION, XRD))
    for doc in package.example_documents:
        schema = example_schema(doc, xrds)
        checked = f"checked against {schema}" if schema else "no schema here, not checked"
        lines.append(f"example {described(doc)}: {checked}")
    return lines


def object_line(doc: Mapping[str, Any]) -> str:
    spec = doc.get("spec") or {}
    head = described(doc)
    if doc.get("kind") in ("Configuration", "Function", "Provider"):
        deps = ", ".join(f"{d.get('kind')} {d.get('package')} {d.get('version')}" for d in spec.get("dependsOn") or [])
        return f"{head}: crossplane {(spec.get('crossplane') or {}).get('version')}" + \
            (f"; depends on {deps}" if deps else "")
    if doc.get("kind") == XRD:
        return f"{head}: {(spec.get('names') or {}).get('kind')} ({spec.get('scope', 'Namespaced')})"
    if doc.get("kind") == "Composition":
        ref = spec.get("compositeTypeRef") or {}
        steps = ", ".join(f"{s.get('step')} -> {(s.get('functionRef') or {}).get('name')}"
                          for s in spec.get("pipeline") or [] if isinstance(s, dict))
        return f"{head}: {ref.get('kind')} via {steps}"
    return head


# --- the command line -----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetcache.devtools.package.xpkg",
                                     description="Build and inspect fleetcache's Crossplane packages.")
    commands = parser.add_subparsers(dest="command", required=True)
    function = commands.add_parser("function", help="build the Function package around a runtime image")
    function.add_argument("--runtime", type=Path, required=True,
                          help="the runtime image: an OCI archive (buildah push IMAGE oci-archive:PATH) "
                               "or a docker archive")
    function.add_argument("--out", type=Path, required=True, help="the .xpkg to write (and <out>.digest)")
    configuration = commands.add_parser("configuration", help="build the Configuration package")
    configuration.add_argument("--out", type=Path, required=True, help="the .xpkg to write (and <out>.digest)")
    configuration.add_argument("--function-digest", help="pin the Function dependency to this package digest")
    inspect = commands.add_parser("inspect", help="parse a package as Crossplane does and check it")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--runtime", type=Path, help="the runtime image a Function package must embed")
    inspect.add_argument("--function-digest", help="the digest a Configuration must pin its Function to")
    for command in (function, configuration, inspect):
        command.add_argument("--root", type=Path, default=REPO, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        if args.command == "function":
            built = build_function(args.runtime, args.out, args.root)
        elif args.command == "configuration":
            built = build_configuration(args.out, args.root, args.function_digest)
        else:
            package = read_package(args.path)
            runtime = None
            if args.runtime is not None:
                try:
                    runtime = read_image_archive(args.runtime)
                except ImageError as err:
                    raise PackageError(f"runtime image: {err}") from None
            check(package, args.root, runtime, args.function_digest)
            print("\n".join(summary(package)))
            return 0
    except PackageError as err:
        where = args.path if args.command == "inspect" else args.out
        print(f"xpkg: {where}: {err}", file=sys.stderr)
        return 1
    print(f"wrote {built.path} ({built.path.stat().st_size} bytes, {len(built.package.image.layers)} layers)",
          file=sys.stderr)
    print(built.digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
