#!/usr/bin/env bash
# The article's Kind cluster (KIND_CONFIG, e2e/kind/kind.yaml by default), on either kind of machine; only where
# Docker and the images come from differs (e2e/kind/README.md):
#   user   a Docker engine, kind, helm and kubectl at hand (the article's path): the node image the config names
#          (kindest/node:v1.37.0) and dra-example-driver's chart pulled, the operator's image built from Dockerfile
#   local  no Docker engine and no registry (root, Debian, like the project's machine): host.sh's engine in a network
#          namespace, every image built here (images.sh, phalanx_dev.kind.images), kind and helm from build-bins.sh
# PHALANX_KIND_LOCAL=1 asks for local, =0 for user; unset, user when its four tools are at hand and Docker answers.
#   e2e/kind/cluster.sh up           create the cluster (the engine too, on local), wait until every node is Ready
#   e2e/kind/cluster.sh install      dra-example-driver by its chart (2 devices per worker) and the operator (two
#                                    replicas, e2e/install's overlay), its image built and `kind load`ed
#   e2e/kind/cluster.sh install-driver the same without the operator (KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml)
#   e2e/kind/cluster.sh down         delete the cluster (on local, everything host.sh started: every Kind cluster in it)
#   e2e/kind/cluster.sh delete       delete this cluster only (on local, the Docker engine too when no other is left)
#   e2e/kind/cluster.sh demo SCENARIO the article's scenarios on it (deadlock, gang, dra-preempt, preempt [--mode all],
#                                    all, metrics): `phalanx demo SCENARIO --backend kind`, as `BACKEND=kind ./task X` runs
#   e2e/kind/cluster.sh kubectl ...  kubectl against it (on local, inside the namespace, where the API server is
#                                    published on 127.0.0.1)
#   e2e/kind/cluster.sh exec CMD...  CMD where the API server is reached (on local, inside the namespace)
#   e2e/kind/cluster.sh kubeconfig   the kubeconfig's path
#   e2e/kind/cluster.sh kubectl-path the kubectl binary's path
#   e2e/kind/cluster.sh mode         user or local
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
config="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
name="$(awk '/^name:/ {print $2}' "$config")"
log() { echo "kind/cluster: $*" >&2; }
# the chart as the article installs it; on local, the same chart's source from the driver's Go module
DRIVER_CHART=oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver
DRIVER_VERSION=0.4.0
# the operator's image as e2e/install names it (loaded onto the nodes, never pulled)
OPERATOR_IMAGE=phalanx.local/phalanx:dev

case "${PHALANX_KIND_LOCAL:-}" in
  1) mode=local ;;
  0) mode=user ;;
  "")
    mode=user
    for tool in docker kind helm kubectl; do command -v "$tool" >/dev/null || mode=local; done
    [[ $mode == local ]] || docker info >/dev/null 2>&1 || mode=local
    ;;
  *) log "PHALANX_KIND_LOCAL=$PHALANX_KIND_LOCAL: 1 (this machine's kind) or 0 (Docker, kind, helm, kubectl at hand)"; exit 2 ;;
esac

if [[ $mode == local ]]; then
  STATE="${PHALANX_KIND_STATE:-/var/lib/phalanx-kind}"
  eval "$("$here/host.sh" env)"
  bins() { "$here/build-bins.sh" | tail -1; }
  tool() { echo "$(bins)/$1"; }
  in_ns() { "$here/host.sh" exec "$@"; }
else
  STATE="${PHALANX_KIND_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanx/kind}"
  tool() { command -v "$1"; }
  in_ns() { "$@"; }
fi
kubeconfig="$STATE/$name.kubeconfig"
in_ns_kubeconfig() { KUBECONFIG="$kubeconfig" in_ns "$@"; }

