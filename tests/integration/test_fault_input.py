"""Bad input, fuzzed (Hypothesis) through the real API server and the operator's webhooks: the gang annotations,
a Job's `spec.scheduling`, and our Workload and PodGroup objects.

Every input is sent as a server-side dry run. A rejection must name a field the input wrote, at the path the
user wrote it (`metadata.annotations[...]`, `spec.scheduling...`, `spec.<field>`), so the user knows what to fix.
A sample of the accepted inputs is then created for real, so the operator's controllers and loop meet them; it
must neither crash nor stall: still alive, still releasing a gang at the end. PHALANX_FAULT_RUNS scales the
number of examples (`./task faults`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, started_operator, wait_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import faultcheck
from jobs import gang_job, gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
RUNS = int(os.environ.get("PHALANX_FAULT_RUNS", "0"))
EXAMPLES = 60 if RUNS > 0 else 8
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=RUNS <= 0, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Values chosen to sit on and around every rule, and arbitrary ones besides.
words = st.sampled_from(["", " ", "0", "1", "-1", "4", "64", "2147483648", "1e3", "gang", "basic", "Gang", "all", "single", "none"])
label_keys = st.sampled_from(["topology.kubernetes.io/zone", "kubernetes.io/hostname", "a/b/c", "-bad", "UPPER.case/x", "x" * 64])
texts = st.one_of(words, label_keys, st.text(max_size=20))
integers = st.one_of(st.integers(-3, 8), st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1]))
any_value = st.one_of(integers, texts, st.none(), st.booleans(), st.just({}), st.just([]))

annotations = st.dictionaries(st.sampled_from(keys.INTENT_ANNOTATIONS), texts, min_size=1)
gang_policy = st.one_of(
    st.fixed_dictionaries({"gang": st.fixed_dictionaries({}, optional={"minCount": any_value})}),
    st.just({"basic": {}}),
    st.just({"gang": {"minCount": 2}, "basic": {}}),
    st.just({}),
)
modes = st.one_of(st.just({"single": {}}), st.just({"all": {}}), st.just({"single": {}, "all": {}}), st.just({"sometimes": {}}), texts)
topology = st.lists(st.fixed_dictionaries({"key": texts}), max_size=2)
job_scheduling = st.fixed_dictionaries(
    {},
    optional={
        "schedulingPolicy": gang_policy,
        "disruptionMode": modes,
        "schedulingConstraints": st.fixed_dictionaries({"topology": topology}),
    },
).filter(bool)
pod_group_spec = st.fixed_dictionaries(
    {"schedulingPolicy": gang_policy},
    optional={
        "disruptionMode": modes,
        "priority": st.one_of(integers, texts),
        "priorityClassName": st.one_of(texts, st.just("p" * 300)),
        "preemptionPolicy": st.sampled_from(["PreemptLowerPriority", "Never", "Always", ""]),
        "schedulingConstraints": st.fixed_dictionaries({"topology": topology}),
    },
)
template_names = st.one_of(st.sampled_from(["workers", "", "UPPER", "a" * 64]), st.text(max_size=8))
workload_spec = st.fixed_dictionaries(
    {
        "podGroupTemplates": st.lists(
            st.fixed_dictionaries({"name": template_names, "schedulingPolicy": gang_policy}, optional={"disruptionMode": modes}),
            max_size=9,
        )
    },
    optional={"controllerRef": st.fixed_dictionaries({"kind": st.sampled_from(["Job", ""]), "name": st.sampled_from(["train", ""])})},
)


@pytest.fixture(scope="module")
def fuzzed_operator(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess]:
    if cluster.local is None:
        pytest.skip("reads the operator's own process and metrics")
    yield from started_operator(cluster.local)


def submit(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> str | None:
    """A server-side dry run; the rejection's message, or None when accepted."""
    proc = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", stdin=json.dumps(obj), check=False)
    return proc.stderr.strip() if proc.returncode != 0 else None


def names_a_written_field(message: str, paths: list[str]) -> bool:
    """`paths` holds the fields the input wrote, and the refusal of a required one it left out."""
    return any(path in message for path in paths)


def judge(cluster: Cluster, namespace: str, obj: dict[str, Any], paths: list[str]) -> None:
    message = submit(cluster, namespace, obj)
    if message is None:
        return
    assert names_a_written_field(message, paths), f"the rejection names none of {paths}:\n{message}\ninput: {json.dumps(obj)}"


@FUZZ
@given(written=annotations, parallelism=st.integers(1, 6))
@example(written={keys.MIN_COUNT: "2", keys.DISRUPTION_MODE: "all"}, parallelism=3)  # one accepted input, at least
def test_fuzzed_gang_annotations_are_refused_naming_the_annotation(
    cluster: Cluster, fuzzed_operator: Any, module_namespace: str, written: dict[str, str], parallelism: int
) -> None:
    job = gang_job("fuzz", annotations=written, parallelism=parallelism)
    missing = [] if keys.POLICY in written else [f"metadata.annotations[{keys.POLICY}]: Invalid value: null: required"]
    judge(cluster, module_namespace, job, [f"metadata.annotations[{k}]" for k in written] + missing)


