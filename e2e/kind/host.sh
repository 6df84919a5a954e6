#!/usr/bin/env bash
# A Docker engine for Kind on this machine: Debian's docker.io, its dockerd in a network namespace of its own
# (its bridges and iptables rules stay there), with runc-nocap as the default runtime. Everything it owns lives
# under /var/lib/phalanx-kind and /run/phalanx-kind; `down` removes it all.
#   e2e/kind/host.sh up       install docker.io, jq and busybox-static if missing, start dockerd, wait for it
#   e2e/kind/host.sh down     remove every container and network, stop dockerd, delete the namespace and state
#   e2e/kind/host.sh check    fail, naming each, if anything of ours is left (down runs it last)
#   e2e/kind/host.sh env      the line to eval: export DOCKER_HOST=...
#   e2e/kind/host.sh exec CMD run CMD inside the namespace (kubectl reaches Kind's API server on its 127.0.0.1)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NETNS="${PHALANX_KIND_NETNS:-phalanx-kind}"
STATE="${PHALANX_KIND_STATE:-/var/lib/phalanx-kind}"
RUN="${PHALANX_KIND_RUN:-/run/phalanx-kind}"
SOCK="$RUN/docker.sock"
export DOCKER_HOST="unix://$SOCK"
log() { echo "kind/host: $*" >&2; }

in_netns() { nsenter --net="/var/run/netns/$NETNS" "$@"; }

up() {
  [[ $EUID -eq 0 ]] || { log "needs root (dockerd, network namespaces)"; exit 1; }
  # busybox-static: the ranks' and the driver's images are made from its /bin/busybox (dev/phalanx_dev/kind/images.py)
  if ! command -v dockerd >/dev/null || ! command -v jq >/dev/null || [[ ! -x /bin/busybox ]]; then
    log "installing docker.io, jq and busybox-static from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io jq busybox-static >&2
  fi
  mkdir -p "$STATE" "$RUN"
  raise_inotify
  if docker info >/dev/null 2>&1; then log "dockerd already up ($DOCKER_HOST)"; return; fi
  # kind mounts /lib/modules into every node; Docker would create it on the host: make it ours, removed by down
  if [[ ! -e /lib/modules ]]; then mkdir -p /lib/modules && touch "$STATE/created-lib-modules"; fi
  ip netns list | grep -qw "^$NETNS" || ip netns add "$NETNS"
  in_netns ip link set lo up
  install -m 0755 "$here/runc-nocap" "$STATE/runc-nocap"
  # nsenter, not `ip netns exec`: the latter remounts /sys and hides the cgroup mounts dockerd needs
  # niced: every Kind node and pod runs under it, beside whatever else this machine runs
  in_netns setsid nice -n 19 ionice -c3 dockerd \
    --host "$DOCKER_HOST" --pidfile "$RUN/docker.pid" \
    --data-root "$STATE/docker" --exec-root "$RUN/exec" \
    --add-runtime "phalanx-runc=$STATE/runc-nocap" --default-runtime phalanx-runc \
    --cgroup-parent /phalanx-kind --storage-driver overlay2 --log-level warn \
    >"$STATE/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { log "dockerd up: export DOCKER_HOST=$DOCKER_HOST"; return; }
    sleep 1
  done
  log "dockerd did not answer within 60s; its log:"; tail -20 "$STATE/dockerd.log" >&2; exit 1
}

# Every Kind node's kubelet and containerd take inotify instances of the host's root user; two clusters (the demo's
# comparison) pass the kernel's default of 128 and a worker's kubelet dies on "too many open files", its node never
# registered. Kind's known issues ask for 512; down puts the value it found back.
INOTIFY=/proc/sys/fs/inotify/max_user_instances
raise_inotify() {
  local before; before="$(cat "$INOTIFY")"
  if (( before < 512 )); then
    [[ -f "$STATE/inotify-instances-before" ]] || echo "$before" >"$STATE/inotify-instances-before"
    echo 512 >"$INOTIFY"
    log "fs.inotify.max_user_instances $before -> 512 (put back by down)"
  fi
}

down() {
  if docker info >/dev/null 2>&1; then
    local ids; ids="$(docker ps -aq)"
    [[ -z "$ids" ]] || docker rm -f -v $ids >/dev/null
    docker network prune -f >/dev/null
    docker volume prune -f >/dev/null 2>&1 || true
  fi
  if [[ -f "$RUN/docker.pid" ]]; then
    local pid; pid="$(cat "$RUN/docker.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -0 "$pid" 2>/dev/null && { log "dockerd $pid did not stop; killing it"; kill -9 "$pid"; }
    fi
  fi
  # dockerd's own containerd (and shims) go with it; unmount whatever it left under our directories
  local m
  for m in $(awk -v run="$RUN" -v state="$STATE" 'index($2, run) == 1 || index($2, state) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
  if ip netns list | grep -qw "^$NETNS"; then ip netns delete "$NETNS"; fi
  # the containers' cgroups (every hierarchy, deepest first) once their processes are gone
  find /sys/fs/cgroup/*/phalanx-kind /sys/fs/cgroup/*/docker -depth -type d -exec rmdir {} + 2>/dev/null || true
  [[ -f "$STATE/created-lib-modules" ]] && rmdir /lib/modules 2>/dev/null || true
  if [[ -f "$STATE/inotify-instances-before" ]]; then cat "$STATE/inotify-instances-before" >"$INOTIFY"; fi
  rm -rf "$RUN" "$STATE"
  check
  log "down: no dockerd, namespace $NETNS, $RUN or $STATE left"
}

# What up makes, looked for after down: a process of dockerd's (the daemon, its containerd, a shim), the namespace,
# a mount, a cgroup, a directory
check() {
  local left=() pid
  for pid in $(pgrep -f "$RUN/|phalanx-runc|$STATE/" || true); do
    [[ "$pid" == "$$" ]] || left+=("process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)")
  done
  ip netns list | grep -qw "^$NETNS" && left+=("network namespace $NETNS")
  while read -r m; do left+=("mount $m"); done < <(awk -v run="$RUN" -v state="$STATE" 'index($2, run) == 1 || index($2, state) == 1 {print $2}' /proc/mounts)
  for d in "$RUN" "$STATE" /sys/fs/cgroup/*/phalanx-kind; do [[ -e "$d" ]] && left+=("$d"); done
  if [[ ${#left[@]} -gt 0 ]]; then
    log "left behind:"; printf '  %s\n' "${left[@]}" >&2
    return 1
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check && log "nothing left" ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  exec) shift; in_netns "$@" ;;
  *) echo "usage: $0 up|down|check|env|exec CMD..." >&2; exit 2 ;;
esac
