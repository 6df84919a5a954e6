#!/usr/bin/env bash
# The e2e suite on a Kind cluster of its own: the same manifests (e2e/workloads, manifests/) and the same tests (e2e/)
# as on the local control plane. cluster.sh makes the cluster, installs dra-example-driver by its chart and the
# operator (two replicas behind Service-backed webhooks), and runs pytest where the API server is reached; on a
# machine with Docker, kind, helm and kubectl the images are pulled as the article's are, on one with neither Docker
# nor a registry (PHALANX_KIND_LOCAL=1, or found so) every image is built here (README.md, "Kind on this machine").
# KIND_CONFIG=e2e/kind/kind-upstream-gang.yaml builds the comparison cluster with the 1.37 gates instead. KEEP=1
# leaves the cluster running; without it nothing is left (on local, no Docker engine or namespace either).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export KIND_CONFIG="${KIND_CONFIG:-$root/e2e/kind/kind.yaml}"
cluster="$root/e2e/kind/cluster.sh"
# one answer for the whole run, however the machine changes under it (host.sh up installs Docker's CLI)
PHALANX_KIND_LOCAL="$([[ "$("$cluster" mode)" == local ]] && echo 1 || echo 0)"
export PHALANX_KIND_LOCAL
if [[ $PHALANX_KIND_LOCAL == 0 ]]; then
  for tool in docker kind helm kubectl; do
    command -v "$tool" >/dev/null || { echo "e2e/kind: $tool is not installed; this path needs Docker, kind, helm and kubectl (PHALANX_KIND_LOCAL=1 builds everything here instead)" >&2; exit 1; }
  done
fi
name="$(awk '/^name:/ {print $2}' "$KIND_CONFIG")"
if "$cluster" kubectl get --raw /readyz --request-timeout=5s >/dev/null 2>&1; then
  echo "e2e/kind: Kind cluster $name already exists; delete it (e2e/kind/cluster.sh delete) or set KIND_CONFIG" >&2
  exit 1
fi
cleanup() {
  case "${KEEP:-}" in
    1|true) echo "e2e/kind: cluster $name left running (e2e/kind/cluster.sh kubectl ...; KUBECONFIG=$("$cluster" kubeconfig))" ;;
    *) "$cluster" delete ;;
  esac
}
trap cleanup EXIT
"$cluster" up
"$cluster" install
"$cluster" exec env PHALANX_E2E_KUBECONFIG="$("$cluster" kubeconfig)" KUBECTL="$("$cluster" kubectl-path)" \
  "$root/.venv/bin/python" -m pytest "$root/e2e" "$@"
