"""The framework every workload kind plugs into (Kueue's jobframework pattern: the kinds sit beside it, never inside).

A kind (`jobs/`, `jobsets/`, `podgroups/`) is an adapter: it says what its object asks for (a `objects.GangSource`),
how the loop finds and judges its owner (`seam.OwnerKind`, shared in part by `controlling.Controlling`), how admission
changes or refuses it (returning an `admission.Mutation`), and which admission webhooks it needs (`hooks.Hook`).
This package makes the Workload and PodGroup of any kind (`objects`, `controller`), assembles the webhook
configurations (`hooks`) and holds the seam; nothing in it imports a kind. `phalanx.kinds` lists the kinds.
"""
