"""Names follow upstream's scheme, checked against the names the article shows."""

from __future__ import annotations

from phalanx.api.naming import pod_group_name, template_name, workload_name


def test_pod_group_name_matches_the_in_tree_controller() -> None:
    assert template_name("train-a") == "train-a-pgt-0"
    assert pod_group_name("train-a-88856b5bc", "train-a-pgt-0") == "train-a-88856b5bc-train-a-pgt-0-cc865b9db"


def test_workload_name_depends_on_the_job_uid_not_only_its_name() -> None:
    first = workload_name("train-a", "0b5f4e34-1d8e-4c3b-9a57-3f6f3c1f2b10")
    again = workload_name("train-a", "0b5f4e34-1d8e-4c3b-9a57-3f6f3c1f2b10")
    recreated = workload_name("train-a", "7d1c2b3a-5e6f-4a8b-9c0d-1e2f3a4b5c6d")
    assert first == again and first != recreated
    assert first.startswith("train-a-")


def test_long_names_stay_within_253_characters() -> None:
    workload = workload_name("j" * 250, "uid")
    assert len(workload) <= 253
    assert len(pod_group_name(workload, template_name("j" * 250))) <= 253
