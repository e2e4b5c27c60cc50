"""Requirement rounds as Crossplane runs them (internal/xfn/required_resources.go,
FetchingFunctionRunner): call, fetch what the requirements select, call again until a call
returns the requirements the one before it did; at most MaxRequirementsIterations (5) calls
after the first, then the step fails with Crossplane's error. Stand-in functions, so the
count of calls is exact."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.devtools import cli, render

COMPOSITE = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
             "metadata": {"name": "chat", "namespace": "ml"}, "spec": {}}
COMPOSITION = {"spec": {"pipeline": [{"step": "compose", "functionRef": {"name": "f"}}]}}
POOL = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{i}", "namespace": "ml"}}
        for i in range(8)]


class Function:
    """A stand-in function: call i (from 1) requires the Secret `names[i-1]` (the last name
    for every call after), or nothing when `names` is empty; `fatal_on` answers that call
    with a fatal result."""

    def __init__(self, *names: str, fatal_on: int = 0):
        self.names, self.fatal_on = names, fatal_on
        self.requests: list[fnv1.RunFunctionRequest] = []

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the stub's name
                    ) -> fnv1.RunFunctionResponse:
        del timeout
        self.requests.append(request)
        call = len(self.requests)
        rsp = fnv1.RunFunctionResponse()
        rsp.context.CopyFrom(resource.dict_to_struct({"call": call}))
        if self.names:
            name = self.names[min(call, len(self.names)) - 1]
            rsp.requirements.resources["secret"].CopyFrom(fnv1.ResourceSelector(
                api_version="v1", kind="Secret", namespace="ml", match_name=name))
        if call == self.fatal_on:
            rsp.results.add(severity=fnv1.SEVERITY_FATAL, message="no")
        return rsp


def run(function: Function) -> render.Rendered:
    return render.run_pipeline(function, COMPOSITE, COMPOSITION, [], POOL)


def test_requirements_that_never_settle_fail_the_step_after_exactly_six_calls():
    function = Function(*(f"s{i}" for i in range(8)))
    with pytest.raises(render.PipelineError) as raised:
        run(function)
    assert len(function.requests) == 6
    assert str(raised.value) == ('cannot run Composition pipeline step "compose": requirements '
                                 "didn't stabilize after the maximum number of iterations (5)")


def test_requirements_that_settle_on_the_sixth_call_render():
    function = Function("s0", "s1", "s2", "s3", "s4", "s4")
    rendered = run(function)
    assert len(function.requests) == 6
    assert rendered.fatal == []


def test_requirements_that_do_not_change_settle_on_the_second_call():
    function = Function("s0")
    run(function)
    assert len(function.requests) == 2
    assert [item.resource["metadata"]["name"] for item in
            function.requests[1].required_resources["secret"].items] == ["s0"]


def test_a_response_without_requirements_is_final_at_once():
    function = Function()
    run(function)
    assert len(function.requests) == 1


def test_a_fatal_result_ends_the_step_at_once_whatever_it_requires():
    function = Function(*(f"s{i}" for i in range(8)), fatal_on=2)
    rendered = run(function)
    assert len(function.requests) == 2
    assert rendered.failure == 'pipeline step "compose" returned a fatal result: no'


def test_each_call_gets_the_context_the_call_before_it_returned():
    function = Function("s0", "s1", "s1")
    run(function)
    assert [resource.struct_to_dict(r.context).get("call") for r in function.requests] == \
        [None, 1, 2]


def test_the_last_requirements_are_kept_by_step_and_name_and_answer_as_they_did():
    rendered = run(Function("s0", "s3", "s3"))
    assert list(rendered.requirements) == ["compose/secret"]
    assert [r["metadata"]["name"] for r in
            render.answer_selectors(rendered.requirements, POOL)["compose/secret"]] == ["s3"]


def test_fleetcache_render_exits_1_with_crossplanes_error_when_requirements_never_settle(
        monkeypatch, tmp_path):
    unsettled = Function(*[s["metadata"]["name"] for s in POOL])
    with pytest.raises(render.PipelineError) as raised:
        run(unsettled)

    def failing(*_args, **_kwargs):
        raise raised.value

    monkeypatch.setattr(cli, "render_checked", failing)
    xr = tmp_path / "xr.yaml"
    xr.write_text("{}")
    result = CliRunner().invoke(cli.main, ["render", str(xr), "--composition", str(xr)])
    assert result.exit_code == cli.EXIT_REFUSED
    assert "requirements didn't stabilize after the maximum number of iterations (5)" in result.output