@FUZZ
@given(scheduling=job_scheduling, parallelism=st.integers(1, 6))
def test_fuzzed_spec_scheduling_is_refused_naming_its_path(
    cluster: Cluster, fuzzed_operator: Any, module_namespace: str, scheduling: dict[str, Any], parallelism: int
) -> None:
    job = gang_job("fuzz", scheduling=scheduling, parallelism=parallelism)
    judge(cluster, module_namespace, job, [f"spec.scheduling.{k}" for k in scheduling])


@FUZZ
@given(spec=pod_group_spec)
@example(spec={"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"single": {}}})
def test_fuzzed_pod_groups_are_refused_naming_the_field(cluster: Cluster, fuzzed_operator: Any, module_namespace: str, spec: dict) -> None:
    obj = {"apiVersion": keys.API_VERSION, "kind": "PodGroup", "metadata": {"name": "fuzz"}, "spec": spec}
    missing = [f"spec.{k}: Required value" for k in ("schedulingPolicy", "disruptionMode") if k not in spec]
    judge(cluster, module_namespace, obj, [f"spec.{k}" for k in spec] + missing)


@FUZZ
@given(spec=workload_spec)
def test_fuzzed_workloads_are_refused_naming_the_field(cluster: Cluster, fuzzed_operator: Any, module_namespace: str, spec: dict) -> None:
    obj = {"apiVersion": keys.API_VERSION, "kind": "Workload", "metadata": {"name": "fuzz"}, "spec": spec}
    judge(cluster, module_namespace, obj, [f"spec.{k}" for k in spec])


def _job(written: dict[str, str], parallelism: int) -> tuple[str, dict[str, Any]]:
    return "jobs", gang_job("fuzz", annotations=written, parallelism=parallelism)


def _object(kind: str, spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return f"{kind.lower()}s", {"apiVersion": keys.API_VERSION, "kind": kind, "metadata": {"name": "fuzz"}, "spec": spec}


fuzzed_inputs = st.one_of(
    st.builds(_job, annotations, st.integers(1, 6)),
    st.builds(
        lambda scheduling, parallelism: ("jobs", gang_job("fuzz", scheduling=scheduling, parallelism=parallelism)),
        job_scheduling,
        st.integers(1, 6),
    ),
    st.builds(_object, st.just("PodGroup"), pod_group_spec),
    st.builds(_object, st.just("Workload"), workload_spec),
)


def accepted(cluster: Cluster, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """Fuzzed inputs of every kind the API server and the webhooks accept, found here (a dry run each), not left behind
    by the tests above: this test needs no other to have run."""
    found: dict[str, list[dict[str, Any]]] = {"jobs": [], "podgroups": [], "workloads": []}

    @settings(FUZZ, max_examples=4 * EXAMPLES)
    @given(drawn=fuzzed_inputs)
    @example(drawn=_job({keys.MIN_COUNT: "2", keys.DISRUPTION_MODE: "all"}, 3))  # one accepted input, at least
    @example(drawn=_object("PodGroup", {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"single": {}}}))
    def collect(drawn: tuple[str, dict[str, Any]]) -> None:
        kind, obj = drawn
        if submit(cluster, namespace, obj) is None:
            found[kind].append(obj)

    collect()
    return found


def test_the_operator_survives_what_was_accepted_and_still_releases_a_gang(
    cluster: Cluster, fuzzed_operator: operatorproc.OperatorProcess, namespace: str
) -> None:
    """Up to 8 accepted inputs of each kind are created for real, side by side with a GPU gang that must still run."""
    inputs = accepted(cluster, namespace)
    assert inputs["jobs"] and inputs["podgroups"], f"the fuzzing accepted too little to reach the operator: {inputs}"
    for kind, objs in inputs.items():
        for i, obj in enumerate(objs[:8]):
            named = {**obj, "metadata": {**obj["metadata"], "name": f"fuzz-{kind}-{i}"}}
            cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(named))
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("survivor", 2, mode="all")))
    wait_for(
        lambda: faultcheck.bound(faultcheck.take(cluster.kubectl, namespace), "survivor") == 2,
        "a gang released after the fuzzing",
        timeout=120,
    )
    assert fuzzed_operator.process.poll() is None, "the operator is alive"
    crashes = re.findall(r"Traceback \(most recent call last\)", fuzzed_operator.logs())
    assert not crashes, f"{len(crashes)} unhandled errors in the operator's log:\n{fuzzed_operator.logs()[-6000:]}"


@pytest.mark.parametrize("mode", [{"single": {}, "all": {}}, {}])
def test_a_pod_group_with_both_or_no_disruption_modes_is_refused(cluster: Cluster, module_namespace: str, mode: dict) -> None:
    """Found by the fuzzing: the type's exactly-one-of rule was lost under the field's immutability rule."""
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": mode}
    message = submit(
        cluster, module_namespace, {"apiVersion": keys.API_VERSION, "kind": "PodGroup", "metadata": {"name": "m"}, "spec": spec}
    )
    assert message is not None and "spec.disruptionMode" in message and "exactly one of: `single`, `all`" in message, message
