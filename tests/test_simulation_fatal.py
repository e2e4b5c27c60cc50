"""The composite reconciler on a failed compose, as upstream's (crossplane
internal/controller/apiextensions/composite/reconciler.go, the same from release-2.0 to
main; design/simulation.md): a fatal result, or a step whose requirements never settle, sets
Synced=False "cannot compose resources: ...", turns every condition the pipeline did not
report Unknown with reason FatalError, leaves Ready, the status fields and everything
composed as they were; a reconcile that composes is Synced=True.

First a stand-in function run through the real render path, then the real function server
refusing a spec."""

from __future__ import annotations

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.apis import xrds
from fleetcache.devtools import render
from fleetcache.devtools.simulation import ControlPlane, Provider
from fleetcache.devtools.simulation.control_plane import FATAL_ERROR_MESSAGE
from fleetcache.functions import read
from tests.support.plane import control_plane

KEY = ("ModelCache", "ml", "chat")
STEP = "compose-model-cache"
COMPOSITION = {"spec": {"pipeline": [{"step": STEP, "functionRef": {"name": "f"}}]}}
RECORD = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chat-record"},
          "data": {"phase": "Resolved"}}


class Function:
    """A stand-in ModelCache function: it composes a ConfigMap, writes `status.summary` and
    reports Available and Resolved True, readiness True; with `spec.broken` it answers with a
    fatal result, reporting only `report_on_fatal`; with `spec.restless`, requirements that
    never settle."""

    def __init__(self, report_on_fatal: tuple[str, ...] = ()):
        self.report_on_fatal = report_on_fatal
        self.calls = 0

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the stub's name
                    ) -> fnv1.RunFunctionResponse:
        del timeout
        self.calls += 1
        spec = resource.struct_to_dict(request.observed.composite.resource).get("spec", {})
        rsp = fnv1.RunFunctionResponse()
        rsp.meta.ttl.FromSeconds(60)
        if spec.get("restless"):
            rsp.requirements.resources["secret"].CopyFrom(fnv1.ResourceSelector(
                api_version="v1", kind="Secret", match_name=f"s{self.calls}"))
            return rsp
        if spec.get("broken"):
            for kind in self.report_on_fatal:
                rsp.conditions.add(type=kind, status=fnv1.STATUS_CONDITION_FALSE, reason="Refused")
            rsp.results.add(severity=fnv1.SEVERITY_FATAL,
                            message="ModelCache chat: spec.placement must set exactly one")
            return rsp
        resource.update(rsp.desired.composite, {"status": {"summary": "1/1"}})
        rsp.desired.composite.ready = fnv1.READY_TRUE
        resource.update(rsp.desired.resources["record"], RECORD)
        for kind in ("Available", "Resolved"):
            rsp.conditions.add(type=kind, status=fnv1.STATUS_CONDITION_TRUE, reason=kind)
        return rsp


def plane(function: Function) -> ControlPlane:
    """A control plane whose ModelCache ran once and composed, then got `spec.broken`."""
    control = ControlPlane(
        lambda xr, _composition, observed, required: render.run_pipeline(
            function, xr, COMPOSITION, observed, required),
        {"ModelCache": COMPOSITION}, {}, Provider({}, list))
    control.apply({"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
                   "metadata": {"name": "chat", "namespace": "ml"}, "spec": {}})
    control.reconcile_all()
    return control


def broken(function: Function, **spec: bool) -> ControlPlane:
    control = plane(function)
    control.apply({**control.xrs[KEY], "spec": spec or {"broken": True}})
    control.reconcile_all()
    return control


def condition(control: ControlPlane, kind: str) -> dict:
    return read.condition_of(control.xrs[KEY], kind)


def untimed(condition: dict) -> dict:
    """A condition without the time Crossplane stamps it with."""
    return {k: v for k, v in condition.items() if k != "lastTransitionTime"}


def test_a_reconcile_that_composes_is_synced():
    assert condition(plane(Function()), "Synced") == {
        "type": "Synced", "status": "True", "reason": "ReconcileSuccess"}


def test_a_fatal_result_is_synced_false_with_crossplanes_message():
    assert condition(broken(Function()), "Synced") == {
        "type": "Synced", "status": "False", "reason": "ReconcileError",
        "message": 'cannot compose resources: pipeline step "compose-model-cache" returned a '
                   "fatal result: ModelCache chat: spec.placement must set exactly one"}


