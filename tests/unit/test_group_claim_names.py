"""The group claim's name: upstream's generateName shape, derived instead of random."""

from __future__ import annotations

import re

from phalanx.api import naming

LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_a_short_pod_group_gets_its_name_and_the_claim_name_then_five_characters() -> None:
    name = naming.group_claim_name("train-pg", "fabric")
    assert re.fullmatch(r"train-pg-fabric-[bcdfghjklmnpqrstvwxz2456789]{5}", name), name
    assert naming.group_claim_name("train-pg", "fabric") == name
    assert naming.group_claim_name("train-pg", "dataset") != name


def test_a_long_pod_group_is_cut_in_proportion_as_upstream_cuts_it() -> None:
    pod_group = naming.pod_group_name(naming.workload_name("a" * 60, "uid-1"), naming.template_name("a" * 60))
    name = naming.group_claim_name(pod_group, "fabric")
    assert len(name) <= 63 and LABEL.match(name), name
    base = f"{pod_group}-fabric-"
    assert name.startswith(pod_group[: len(pod_group) * 57 // len(base)] + "-" + "fabric"[: 6 * 57 // len(base)])


def test_a_job_made_again_gets_another_claim() -> None:
    first = naming.pod_group_name(naming.workload_name("train", "uid-1"), naming.template_name("train"))
    second = naming.pod_group_name(naming.workload_name("train", "uid-2"), naming.template_name("train"))
    assert naming.group_claim_name(first, "fabric") != naming.group_claim_name(second, "fabric")