up() {
  local kind; kind="$(tool kind)"
  local image=()
  if [[ $mode == local ]]; then
    "$here/host.sh" up
    image=(--image "$(nice -n 19 ionice -c3 "$here/images.sh" | tail -1)")
  fi
  mkdir -p "$STATE"
  if "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
    log "cluster $name exists"
    [[ -s "$kubeconfig" ]] || "$kind" get kubeconfig --name "$name" >"$kubeconfig"
  else
    log "creating cluster $name from $config${image:+ with ${image[1]}}"
    "$kind" create cluster --config "$config" "${image[@]}" --kubeconfig "$kubeconfig" --wait 5m
  fi
  # every node of the config registered first: `wait --all` waits only for those that did (a kubelet that died, as on
  # "too many open files", leaves its node out and the cluster short of workers)
  local want have=0 kubectl; want="$(grep -c '^- role:' "$config")"; kubectl="$(tool kubectl)"
  for _ in $(seq 1 60); do
    have="$(in_ns_kubeconfig "$kubectl" get nodes --no-headers 2>/dev/null | wc -l)"
    (( have >= want )) && break
    sleep 5
  done
  (( have >= want )) || { log "only $have of the $want nodes of $config registered in 5 min"; exit 1; }
  in_ns_kubeconfig "$kubectl" wait --for=condition=Ready nodes --all --timeout=300s
  in_ns_kubeconfig "$kubectl" get nodes -o wide
  log "up: $0 kubectl get pods -A   (KUBECONFIG=$kubeconfig$([[ $mode == local ]] && echo ", inside network namespace phalanx-kind"))"
}

install() {
  install_driver
  local kubectl; kubectl="$(tool kubectl)"
  in_ns_kubeconfig "$kubectl" apply -f "$root/manifests/namespace.yaml"
  in_ns_kubeconfig "$kubectl" apply -k "$root/e2e/install"
  in_ns_kubeconfig "$kubectl" -n phalanx-system rollout status deployment/phalanx --timeout=180s
}

# the images (the operator's too: loading it is cheap) and the driver's chart, without the operator: what the
# comparison cluster (kind-upstream-gang.yaml, the in-tree feature) runs
install_driver() {
  local kind chart archives archive; kind="$(tool kind)"
  if [[ $mode == user ]]; then
    docker build -t "$OPERATOR_IMAGE" "$root"
    "$kind" load docker-image "$OPERATOR_IMAGE" --name "$name"
    chart=("$DRIVER_CHART" --version "$DRIVER_VERSION")
  else
    # the operator's, the ranks' busybox and the driver's image, before the chart waits for the driver's pods (built
    # first: a failure in a `for` list's command substitution would not stop the script, and the chart would wait
    # for pods whose image is missing)
    archives="$(nice -n 19 ionice -c3 "$root/.venv/bin/python" -m phalanx_dev.kind.images --driver-plugin "$(bins)/dra-example-kubeletplugin")"
    for archive in $archives; do
      "$kind" load image-archive "$archive" --name "$name"
    done
    # the chart's source as dra-example-driver's Go module holds it (version 0.0.0-dev, appVersion v0.4.0)
    chart=("$(cd "$here" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/dra-example-driver@v$DRIVER_VERSION" |
      sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/deployments/helm/dra-example-driver")
  fi
  in_ns_kubeconfig "$(tool helm)" upgrade --install dra-example-driver "${chart[@]}" -n dra-example-driver --create-namespace \
    -f "$here/dra-example-driver-values.yaml" --wait
}

delete() {
  if [[ $mode == user ]]; then
    "$(tool kind)" delete cluster --name "$name"
    rm -f "$kubeconfig"
    return
  fi
  if docker info >/dev/null 2>&1; then
    local kind; kind="$(tool kind)"
    "$kind" delete cluster --name "$name"
    rm -f "$kubeconfig"
    if [[ -n "$("$kind" get clusters 2>/dev/null)" ]]; then log "deleted $name; the Docker engine stays for the others"; return; fi
  fi
  "$here/host.sh" down
}

down() {
  if [[ $mode == user ]]; then
    delete
    return
  fi
  if docker info >/dev/null 2>&1; then
    "$(tool kind)" delete cluster --name "$name" || true
  fi
  "$here/host.sh" down
}

case "${1:-}" in
  up) up ;;
  install) install ;;
  install-driver) install_driver ;;
  down) down ;;
  delete) delete ;;
  kubectl) shift; kubectl="$(tool kubectl)"; in_ns "$kubectl" --kubeconfig "$kubeconfig" "$@" ;;
  exec) shift; in_ns "$@" ;;
  kubeconfig) echo "$kubeconfig" ;;
  kubectl-path) tool kubectl ;;
  mode) echo "$mode" ;;
  demo) shift; cd "$root" && exec "$root/.venv/bin/phalanx" demo "$@" --backend kind --workloads e2e/workloads ;;
  *) echo "usage: $0 up|install|install-driver|down|delete|demo SCENARIO|kubectl ARGS...|exec CMD...|kubeconfig|kubectl-path|mode" >&2; exit 2 ;;
esac
