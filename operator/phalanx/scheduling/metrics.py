"""Prometheus metrics, with upstream kube-scheduler's names (1.37, pkg/scheduler/metrics) under the `phalanx_` prefix.

Upstream's podgroup and workload-preemption metrics keep their names, labels and
buckets, so a dashboard written for `scheduler_podgroup_*` works on
`phalanx_podgroup_*` with the prefix changed; `profile` is always "phalanx".
The rest are Phalanx's own: reservations, double allocations, disruptions,
and the gauge that must stay 0 (`phalanx_incomplete_group_devices`, see
`scheduling/quorum.py` for its exact definition).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PROFILE = "phalanx"
"""The value of upstream's `profile` label: Phalanx has one."""


def exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Upstream's metrics.ExponentialBuckets."""
    return tuple(start * factor**i for i in range(count))


BUCKETS = exponential(0.001, 2, 15)  # upstream podgroup_scheduling_*_duration_seconds
PREEMPTION_BUCKETS = exponential(0.001, 2, 16)  # upstream preemption_evaluation_duration_seconds
VICTIM_BUCKETS = exponential(1, 2, 11)  # upstream workload_preemption_victims, preemption_workload_disruptions

SCHEDULE_ATTEMPTS = Counter(
    "phalanx_podgroup_schedule_attempts_total",
    "Planning attempts for a pod group, by result: scheduled, unschedulable, waiting_on_preemption (victims chosen), "
    "aborted (reservation undone or gates refused; planned again), error (the plan ran out of time judging devices; "
    "backed off and tried again).",
    ["result", "profile"],
)
ATTEMPT_DURATION = Histogram(
    "phalanx_podgroup_scheduling_attempt_duration_seconds",
    "End-to-end duration of an attempt: plan, reserve, verify, pin and release.",
    ["result", "profile"],
    buckets=BUCKETS,
)
ALGORITHM_DURATION = Histogram(
    "phalanx_podgroup_scheduling_algorithm_duration_seconds", "Time the planner took to decide.", buckets=BUCKETS
)
QUORUM_TO_RELEASE = Histogram(
    "phalanx_podgroup_quorum_to_release_seconds",
    "From the loop first seeing minCount members with their claims to the group's gates lifted (waits for room included).",
    buckets=exponential(0.01, 2, 18),
)
RESERVATIONS = Counter("phalanx_reservations_total", "Gang reservations completed: every device reserved and every member released.")
RESERVED_DEVICES = Counter("phalanx_reserved_devices_total", "Devices whose allocation Phalanx wrote for a released gang.")
CONFLICTS = Counter(
    "phalanx_reservation_conflicts_total",
    "Devices found held by both a Phalanx reservation and another claim (two allocators), by where it was caught.",
    ["stage"],
)
REPAIRS = Counter(
    "phalanx_double_allocations_repaired_total",
    "Double allocations repaired, by action: a released gang torn down (teardown) or a later holder's pod evicted (eviction).",
    ["action"],
)
ROLLBACKS = Counter("phalanx_reservation_rollbacks_total", "Reservations undone before their gang was released.")
RELEASED_PODS = Counter("phalanx_released_pods_total", "Pods whose scheduling gate Phalanx lifted.")
EVICTIONS = Counter("phalanx_evictions_total", "Pods Phalanx took down, by reason (the Event reason on the pod).", ["reason"])
TEARDOWNS = Counter("phalanx_podgroup_teardowns_total", "Released groups torn down as a unit before reaching minCount bound.")
READY_TIMEOUTS = Counter(
    "phalanx_podgroup_ready_timeouts_total",
    "Released gangs torn down because a member was not Ready by the ready deadline (Kueue's PodsReadyTimeout).",
)
HELD_BACK = Counter(
    "phalanx_releases_held_back_total",
    "Plans that fit but were not released: a group ahead in the queue, still waiting, could use the same room now.",
)
RELEASES_UNDER_WAY = Gauge("phalanx_releases_under_way", "Gang releases being written at this moment (at most --release-concurrency).")
RELEASES_OVERLAPPED = Counter(
    "phalanx_releases_overlapped_total", "Gang releases begun while another was still under way (counted as done by the plans meanwhile)."
)
ERRORS = Counter("phalanx_errors_total", "Unexpected errors, by stage; the group is retried with backoff.", ["stage"])
DISRUPTIONS = Counter(
    "phalanx_podgroup_disruptions_total",
    "Members of running groups lost, by disruptionMode and cause (all: the group was taken down).",
    ["mode", "cause"],
)
INCOMPLETE_GROUP_DEVICES = Gauge(
    "phalanx_incomplete_group_devices",
    "Devices allocated to claims of gangs with fewer than minCount members bound or reserved, outside a recorded release "
    "(must stay 0 with disruptionMode all; see scheduling/quorum.py).",
)
PODGROUPS_WAITING = Gauge(
    "phalanx_podgroups_waiting",
    "Gang PodGroups with minCount members ready but not yet released, by the PodGroup's priorityClassName (empty for none); "
    "set every cycle, so it stays current on a quiet cluster (see scheduling/waits.py).",
    ["priority_class"],
)
OLDEST_WAIT = Gauge(
    "phalanx_podgroup_oldest_wait_seconds",
    "Seconds since the oldest of those gangs had its quorum (0: none waits), by priority class.",
    ["priority_class"],
)
HELD_DEVICES = Gauge(
    "phalanx_held_devices",
    "Devices Phalanx keeps from kube-scheduler with DeviceTaintRules, by purpose: head (held for the gang at the head of "
    "the line, see scheduling/headhold.py), nominated (freed by a preemption for its preemptor), held (after a repaired "
    "double allocation).",
    ["purpose"],
)
PREEMPTION_ATTEMPTS = Counter(
    "phalanx_workload_preemption_attempts_total",
    "Gang preemption searches, by result: Success (victims chosen), Unschedulable (no victims help), or GaveUp (a "
    "preemption under way ended at its deadline without its room: an eviction refused, a victim that never stopped).",
    ["result"],
)
PREEMPTION_VICTIMS = Histogram("phalanx_workload_preemption_victims", "Pods evicted by one gang preemption.", buckets=VICTIM_BUCKETS)
PREEMPTION_DISRUPTIONS = Histogram(
    "phalanx_preemption_workload_disruptions",
    "Preemption units taken by one gang preemption (a group in disruptionMode all, or one pod).",
    ["preemptor"],
    buckets=VICTIM_BUCKETS,
)
PREEMPTION_DURATION = Histogram(
    "phalanx_preemption_evaluation_duration_seconds",
    "Time the pure planner took to choose victims, by result.",
    ["preemptor", "result"],
    buckets=PREEMPTION_BUCKETS,
)
PREEMPTION_ATTEMPT_DURATION = Histogram(
    "phalanx_preemption_attempt_duration_seconds",
    "From choosing the victims to the preemptor released on the devices they freed (1 s resolution: the nomination's time).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
SHORT_REPLANNED = Counter(
    "phalanx_short_groups_replanned_total",
    "Groups known short planned again, by why: changed (the group, its claims or priority), or the kind of capacity "
    "freed that it could use (devices, nodes, pods-gone, pods-added, classes, policy, or a node resource's name).",
    ["why"],
)
PASSED_OVER = Counter(
    "phalanx_groups_passed_over_total",
    "Visits to waiting groups a cycle skipped: known short, no write marked them since, nothing they could use freed.",
)
SETTLED_PASSED = Counter(
    "phalanx_settled_gangs_passed_total",
    "Visits to running gangs passed over: no write marked them since their last visit, which had nothing to do.",
)
CYCLES = Counter(
    "phalanx_scheduling_cycles_total",
    "Scheduling cycles, by what woke them: a change a watch delivered, or a timer (a back-off, a deadline, the period).",
    ["woken_by"],
)
CHANGES = Counter(
    "phalanx_watch_changes_total",
    "Watch events that changed what the operator keeps of an object, by resource: each wakes a cycle (many may share one).",
    ["resource"],
)
UNREAD_CHANGES = Counter(
    "phalanx_watch_unread_changes_total",
    "Watch events that changed nothing the operator keeps of an object (a node's heartbeat), by resource: they wake no cycle.",
    ["resource"],
)
RELISTS = Counter(
    "phalanx_watch_relists_total",
    "Informer lists after the first, by resource and reason (expired: the watch's resourceVersion was compacted, 410 Gone).",
    ["resource", "reason"],
)
