"""Extended resources a DeviceClass serves (DRAExtendedResource): the devices kube-scheduler gives a pod for them.

A pod may ask for `example.com/gpu: 2` in its resources, and a DeviceClass
naming that resource (`extendedResourceName`, or the implicit
`deviceclass.resource.kubernetes.io/<class>`) provides it. kube-scheduler
decides per node (1.37.2, dynamicresources/extendeddynamicresources.go): a
node whose allocatable has the resource serves it by device plugin, as any
extended resource; a node with none (0 or absent) serves it through the
class, with one device request per container (count = the container's
quantity; a short-lived init container reuses what later containers ask and
only the largest rest is asked once), all in one claim it creates itself.

Phalanx cannot write that claim: kube-scheduler refuses a pod whose
extended-resource claim already has requests, and deletes it. So the planner
plans those devices exactly as that claim would ask for them, together with
the pod's own claims, and the plan only records them: kube-scheduler
allocates the claim on the node the member is pinned to.
"""

from __future__ import annotations

from collections.abc import Mapping

from phalanx.planner.model import Claim, Container, DeviceRequest, Member

SUFFIX = "/extended-resources"
"""The planned claim's name is `<pod>/extended-resources`: no ResourceClaim can have it (a slash), so it never meets a real one."""


def mapped(member: Member, extended: Mapping[str, str]) -> tuple[str, ...]:
    """The member's extended resources some DeviceClass serves, by name."""
    return tuple(sorted(r for r, v in member.requests.items() if v > 0 and r in extended))


def claim(member: Member, resources: tuple[str, ...], extended: Mapping[str, str]) -> Claim | None:
    """The claim kube-scheduler would create for `resources` (names in `extended`), or None when it asks for nothing."""
    containers = member.containers or (Container(member.requests),)
    requests: list[DeviceRequest] = []
    for resource in sorted(resources):
        requests.extend(_requests(containers, resource, extended[resource]))
    if not requests:
        return None
    return Claim(
        member.namespace,
        member.name + SUFFIX,
        member.uid + SUFFIX,
        tuple(sorted(requests, key=lambda r: r.name)),
    )


def is_planned(name: str) -> bool:
    return name.endswith(SUFFIX)


def _requests(containers: tuple[Container, ...], resource: str, device_class: str) -> list[DeviceRequest]:
    """One resource's requests: long-lived containers (regular ones and sidecars) each ask for their own; a
    short-lived init container first reuses the requests of long-lived containers after it, and of what is
    left only the largest is asked, once, since init containers run one at a time."""
    long_lived: list[DeviceRequest | None] = [None] * len(containers)
    for i, c in enumerate(containers):
        if not c.init or c.sidecar:
            long_lived[i] = _request(i, c, resource, device_class, [])
    largest: DeviceRequest | None = None
    for i, c in enumerate(containers):
        if c.init and not c.sidecar:
            request = _request(i, c, resource, device_class, long_lived[i:])
            if request is not None and (largest is None or largest.count < request.count):
                largest = request
    return ([largest] if largest is not None else []) + [r for r in long_lived if r is not None]


def _request(
    index: int, container: Container, resource: str, device_class: str, reusable: list[DeviceRequest | None]
) -> DeviceRequest | None:
    """The container's request for `resource`, named `container-<index>-request-<the resource's index among the
    container's sorted request names>`; None when it asks for none, or the reusable requests already cover it."""
    wanted = container.requests.get(resource, 0)
    if wanted <= 0:
        return None
    covered = 0
    for r in reusable:
        if r is not None:
            covered += r.count
            if covered >= wanted:
                return None
    position = sorted(container.requests).index(resource)
    return DeviceRequest(f"container-{index}-request-{position}", device_class, count=wanted - covered)
