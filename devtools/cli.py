"""`fleetcache`: the developer CLI (render a Composition, play the demo fleet)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetcache import messages
from fleetcache.apis import documents
from fleetcache.apis.xrds import load_xrds, with_defaults
from fleetcache.devtools import render as rendering


@click.group()
def main() -> None:
    """fleetcache developer tools."""


# `fleetcache render` exit codes: 0 rendered and valid; 1 the API server would refuse the
# input or the output, or the pipeline returned a fatal result; 2 render could not run.
EXIT_REFUSED = 1
EXIT_CANNOT_RENDER = 2


@main.command()
@click.argument("xr", type=click.Path())
@click.option("--composition", required=True, type=click.Path(),
              help="The Composition whose pipeline to run.")
@click.option("--observed", type=click.Path(),
              help="File or directory of observed composed resources (each annotated with "
                   "crossplane.io/composition-resource-name).")
@click.option("--required", type=click.Path(), multiple=True,
              help="File or directory of resources to answer the function's requirements "
                   "from (FleetClusters, Secrets, ModelCaches); repeatable.")
@click.option("--xrd", type=click.Path(), multiple=True,
              help="XRD file or directory to default and validate with, instead of the "
                   "repository's apis/; repeatable.")
@click.option("--old", type=click.Path(),
              help="The previous version of XR: also check the XRDs' transition rules "
                   "(oldSelf), as the API server does on update.")
@click.option("--include-context", is_flag=True, help="Print the pipeline context too.")
@click.option("--address", help="Use a running function server instead of starting one.")
@click.option("--tls-certs-dir", type=click.Path(),
              help="Reach --address over mTLS with the ca.crt, tls.crt and tls.key here.")
def render(xr: str, composition: str, observed: str | None, required: tuple[str, ...],
           xrd: tuple[str, ...], old: str | None, include_context: bool,
           address: str | None, tls_certs_dir: str | None) -> None:
    """Run XR's Composition pipeline against the real function server and print the YAML,
    only if the API server would accept the XR and everything composed.

    Each refusal is one stderr line, `<kind>/<name>: <field path>: <message>`, and the exit
    code is 1 (also for a fatal result, printed with the output); 2 means render could not
    run (a missing file, bad YAML, a Composition for another kind, no function server)."""
    try:
        tls = rendering.TLSFiles.from_dir(tls_certs_dir) if tls_certs_dir else None
        outcome = render_checked(xr, composition, observed, required, xrd, old, address, tls)
    except (documents.DocumentError, rendering.RenderError) as err:
        click.echo(f"fleetcache render: {err}", err=True)
        sys.exit(EXIT_CANNOT_RENDER)
    result, refused = outcome
    for refusal in refused:
        click.echo(str(refusal), err=True)
    if refused:
        sys.exit(EXIT_REFUSED)
    assert result is not None  # nothing refused the inputs, so it rendered
    click.echo(rendering.dump(result.documents(include_context)), nl=False)
    if result.fatal:
        click.echo(f"fleetcache render: fatal result: {result.fatal[0]}", err=True)
        sys.exit(EXIT_REFUSED)


def render_checked(xr: str, composition: str, observed: str | None, required: tuple[str, ...],
                   xrd: tuple[str, ...], old: str | None, address: str | None,
                   tls: rendering.TLSFiles | None = None
                   ) -> tuple[rendering.Rendered | None, list[rendering.Refusal]]:
    """The render, or what the API server would refuse: first in the inputs (then nothing is
    rendered, as no cluster would compose a refused XR), then in what was composed."""
    xrds = load_xrds(xrd or None)
    composite = one_document(xr)
    compositions = [d for d in documents.load_documents(composition)
                    if d.get("kind") == "Composition"]
    if len(compositions) != 1:
        raise rendering.RenderError(f"{composition}: must hold exactly one Composition, "
                                    f"found {len(compositions)}")
    rendering.check_composition_type(compositions[0], composite)
    previous = one_document(old) if old else None
    if previous is not None:
        check_same_object(previous, composite)
    observed_docs = documents.load_documents(observed) if observed else []
    required_docs = [d for path in required for d in documents.load_documents(path)]
    refused = rendering.refusals(composite, xrds, previous) + [
        refusal for doc in required_docs + observed_docs
        for refusal in rendering.refusals(doc, xrds)]
    if refused:
        return None, refused
    result = rendering.render(
        with_defaults(composite, xrds), compositions[0],
        [with_defaults(d, xrds) for d in observed_docs],
        [with_defaults(d, xrds) for d in required_docs],
        address=address, tls=tls,
    )
    return result, rendering.refusals(without_conditions(result.composite), xrds) + \
        rendering.composed_refusals(result.resources, xrds)


def one_document(path: str) -> dict:
    docs = documents.load_documents(path)
    if len(docs) != 1:
        raise rendering.RenderError(f"{path}: must hold exactly one composite resource, "
                                    f"found {len(docs)}")
    return docs[0]


def identity(obj: dict) -> tuple:
    meta = metadata if isinstance(metadata := obj.get("metadata"), dict) else {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")


def check_same_object(old: dict, new: dict) -> None:
    """--old must be an earlier version of the same object, or no update is being checked."""
    if identity(old) != identity(new):
        raise rendering.RenderError(
            f"--old is {'/'.join(messages.clipped(p) for p in map(str, identity(old)))}, not "
            f"{'/'.join(messages.clipped(p) for p in map(str, identity(new)))}: pass an earlier "
            f"version of the same XR")


def without_conditions(composite: dict) -> dict:
    """The rendered XR minus the conditions render writes without timestamps (Crossplane
    owns and stamps them)."""
    status = {k: v for k, v in (composite.get("status") or {}).items() if k != "conditions"}
    return {**composite, "status": status} if status else \
        {k: v for k, v in composite.items() if k != "status"}


@main.command()
@click.option("--fast", is_flag=True, help="A 12 MiB model and short pauses (what make test runs).")
@click.option("--repo-root", type=click.Path(exists=True, file_okay=False),
              default=str(Path(__file__).resolve().parents[1]),
              help="Where examples/ and compositions/ live.")
def demo(fast: bool, repo_root: str) -> None:
    """Play a small fleet end to end against the real function server."""
    from fleetcache.devtools import demo as demo_module

    sys.exit(demo_module.run(Path(repo_root), fast=fast, out=click.echo))
