#!/usr/bin/env bash
# The e2e suite on Kind, for users with Docker: the same manifests (e2e/workloads, manifests/) and the same tests
# (e2e/) as on the local control plane. KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml builds the comparison
# cluster with the 1.37 gates instead. KEEP=1 leaves the cluster running.
# PHALANX_KIND_LOCAL=1: the same on a machine with no Docker and no registry, like the project's (README.md,
# "Kind on this machine"): the cluster of e2e/kind/cluster.sh, the chart from dra-example-driver's Go module, every
# image built here and loaded with `kind load image-archive`, the operator installed by e2e/install's overlay, and
# helm, kubectl and pytest run inside the Docker engine's network namespace, where the API server is published.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
config="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
name="$(awk '/^name:/ {print $2}' "$config")"
image="phalanx:e2e"
local_kind="${PHALANX_KIND_LOCAL:-0}"
chart="oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver"
chart_version=(--version 0.4.0)
if [[ "$local_kind" == 1 ]]; then
  bins="$("$root/e2e/kind/build-bins.sh" | tail -1)"
  eval "$("$root/e2e/kind/host.sh" env)"
  in_ns() { "$root/e2e/kind/host.sh" exec "$@"; }
  kind() { "$bins/kind" "$@"; }
  helm() { in_ns "$bins/helm" "$@"; }
  kubectl() { in_ns "$bins/kubectl" "$@"; }
  kubectl_path="$bins/kubectl"
  # the chart as the module holds it (version 0.0.0-dev, appVersion v0.4.0: the published chart 0.4.0's templates)
  chart="$(cd "$root/e2e/kind" && GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/dra-example-driver@v0.4.0 |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/deployments/helm/dra-example-driver"
  chart_version=()
  "$root/e2e/kind/host.sh" up
else
  for tool in docker kind helm kubectl; do
    command -v "$tool" >/dev/null || { echo "e2e/kind: $tool is not installed; this path needs Docker, kind, helm and kubectl" >&2; exit 1; }
  done
  kubectl_path="$(command -v kubectl)"
  in_ns() { "$@"; }
fi
if kind get clusters | grep -qx "$name"; then
  echo "e2e/kind: Kind cluster $name already exists; delete it (kind delete cluster --name $name) or set KIND_CONFIG" >&2
  exit 1
fi
if [[ "$local_kind" == 1 ]]; then
  kubeconfig="$(KIND_CONFIG="$config" "$root/e2e/kind/cluster.sh" kubeconfig)"
  # without KEEP, nothing is left: the cluster, and the Docker engine with its namespace (host.sh down)
  cleanup() { case "${KEEP:-}" in 1|true) echo "e2e/kind: cluster $name left running (e2e/kind/cluster.sh kubectl ...; KUBECONFIG=$kubeconfig inside namespace phalanx-kind)" ;; *) KIND_CONFIG="$config" "$root/e2e/kind/cluster.sh" down ;; esac; }
  trap cleanup EXIT
  KIND_CONFIG="$config" "$root/e2e/kind/cluster.sh" up
else
  kubeconfig="$(mktemp -t phalanx-kind-XXXX.kubeconfig)"
  cleanup() { case "${KEEP:-}" in 1|true) echo "e2e/kind: cluster $name left running (KUBECONFIG=$kubeconfig)" ;; *) kind delete cluster --name "$name" ;; esac; }
  trap cleanup EXIT
  kind create cluster --config "$config" --kubeconfig "$kubeconfig"
fi
export KUBECONFIG="$kubeconfig"
if [[ "$local_kind" == 1 ]]; then
  # the operator's, the ranks' busybox and the driver's image, before the chart waits for the driver's pods
  for archive in $(nice -n 19 ionice -c3 "$root/.venv/bin/python" -m phalanx_dev.kind.images --driver-plugin "$bins/dra-example-kubeletplugin"); do
    kind load image-archive "$archive" --name "$name"
  done
fi
helm install dra-example-driver "$chart" "${chart_version[@]}" \
  -n dra-example-driver --create-namespace -f "$root/e2e/kind/dra-example-driver-values.yaml" --wait
kubectl apply -f "$root/manifests/namespace.yaml"
if [[ "$local_kind" == 1 ]]; then
  kubectl apply -k "$root/e2e/install"
else
  docker build -t "$image" "$root"
  kind load docker-image "$image" --name "$name"
  kubectl kustomize "$root/manifests" | sed "s#ghcr.io/phalanx-dev/phalanx:[^ ]*#$image#" | kubectl apply -f -
fi
kubectl -n phalanx-system rollout status deployment/phalanx --timeout=180s
in_ns env PHALANX_E2E_KUBECONFIG="$kubeconfig" KUBECTL="$kubectl_path" "$root/.venv/bin/python" -m pytest "$root/e2e" "$@"
