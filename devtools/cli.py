"""`fleetcache`: the developer CLI (render a Composition, play the demo fleet)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from fleetcache import messages
from fleetcache.apis import documents
from fleetcache.apis.xrds import load_xrds, with_defaults
from fleetcache.devtools import render as rendering
from fleetcache.devtools.testhub.command import hub
from fleetcache.functions import read


@click.group()
def main() -> None:
    """fleetcache developer tools."""


main.add_command(hub)  # `fleetcache hub`: serve a generated repo to try the agent on (README "Try the agent")


# `fleetcache render` exit codes: 0 rendered and valid; 1 the API server would refuse the
# input or the output, or the pipeline failed (a fatal result, requirements that never
# settle: what Crossplane reports as a failed compose); 2 render could not run.
EXIT_REFUSED = 1
EXIT_CANNOT_RENDER = 2


@main.command()
@click.argument("xr", type=click.Path())
@click.option("--composition", required=True, type=click.Path(), multiple=True,
              help="A file or directory of Compositions; repeatable. Each composite resource is "
                   "rendered with the one whose spec.compositeTypeRef names its apiVersion and kind.")
@click.option("--observed", type=click.Path(),
              help="File or directory of observed composed resources (each annotated with "
                   "crossplane.io/composition-resource-name; with several composite resources, "
                   "each also labelled crossplane.io/composite with its XR's name).")
@click.option("--required", type=click.Path(), multiple=True,
              help="File or directory of resources to answer the function's requirements "
                   "from (FleetClusters, Secrets, ModelCaches); repeatable.")
@click.option("--xrd", type=click.Path(), multiple=True,
              help="XRD file or directory to default and validate with, instead of the "
                   "repository's apis/; repeatable.")
@click.option("--old", type=click.Path(),
              help="The previous versions of XR's composite resources: also check the XRDs' "
                   "transition rules (oldSelf), as the API server does on update.")
@click.option("--only", multiple=True, metavar="KIND/NAME",
              help="Print only this rendered object, a composite or a composed resource (e.g. "
                   "ModelReplica/qwen3-chat-0-b622c); repeatable. Everything is still checked.")
@click.option("--include-context", is_flag=True, help="Print the pipeline context too.")
@click.option("--address", help="Use a running function server instead of starting one.")
@click.option("--tls-certs-dir", type=click.Path(),
              help="Reach --address over mTLS with the ca.crt, tls.crt and tls.key here.")
def render(xr: str, composition: tuple[str, ...], observed: str | None, required: tuple[str, ...],
           xrd: tuple[str, ...], old: str | None, only: tuple[str, ...], include_context: bool,
           address: str | None, tls_certs_dir: str | None) -> None:
    """Run the Composition pipeline of every composite resource in XR (one YAML document or
    several, as `kubectl apply -f` takes them) against the real function server and print
    the YAML, only if the API server would accept the XRs and everything composed. Several
    are rendered in turn into one YAML stream, each block after a `# KIND/NAME (i of n)`
    comment.

    Each refusal is one stderr line, `<kind>/<name>: <field path>: <message>`, and the exit
    code is 1 (also for a fatal result, printed with the output, and for requirements that
    never settle); 2 means render could not run (a missing file, bad YAML, no Composition for
    an XR's kind, no function server)."""
    try:
        tls = rendering.TLSFiles.from_dir(tls_certs_dir) if tls_certs_dir else None
        selection = [Selector.of(text) for text in only]
        rendered, refused = render_checked(xr, composition, observed, required, xrd, old, address, tls)
        output = "" if refused else printed(rendered, include_context, selection)
    except rendering.PipelineError as err:
        click.echo(f"fleetcache render: {err}", err=True)
        sys.exit(EXIT_REFUSED)
    except (documents.DocumentError, rendering.RenderError) as err:
        click.echo(f"fleetcache render: {err}", err=True)
        sys.exit(EXIT_CANNOT_RENDER)
    for refusal in refused:
        click.echo(str(refusal), err=True)
    if refused:
        sys.exit(EXIT_REFUSED)
    click.echo(output, nl=False)
    fatal = [f"{kind_name(result.composite)}: fatal result: {result.fatal[0]}"
             for result in rendered if result.fatal]
    for line in fatal:
        click.echo(f"fleetcache render: {line}", err=True)
    if fatal:
        sys.exit(EXIT_REFUSED)


def render_checked(xr: str, compositions: tuple[str, ...], observed: str | None, required: tuple[str, ...],
                   xrd: tuple[str, ...], old: str | None, address: str | None,
                   tls: rendering.TLSFiles | None = None
                   ) -> tuple[list[rendering.Rendered], list[rendering.Refusal]]:
    """Every composite resource of `xr` rendered, and what the API server would refuse: first
    in the inputs (a refused XR is not rendered, as no cluster would compose it, and a refused
    required or observed resource renders nothing), then in what was composed."""
    xrds = load_xrds(xrd or None)
    composites = composite_documents(xr)
    available = [d for path in compositions for d in documents.load_documents(path)
                 if d.get("kind") == "Composition"]
    if not available:
        raise rendering.RenderError(f"{', '.join(compositions)}: holds no Composition")
    chosen = [rendering.composition_for(composite, available) for composite in composites]
    previous = earlier_versions(old, composites, xr) if old else [None] * len(composites)
    observed_docs = documents.load_documents(observed) if observed else []
    observed_of = observed_by_composite(observed_docs, composites, xr)
    required_docs = [d for path in required for d in documents.load_documents(path)]
    refused_inputs = [rendering.refusals(c, xrds, p) for c, p in zip(composites, previous, strict=True)]
    refused_shared = [refusal for doc in required_docs + observed_docs
                      for refusal in rendering.refusals(doc, xrds)]
    accepted = [] if refused_shared else [i for i, found in enumerate(refused_inputs) if not found]
    results = rendering.render(
        [rendering.Pipeline(with_defaults(composites[i], xrds), chosen[i],
                            [with_defaults(d, xrds) for d in observed_of[i]]) for i in accepted],
        [with_defaults(d, xrds) for d in required_docs], address=address, tls=tls)
    refused_outputs = [refusal for result in results
                       for refusal in rendering.refusals(without_conditions(result.composite), xrds)
                       + rendering.composed_refusals(result.resources, xrds)]
    return results, [r for found in refused_inputs for r in found] + refused_shared + refused_outputs


def composite_documents(path: str) -> list[dict]:
    """The composite resources of a file (or directory) of YAML documents, each object once."""
    docs = documents.load_documents(path)
    if not docs:
        raise rendering.RenderError(f"{path}: holds no composite resource")
    seen = set()
    for doc in docs:
        if key(doc) in seen:
            raise rendering.RenderError(f"{path}: holds {described(doc)} twice (kubectl apply would apply the "
                                        f"second over the first); keep one")
        seen.add(key(doc))
    return docs


def earlier_versions(old: str, composites: list[dict], xr: str) -> list[dict | None]:
    """--old's documents, each paired with the composite resource it is an earlier version of."""
    index = {key(composite): i for i, composite in enumerate(composites)}
    paired: list[dict | None] = [None] * len(composites)
    for doc in composite_documents(old):
        at = index.get(key(doc))
        if at is None:
            which = described(composites[0]) if len(composites) == 1 else \
                f"any of the {len(composites)} composite resources in {xr}"
            raise rendering.RenderError(f"--old is {described(doc)}, not {which}: pass an earlier version of "
                                        f"the same XR")
        paired[at] = doc
    return paired


def observed_by_composite(observed: list[dict], composites: list[dict], xr: str) -> list[list[dict]]:
    """Each composite resource's observed resources: all of them for a single one; with
    several, those Crossplane labelled with its name (crossplane.io/composite) in its
    namespace."""
    if len(composites) == 1:
        return [observed]
    out: list[list[dict]] = [[] for _ in composites]
    for doc in observed:
        _, kind, namespace, name = identity(doc)
        owner = read.mapping_at(doc, "metadata.labels").get(rendering.COMPOSITE_LABEL)
        owners = [i for i, c in enumerate(composites) if identity(c)[3] == owner
                  and (namespace is None or identity(c)[2] in (None, namespace))]
        if len(owners) != 1:
            raise rendering.RenderError(
                f"observed {messages.shown(kind)} {messages.shown(name)} is labelled "
                f"{rendering.COMPOSITE_LABEL}={messages.shown(owner)}, not the name of one of the "
                f"{len(composites)} composite resources in {xr}; with several, each is rendered with the "
                f"observed resources labelled with its name")
        out[owners[0]].append(doc)
    return out


@dataclass(frozen=True)
class Selector:
    """--only KIND/NAME: a rendered object by its kind (any case) and name."""

    text: str
    kind: str
    name: str

    @classmethod
    def of(cls, text: str) -> Selector:
        kind, _, name = text.partition("/")
        if not kind or not name:
            raise rendering.RenderError(f"--only {messages.shown(text)}: expected KIND/NAME, e.g. "
                                        f"ModelReplica/qwen3-chat-0-b622c")
        return cls(text, kind.lower(), name)

    def selects(self, obj: dict) -> bool:
        _, kind, _, name = identity(obj)
        return str(kind).lower() == self.kind and name == self.name


def printed(rendered: list[rendering.Rendered], include_context: bool, selection: list[Selector]) -> str:
    """The YAML render prints: with --only the selected objects alone (ready to apply or to
    render again); else each composite resource's block, after a comment naming it when
    there are several."""
    if selection:
        objects = [obj for result in rendered for obj in (result.composite, *result.resources)]
        for selector in selection:
            if not any(selector.selects(obj) for obj in objects):
                raise rendering.RenderError(
                    f"--only {messages.shown(selector.text)} matched nothing rendered: "
                    f"{messages.named([kind_name(obj) for obj in objects])}")
        return rendering.dump([obj for obj in objects if any(s.selects(obj) for s in selection)])
    if len(rendered) == 1:
        return rendering.dump(rendered[0].documents(include_context))
    return "".join(f"# {' '.join(kind_name(result.composite).split())} ({i} of {len(rendered)})\n"
                   + rendering.dump(result.documents(include_context))
                   for i, result in enumerate(rendered, 1))


def identity(obj: dict) -> tuple:
    meta = metadata if isinstance(metadata := obj.get("metadata"), dict) else {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")


def key(obj: dict) -> tuple[str, ...]:
    """The identity as text: a hostile name (a list, a map) is still a key."""
    return tuple(map(str, identity(obj)))


def described(obj: dict) -> str:
    return "/".join(messages.clipped(part) for part in key(obj))


def kind_name(obj: dict) -> str:
    _, kind, _, name = identity(obj)
    return f"{messages.clipped(kind)}/{messages.clipped(name)}"


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
@click.option("--realistic-timing", is_flag=True,
              help="Pace provider-kubernetes as it runs by default (10m poll when Ready, 30s "
                   "when not, no watches) on a compressed clock of 5 s a round "
                   "(design/provider-timing.md).")
def demo(fast: bool, repo_root: str, realistic_timing: bool) -> None:
    """Play a small fleet end to end against the real function server."""
    from fleetcache.devtools import demo as demo_module

    sys.exit(demo_module.run(Path(repo_root), fast=fast, out=click.echo,
                             realistic_timing=realistic_timing))
