"""Every string key Phalanx reads or writes on Kubernetes objects, spelled once.

Labels, annotations, the scheduling gate, finalizers, condition types and
reasons, field managers: any module that needs one imports it from here.
"""

from __future__ import annotations

GROUP = "scheduling.phalanx.dev"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

ANNOTATION_PREFIX = f"{GROUP}/"

# Job annotations: the portable spelling of the gang intent (see api.intent).
POLICY = f"{GROUP}/policy"
MIN_COUNT = f"{GROUP}/min-count"
DISRUPTION_MODE = f"{GROUP}/disruption-mode"
TOPOLOGY_KEY = f"{GROUP}/topology-key"
RESOURCE_CLAIMS = f"{GROUP}/resource-claims"
"""Claims shared by the whole group, as JSON in upstream's shape (`[{"name": ..., "resourceClaimTemplateName": ...}]`)."""
INTENT_ANNOTATIONS = (POLICY, MIN_COUNT, DISRUPTION_MODE, TOPOLOGY_KEY, RESOURCE_CLAIMS)
"""The gang intent: a Job with any of them asks for gang scheduling."""
READY_DEADLINE = f"{GROUP}/ready-deadline"
"""Seconds (or `90s`, `5m`, `1h`; `0` turns it off) a released gang has to get every member Ready, else it is torn
down and admitted again after a back-off; on the Job, copied onto its PodGroup. Default: the operator's --ready-deadline."""
HOLD_AFTER = f"{GROUP}/hold-after"
"""Seconds (or `90s`, `5m`, `1h`; `0` never holds) a gang may wait at the head of the line before the devices its
plan needs are held for it as they free; on the Job, copied onto its PodGroup. Default: the operator's --hold-after."""
JOB_ANNOTATIONS = (*INTENT_ANNOTATIONS, READY_DEADLINE, HOLD_AFTER)
"""The only ANNOTATION_PREFIX keys a Job may carry: Phalanx writes no other onto Jobs, and admission refuses the rest (a typo would run the Job ungated)."""

ROLE_MIN_COUNTS = f"{GROUP}/role-min-counts"
"""On a gang JobSet: each replicated Job a role of its own minimum, as JSON (`{"launcher": 1, "workers": 3}`; a
replicated Job not named needs all its pods): the JobSet's gang is then a CompositePodGroup (`jobsets.roles`)."""
JOBSET_ANNOTATIONS = (*JOB_ANNOTATIONS, ROLE_MIN_COUNTS)
"""The ANNOTATION_PREFIX keys a JobSet may carry: a Job's, and its roles."""

POD_GROUP_ANNOTATIONS = (READY_DEADLINE, HOLD_AFTER)
"""The only ANNOTATION_PREFIX keys a user's PodGroup may carry: its spec says the rest of the gang intent."""

SCHEDULING_GATE = f"{GROUP}/gang"
"""The gate on every gang pod; only Phalanx lifts it, once the whole group is reserved."""

TEMPLATE_LABEL = f"{GROUP}/pod-group-template"
"""On pods: the PodGroup template they belong to (the Job's name is all admission knows; absent with generateName)."""

POD_GROUP_LABEL = f"{GROUP}/pod-group"
"""On pods of any controller (or none): the name of a PodGroup of theirs, in their namespace, that gangs them
(`podgroups`); the pod webhook gates every pod that carries it, and no other."""
COMPOSITE_LABEL = f"{GROUP}/composite-pod-group"
"""Set by the pod webhook on a pod whose PodGroup is a role of a gang CompositePodGroup: the composite's name, the
gang the pod is a member of (`podgroups.owner`)."""
ROLE_LABEL = f"{GROUP}/role"
"""On a child PodGroup Phalanx made for an owner's role, and on the pods of that role (their template's label, set
at admission): the role's name (a JobSet's replicated Job). A pod without it is in the role its pod-group label names."""
COMPOSITE_KIND = "CompositePodGroup"
ROLES = "phalanx:roles"
"""Where a CompositePodGroup, as the loop's group (`scheduling.composites`), carries its roles: ((PodGroup name,
minimum), ...). Never written to the API server."""

PINNED_NODE = f"{GROUP}/node"
"""On pods Phalanx pinned: the node, so a pinned but not yet bound pod is counted there."""

ROLLED_BACK = f"{GROUP}/rolled-back"
"""On gang members still gated: when a leader last undid a release of theirs it took over. The write itself is the
point: it changes the pod's resourceVersion, so a gate lift a deposed leader still has in flight fails."""

EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
"""Upstream's annotation (value "true") on the claim kube-scheduler creates for a pod's extended resources a DeviceClass serves."""

JOB_NAME_LABEL = f"{GROUP}/job-name"
"""On Workloads and PodGroups: the Job they were made for."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The rank of an Indexed Job's pod (a JobSet's Jobs are Indexed too), as the Job controller annotates it."""

