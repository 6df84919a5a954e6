#!/usr/bin/env bash
# The e2e suite on Kind, for users with Docker: the same manifests (e2e/workloads, manifests/) and the same tests
# (e2e/) as on the local control plane. KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml builds the comparison
# cluster with the 1.37 gates instead. KEEP=1 leaves the cluster running.
# PHALANX_KIND_LOCAL=1: the same on a machine with no Docker and no registry, like the project's (README.md,
# "Kind on this machine"): the cluster of `e2e/kind/cluster.sh up`, dra-example-driver and the operator installed by
# `cluster.sh install` (the chart from the driver's Go module, every image built here and loaded with `kind load
# image-archive`, e2e/install's overlay), kubectl and pytest run inside the Docker engine's network namespace, where
# the API server is published.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
config="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
name="$(awk '/^name:/ {print $2}' "$config")"
image="phalanx:e2e"
local_kind="${PHALANX_KIND_LOCAL:-0}"
if [[ "$local_kind" == 1 ]]; then
  bins="$("$root/e2e/kind/build-bins.sh" | tail -1)"
  eval "$("$root/e2e/kind/host.sh" env)"
  in_ns() { "$root/e2e/kind/host.sh" exec "$@"; }
  kind() { "$bins/kind" "$@"; }
  kubectl() { in_ns "$bins/kubectl" "$@"; }
  kubectl_path="$bins/kubectl"
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
  KIND_CONFIG="$config" "$root/e2e/kind/cluster.sh" install
else
  kubeconfig="$(mktemp -t phalanx-kind-XXXX.kubeconfig)"
  cleanup() { case "${KEEP:-}" in 1|true) echo "e2e/kind: cluster $name left running (KUBECONFIG=$kubeconfig)" ;; *) kind delete cluster --name "$name" ;; esac; }
  trap cleanup EXIT
  kind create cluster --config "$config" --kubeconfig "$kubeconfig"
fi
export KUBECONFIG="$kubeconfig"
if [[ "$local_kind" != 1 ]]; then
  helm install dra-example-driver oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver \
    --version 0.4.0 -n dra-example-driver --create-namespace -f "$root/e2e/kind/dra-example-driver-values.yaml" --wait
  docker build -t "$image" "$root"
  kind load docker-image "$image" --name "$name"
  kubectl apply -f "$root/manifests/namespace.yaml"
  kubectl kustomize "$root/manifests" | sed "s#ghcr.io/phalanx-dev/phalanx:[^ ]*#$image#" | kubectl apply -f -
fi
kubectl -n phalanx-system rollout status deployment/phalanx --timeout=180s
in_ns env PHALANX_E2E_KUBECONFIG="$kubeconfig" KUBECTL="$kubectl_path" "$root/.venv/bin/python" -m pytest "$root/e2e" "$@"