def test_a_fatal_result_turns_every_condition_the_step_did_not_report_unknown():
    control = broken(Function(report_on_fatal=("Resolved",)))
    assert untimed(condition(control, "Available")) == {
        "type": "Available", "status": "Unknown", "reason": "FatalError",
        "message": FATAL_ERROR_MESSAGE}
    assert untimed(condition(control, "Resolved")) == {
        "type": "Resolved", "status": "False", "reason": "Refused"}


def test_a_fatal_result_stamps_the_conditions_it_turned_unknown():
    available = condition(broken(Function()), "Available")
    assert available["status"] == "Unknown" and available["lastTransitionTime"].endswith("Z")


def test_a_fatal_result_leaves_ready_and_the_status_fields_as_they_were():
    control = plane(Function())
    ready = condition(control, "Ready")
    control.apply({**control.xrs[KEY], "spec": {"broken": True}})
    control.reconcile_all()
    assert (ready["status"], ready["reason"]) == ("True", "Available")
    assert condition(control, "Ready") == ready  # its lastTransitionTime too
    assert control.xrs[KEY]["status"]["summary"] == "1/1"


def test_a_fatal_result_keeps_what_was_composed():
    control = broken(Function())
    assert control.others[("ConfigMap", "ml", "chat-record")]["data"] == RECORD["data"]


def test_a_fatal_result_is_a_warning_event_in_crossplanes_words():
    control = broken(Function())
    assert [e.message for e in control.events] == [condition(control, "Synced")["message"]]


def test_the_reconcile_after_a_fatal_result_composes_and_is_synced_again():
    control = broken(Function())
    control.apply({**control.xrs[KEY], "spec": {}})
    control.reconcile_all()
    assert condition(control, "Synced")["status"] == "True"
    assert condition(control, "Available")["status"] == "True"


def test_requirements_that_never_settle_fail_the_reconcile_as_a_fatal_result_does():
    control = broken(Function(), restless=True)
    assert condition(control, "Synced")["message"] == (
        'cannot compose resources: cannot run Composition pipeline step "compose-model-cache": '
        "requirements didn't stabilize after the maximum number of iterations (5)")
    assert {condition(control, k)["reason"] for k in ("Available", "Resolved")} == {"FatalError"}
    assert ("ConfigMap", "ml", "chat-record") in control.others


def test_a_function_cannot_set_crossplanes_own_conditions():
    rsp = fnv1.RunFunctionResponse()
    for kind in ("Ready", "Synced", "Healthy", "UpToDate", "Responsive", "Available"):
        rsp.conditions.add(type=kind, status=fnv1.STATUS_CONDITION_FALSE, reason="Mine")
    assert [c["type"] for c in render.reported_conditions(rsp)] == ["Available"]


def test_an_unspecified_condition_status_is_unknown_as_crossplane_reads_it():
    rsp = fnv1.RunFunctionResponse()
    rsp.conditions.add(type="Available", reason="Maybe")
    assert render.reported_conditions(rsp)[0]["status"] == "Unknown"


# --- the real function server ------------------------------------------------------------------


def test_a_spec_the_function_refuses_leaves_the_cache_unsynced_and_its_conditions_unknown():
    """The XRD's CEL would refuse this spec; a control plane that let it through (an older
    XRD, a rule the API server skipped) gets the function's fatal result."""
    cache = {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCache",
             "metadata": {"name": "chat", "namespace": "ml"},
             "spec": {"grantRef": {"name": "team"}, "source": {"huggingFace": {"repo": "org/m"}},
                      "placement": {"clusterNames": ["gpu-a"]}}}
    with render.InProcessServer() as server, render.channel_to(server.address) as channel:
        control = control_plane(channel, {})
        control.apply(cache)
        control.reconcile_all()
        before = control.xrs[KEY]["status"]
        custom = {c["type"] for c in before["conditions"]} - render.SYSTEM_CONDITION_TYPES
        cache["spec"]["placement"]["clusterSelector"] = {"matchLabels": {"gpu": "true"}}
        control.apply(xrds.with_defaults(cache))
        control.reconcile_all()
    after = control.xrs[KEY]["status"]
    assert custom and all(read.condition_of(control.xrs[KEY], k)["reason"] == "FatalError"
                          for k in custom)
    assert read.condition_of(control.xrs[KEY], "Synced")["message"].endswith(
        "ModelCache chat: spec.placement must set exactly one of clusterSelector or clusterNames")
    assert {k: v for k, v in after.items() if k != "conditions"} == \
        {k: v for k, v in before.items() if k != "conditions"}
