"""`fleetcache`: the developer CLI (render a Composition, play the demo fleet)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetcache import render as rendering


@click.group()
def main() -> None:
    """fleetcache developer tools."""


@main.command()
@click.argument("xr", type=click.Path(exists=True, dir_okay=False))
@click.option("--composition", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The Composition whose pipeline to run.")
@click.option("--observed", type=click.Path(exists=True),
              help="File or directory of observed composed resources (each annotated with "
                   "crossplane.io/composition-resource-name).")
@click.option("--required", type=click.Path(exists=True), multiple=True,
              help="File or directory of resources to answer the function's requirements "
                   "from (FleetClusters, Secrets, ModelCaches); repeatable.")
@click.option("--xrd", type=click.Path(exists=True),
              help="XRD file or directory: default the XR and required resources from their "
                   "schemas, as the API server would.")
@click.option("--include-context", is_flag=True, help="Print the pipeline context too.")
@click.option("--address", help="Use a running function server instead of starting one.")
def render(xr: str, composition: str, observed: str | None, required: tuple[str, ...],
           xrd: str | None, include_context: bool, address: str | None) -> None:
    """Run XR's Composition pipeline against the real function server; print YAML."""
    composites = rendering.load_documents(xr)
    if len(composites) != 1:
        raise click.UsageError(f"{xr} must hold exactly one composite resource, "
                               f"found {len(composites)}")
    compositions = [d for d in rendering.load_documents(composition)
                    if d.get("kind") == "Composition"]
    if len(compositions) != 1:
        raise click.UsageError(f"{composition} must hold exactly one Composition")
    schemas = rendering.xrd_schemas(rendering.load_documents(xrd)) if xrd else {}
    result = rendering.render(
        rendering.admit(composites[0], schemas), compositions[0],
        [rendering.admit(d, schemas) for d in rendering.load_documents(observed)]
        if observed else [],
        [rendering.admit(d, schemas) for path in required
         for d in rendering.load_documents(path)],
        address=address,
    )
    click.echo(rendering.dump(result.documents(include_context)), nl=False)
    if result.fatal:
        click.echo(f"fleetcache render: fatal result: {result.fatal[0]}", err=True)
        sys.exit(1)


@main.command()
@click.option("--fast", is_flag=True, help="A 12 MiB model and short pauses (what make test runs).")
@click.option("--repo-root", type=click.Path(exists=True, file_okay=False),
              default=str(Path(__file__).resolve().parents[1]),
              help="Where examples/ and compositions/ live.")
def demo(fast: bool, repo_root: str) -> None:
    """Play a small fleet end to end against the real function server."""
    from fleetcache import demo as demo_module

    sys.exit(demo_module.run(Path(repo_root), fast=fast, out=click.echo))
