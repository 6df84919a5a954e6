#!/usr/bin/env bash
# The e2e suite on Kind, for users with Docker: the same manifests (e2e/workloads, manifests/) and the same tests
# (e2e/) as on the local control plane. KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml builds the comparison
# cluster with the 1.37 gates instead. KEEP=1 leaves the cluster running.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
config="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
name="$(awk '/^name:/ {print $2}' "$config")"
image="phalanx:e2e"
kubeconfig="$(mktemp -t phalanx-kind-XXXX.kubeconfig)"
for tool in docker kind helm kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e/kind: $tool is not installed; this path needs Docker, kind, helm and kubectl" >&2; exit 1; }
done
if kind get clusters | grep -qx "$name"; then
  echo "e2e/kind: Kind cluster $name already exists; delete it (kind delete cluster --name $name) or set KIND_CONFIG" >&2
  exit 1
fi
cleanup() { case "${KEEP:-}" in 1|true) echo "e2e/kind: cluster $name left running (KUBECONFIG=$kubeconfig)" ;; *) kind delete cluster --name "$name" ;; esac; }
trap cleanup EXIT
kind create cluster --config "$config" --kubeconfig "$kubeconfig"
export KUBECONFIG="$kubeconfig"
helm install dra-example-driver oci://registry.k8s.io/dra-example-driver/charts/dra-example-driver \
  --version 0.4.0 -n dra-example-driver --create-namespace -f "$root/e2e/kind/dra-example-driver-values.yaml" --wait
docker build -t "$image" "$root"
kind load docker-image "$image" --name "$name"
kubectl apply -f "$root/manifests/namespace.yaml"
kubectl kustomize "$root/manifests" | sed "s#ghcr.io/phalanx-dev/phalanx:[^ ]*#$image#" | kubectl apply -f -
kubectl -n phalanx-system rollout status deployment/phalanx --timeout=180s
PHALANX_E2E_KUBECONFIG="$kubeconfig" KUBECTL="$(command -v kubectl)" "$root/.venv/bin/python" -m pytest "$root/e2e" "$@"