POLICY_LABEL = f"{GROUP}/policy"
"""On Workloads and PodGroups: `Gang` or `Basic`, for the POLICY printer column."""

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER_NAME = "phalanx"
"""On objects Phalanx creates for itself (DeviceTaintRules), so a restart finds them."""

HELD_TAINT = f"{GROUP}/held"
"""Device taint (NoSchedule) on a device kube-scheduler lost track of after a double allocation was repaired."""
HELD_DEVICE_ANNOTATION = f"{GROUP}/device"
"""On such a DeviceTaintRule: the device, as driver/pool/device."""
TAINT_PURPOSE_LABEL = f"{GROUP}/purpose"
"""On such a DeviceTaintRule: why the device is kept (double-allocated, nominated, held for the head of the line)."""

JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
"""Set by the Job controller on every pod it creates."""

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
"""Upstream's annotation on a claim made from a template: the pod's (or PodGroup's) entry it was made for."""

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim it allocates; we do the same."""

JOB_TRACKING = "batch.kubernetes.io/job-tracking"
"""The Job controller's finalizer on every pod it creates: it counts a pod that ends (Succeeded, or failed towards
backoffLimit and its pod-failure back-off) only while the pod carries it, and takes it off the pods it removes itself
(a suspended Job's, a scaled-down Job's), which it then never counts. Phalanx takes it off the members it tears down."""
JOB_INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
"""On a pod of a Job with backoffLimitPerIndex: the failures its index counted so far; the Job controller carries it
to the replacement only from a failed pod that kept its tracking finalizer."""

# PodGroup conditions.
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
"""Upstream's: True (terminal) once minCount members are bound."""
DISRUPTION_TARGET = "DisruptionTarget"
"""On a PodGroup: a member was lost (True); on a pod, as upstream: it is being taken down (our reasons, or the API server's)."""
GATED = "PodsGated"
"""Ours: whether the Job's pods carry the gate (False: admitted without the webhook)."""

# Their reasons, as the loop writes them and explain, the controllers and the owners read them.
PENDING = "Pending"
"""Waiting: for quorum, its turn, a back-off, or a reservation undone to be planned again."""
UNSCHEDULABLE = "Unschedulable"
PREEMPTING = "Preempting"
RELEASED = "Released"
"""Reserved and its gates lifted; Scheduled once minCount members are bound."""
SCHEDULED = "Scheduled"
TEARING_DOWN = "TearingDown"
"""A teardown waits for an eviction a disruption budget refused."""
TORN_DOWN = "GangTornDown"
DISRUPTED = "GangDisrupted"
"""Torn down, or (mode single) reported, for a lost member; also the DisruptionTarget reason."""
TEARDOWNS = (DISRUPTED, TORN_DOWN)
"""The reasons of a gang taken down whole, whose owner re-creates the members."""
SUSPENDED = "JobSuspended"
NOT_BOUND = "MemberNotBound"
"""A member released onto its node that kube-scheduler did not bind by the bind deadline: unpinned, devices freed."""
READY_TIMEOUT = "PodsReadyTimeout"
"""Kueue's word for a workload evicted because its pods were not Ready in time."""
DOUBLE_ALLOCATED = "DeviceDoubleAllocated"
BELOW_MIN_COUNT = "BelowMinCount"
"""DisruptionTarget True in disruptionMode single: fewer than minCount members run (or finished)."""
MIN_COUNT_RUNNING = "MinCountRunning"
"""DisruptionTarget False again: minCount members run once more."""
RESERVATION_ROLLED_BACK = "ReservationRolledBack"
"""An Event: a release undone whole (nothing of it kept), the group planned again after a back-off."""
PODS_NOT_GATED = "PodsNotGated"
GATES_LIFTED = "GatesLifted"
"""PodsGated False: the gang's members carry no gate (not admitted through the webhook), or it was lifted."""

# Events on the owner (a Job, a JobSet) and on a PodGroup of its own.
GANG_NOT_ENFORCED = "GangNotEnforced"
"""Members came without the scheduling gate: they are scheduled one by one, as no gang."""
INVALID_GANG_SPEC = "InvalidGangSpec"
WORKLOAD_CREATED = "WorkloadCreated"
POD_GROUP_CREATED = "PodGroupCreated"
MIN_COUNT_UPDATED = "MinCountUpdated"

# Field managers, one per writer of PodGroup status, so server-side apply keeps each one's conditions.
JOB_CONTROLLER = "phalanx-job-controller"
GROUP_CLAIMS_MANAGER = "phalanx-group-claims"
"""Writes status.resourceClaimStatuses: the claims made for the group, as upstream's resourceclaim controller does."""
SCHEDULING_LOOP = "phalanx-release-loop"
