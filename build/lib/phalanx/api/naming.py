"""Names of the objects Phalanx creates for a Job.

The scheme is upstream's (kubernetes pkg/controller/job), so a Job's Workload
and PodGroup get the same names under Phalanx as under the in-tree feature:
the Workload is `<job>-<hash of the Job UID>`, so a Job deleted and created
again under the same name never meets its predecessor's objects while the
garbage collector is still removing them.
"""

from __future__ import annotations

_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_NAME = 253
_MAX_LABEL = 63
_TEMPLATE_SUFFIX = "-pgt-0"


def _fnv32a(data: str) -> int:
    h = 0x811C9DC5
    for byte in data.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _safe_encode(value: str) -> str:
    """apimachinery's rand.SafeEncodeString: no vowels, no look-alikes, so no words."""
    return "".join(_SAFE_ALPHABET[ord(c) % len(_SAFE_ALPHABET)] for c in value)


def _hash(data: str) -> str:
    return _safe_encode(str(_fnv32a(data)))


def workload_name(job_name: str, job_uid: str) -> str:
    suffix = _hash(f"(types.UID){job_uid}")
    return f"{job_name[: _MAX_NAME - len(suffix) - 1]}-{suffix}"


def template_name(job_name: str) -> str:
    """Upstream's `<job>-pgt-0` while it fits a label value (63); a longer Job name is cut and a hash of it keeps it unique."""
    name = f"{job_name}{_TEMPLATE_SUFFIX}"
    if len(name) <= _MAX_LABEL:
        return name
    suffix = _hash(job_name)
    return f"{job_name[: _MAX_LABEL - len(_TEMPLATE_SUFFIX) - len(suffix) - 1]}-{suffix}{_TEMPLATE_SUFFIX}"


def pod_group_name(workload: str, template: str) -> str:
    suffix = _hash(workload + template)
    room = _MAX_NAME - len(suffix) - 2
    if len(workload) + len(template) > room:
        half = room // 2
        if len(workload) < half:
            template = template[: room - len(workload)]
        elif len(template) < half:
            workload = workload[: room - len(template)]
        else:
            workload, template = workload[:half], template[: room - half]
    return f"{workload}-{template}-{suffix}"


_GENERATED_SUFFIX = 5
_CLAIM_BASE = _MAX_LABEL - 1 - _GENERATED_SUFFIX


def group_claim_name(pod_group: str, claim: str) -> str:
    """The ResourceClaim made for a PodGroup's `resourceClaims` entry, in upstream's shape.

    Upstream's resourceclaim controller creates it with generateName `<podgroup>-<claim>-` (both cut in proportion
    past 57 characters) and the API server adds 5 random characters. Phalanx derives those 5 from the two names
    instead (same alphabet), so the pod webhook can name the claim in each member before it exists; the PodGroup
    name already changes with the Job's UID, so a Job made again gets another claim.
    """
    base = f"{pod_group}-{claim}-"
    if len(base) > _CLAIM_BASE:
        base = f"{pod_group[: len(pod_group) * _CLAIM_BASE // len(base)]}-{claim[: len(claim) * _CLAIM_BASE // len(base)]}"
    return base + _hash(f"{pod_group}/{claim}").rjust(_GENERATED_SUFFIX, _SAFE_ALPHABET[0])[:_GENERATED_SUFFIX]
