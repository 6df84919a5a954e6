"""Prometheus metrics, with upstream's names under the `phalanx_` prefix for drop-in dashboards."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

BUCKETS = tuple(0.001 * 2**i for i in range(15))  # upstream: ExponentialBuckets(0.001, 2, 15)

SCHEDULE_ATTEMPTS = Counter("phalanx_podgroup_schedule_attempts_total", "Planning attempts for a pod group, by result.", ["result"])
ATTEMPT_DURATION = Histogram(
    "phalanx_podgroup_scheduling_attempt_duration_seconds",
    "End-to-end duration of an attempt: plan, reserve, verify, pin and release.",
    ["result"],
    buckets=BUCKETS,
)
ALGORITHM_DURATION = Histogram(
    "phalanx_podgroup_scheduling_algorithm_duration_seconds", "Time the planner took to decide.", buckets=BUCKETS
)
CONFLICTS = Counter(
    "phalanx_reservation_conflicts_total",
    "Devices found held by both a Phalanx reservation and another claim (two allocators), by where it was caught.",
    ["stage"],
)
ROLLBACKS = Counter("phalanx_reservation_rollbacks_total", "Reservations undone before their gang was released.")
RELEASED_PODS = Counter("phalanx_released_pods_total", "Pods whose scheduling gate Phalanx lifted.")
EVICTIONS = Counter("phalanx_evictions_total", "Pods Phalanx took down, by reason (the Event reason on the pod).", ["reason"])
TEARDOWNS = Counter("phalanx_podgroup_teardowns_total", "Released groups torn down as a unit before reaching minCount bound.")
ERRORS = Counter("phalanx_errors_total", "Unexpected errors, by stage; the group is retried with backoff.", ["stage"])
DISRUPTIONS = Counter(
    "phalanx_podgroup_disruptions_total",
    "Members of running groups lost, by disruptionMode and cause (all: the group was taken down).",
    ["mode", "cause"],
)
PREEMPTION_VICTIMS = Histogram(
    "phalanx_preemption_victims", "Pods evicted by one gang preemption.", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
)
PREEMPTION_DURATION = Histogram(
    "phalanx_preemption_search_duration_seconds", "Time the pure planner took to choose victims.", buckets=BUCKETS
)
PREEMPTION_ATTEMPT_DURATION = Histogram(
    "phalanx_preemption_attempt_duration_seconds",
    "From choosing the victims to the preemptor released on the devices they freed (1 s resolution: the nomination's time).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
RELISTS = Counter(
    "phalanx_watch_relists_total",
    "Informer lists after the first, by resource and reason (expired: the watch's resourceVersion was compacted, 410 Gone).",
    ["resource", "reason"],
)
