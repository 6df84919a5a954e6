#!/usr/bin/env bash
# The article's Kind cluster on this machine (no registry): host.sh's Docker engine, the images of images.sh, kind
# from build-bins.sh, and the user's own config (KIND_CONFIG, e2e/kind/kind.yaml by default) with the local node
# image instead of kindest/node.
#   e2e/kind/cluster.sh up           build what is missing, create the cluster, wait until every node is Ready
#   e2e/kind/cluster.sh install      dra-example-driver by its chart (2 devices per worker) and the operator (two
#                                    replicas, e2e/install's overlay), their images built here and `kind load`ed
#   e2e/kind/cluster.sh install-driver the same without the operator (KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml)
#   e2e/kind/cluster.sh down         delete the cluster and everything host.sh started (every Kind cluster in it)
#   e2e/kind/cluster.sh delete       delete this cluster only; the Docker engine too when no other cluster is left
#   e2e/kind/cluster.sh demo SCENARIO the article's scenarios on it (deadlock, gang, dra-preempt, preempt [--mode all],
#                                    all, metrics): `phalanx demo SCENARIO --backend kind`, as `BACKEND=kind ./task X` runs
#   e2e/kind/cluster.sh kubectl ...  kubectl against it (inside the namespace, where the API server is published
#                                    on 127.0.0.1)
#   e2e/kind/cluster.sh kubeconfig   the kubeconfig's path
#   e2e/kind/cluster.sh kubectl-path the kubectl binary's path (built here; run it through host.sh exec)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
config="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
name="$(awk '/^name:/ {print $2}' "$config")"
STATE="${PHALANX_KIND_STATE:-/var/lib/phalanx-kind}"
kubeconfig="$STATE/$name.kubeconfig"
eval "$("$here/host.sh" env)"
log() { echo "kind/cluster: $*" >&2; }
bins() { "$here/build-bins.sh" | tail -1; }

up() {
  "$here/host.sh" up
  local image b; image="$(nice -n 19 ionice -c3 "$here/images.sh" | tail -1)"; b="$(bins)"
  if "$b/kind" get clusters 2>/dev/null | grep -qx "$name"; then
    log "cluster $name exists"
  else
    log "creating cluster $name from $config with $image"
    "$b/kind" create cluster --config "$config" --image "$image" --kubeconfig "$kubeconfig" --wait 5m
  fi
  # every node of the config registered first: `wait --all` waits only for those that did (a kubelet that died, as on
  # "too many open files", leaves its node out and the cluster short of workers)
  local want have=0; want="$(grep -c '^- role:' "$config")"
  for _ in $(seq 1 60); do
    have="$("$here/host.sh" exec "$b/kubectl" --kubeconfig "$kubeconfig" get nodes --no-headers 2>/dev/null | wc -l)"
    (( have >= want )) && break
    sleep 5
  done
  (( have >= want )) || { log "only $have of the $want nodes of $config registered in 5 min"; exit 1; }
  "$here/host.sh" exec "$b/kubectl" --kubeconfig "$kubeconfig" wait --for=condition=Ready nodes --all --timeout=300s
  "$here/host.sh" exec "$b/kubectl" --kubeconfig "$kubeconfig" get nodes -o wide
  log "up: $0 kubectl get pods -A   (KUBECONFIG=$kubeconfig, inside network namespace phalanx-kind)"
}

install() {
  install_driver
  local b; b="$(bins)"
  in_ns_kubeconfig "$b/kubectl" apply -f "$root/manifests/namespace.yaml"
  in_ns_kubeconfig "$b/kubectl" apply -k "$root/e2e/install"
  in_ns_kubeconfig "$b/kubectl" -n phalanx-system rollout status deployment/phalanx --timeout=180s
}

# the images (the operator's too: loading it is cheap) and the driver's chart, without the operator: what the
# comparison cluster (kind-upstream-gang.yaml, the in-tree feature) runs
install_driver() {
  local b chart archives archive; b="$(bins)"
  # the operator's, the ranks' busybox and the driver's image, before the chart waits for the driver's pods (built
  # first: a failure in a `for` list's command substitution would not stop the script, and the chart would wait for
  # pods whose image is missing)
  archives="$(nice -n 19 ionice -c3 "$root/.venv/bin/python" -m phalanx_dev.kind.images --driver-plugin "$b/dra-example-kubeletplugin")"
  for archive in $archives; do
    "$b/kind" load image-archive "$archive" --name "$name"
  done
  # the chart's source as dra-example-driver's Go module v0.4.0 holds it (version 0.0.0-dev, appVersion v0.4.0)
  chart="$(cd "$here" && GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/dra-example-driver@v0.4.0 |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/deployments/helm/dra-example-driver"
  in_ns_kubeconfig "$b/helm" upgrade --install dra-example-driver "$chart" -n dra-example-driver --create-namespace \
    -f "$here/dra-example-driver-values.yaml" --wait
}

in_ns_kubeconfig() { KUBECONFIG="$kubeconfig" "$here/host.sh" exec "$@"; }

delete() {
  if docker info >/dev/null 2>&1; then
    local b; b="$(bins)"
    "$b/kind" delete cluster --name "$name"
    rm -f "$kubeconfig"
    if [[ -n "$("$b/kind" get clusters 2>/dev/null)" ]]; then log "deleted $name; the Docker engine stays for the others"; return; fi
  fi
  "$here/host.sh" down
}

down() {
  if docker info >/dev/null 2>&1; then
    "$(bins)/kind" delete cluster --name "$name" || true
  fi
  "$here/host.sh" down
}

case "${1:-}" in
  up) up ;;
  install) install ;;
  install-driver) install_driver ;;
  down) down ;;
  delete) delete ;;
  kubectl) shift; exec "$here/host.sh" exec "$(bins)/kubectl" --kubeconfig "$kubeconfig" "$@" ;;
  kubeconfig) echo "$kubeconfig" ;;
  kubectl-path) echo "$(bins)/kubectl" ;;
  demo) shift; cd "$root" && exec "$root/.venv/bin/phalanx" demo "$@" --backend kind --workloads e2e/workloads ;;
  *) echo "usage: $0 up|install|install-driver|down|delete|demo SCENARIO|kubectl ARGS...|kubeconfig|kubectl-path" >&2; exit 2 ;;
esac
