#!/usr/bin/env bash
# What a Kind cluster needs on a machine with no image registry, built once from the Go module proxy into a cache
# keyed by version, outside the repository: kind itself, kubeadm, kube-proxy, CoreDNS, crictl, helm and a pause binary;
# the control plane, kubelet, kubectl, etcd and containerd come from dev/phalanx_dev/localcluster/build-kube.sh,
# the project's own build, with real nodes on. The last line printed is the directory (links to those too).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.6}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
OUT="$CACHE/bin/kind-$KIND_VERSION-kube-$KUBE_VERSION"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
log() { echo "kind/build-bins: $*" >&2; }
mkdir -p "$OUT"

# the control plane, kubelet, kubectl, etcd, containerd, containerd-shim-runc-v2, ctr: the project's build (cached, locked)
kube_bin="$(PHALANX_REAL_NODES=1 "$root/dev/phalanx_dev/localcluster/build-kube.sh" | tail -1)"
node_bin="$CACHE/bin/containerd-${CONTAINERD_VERSION:-v2.4.2}"
for b in kubelet kubectl etcd kube-apiserver kube-controller-manager kube-scheduler; do ln -sf "$kube_bin/$b" "$OUT/$b"; done
for b in containerd containerd-shim-runc-v2 ctr; do ln -sf "$node_bin/$b" "$OUT/$b"; done

# A module of our own requiring `module@version` whose tools.go imports the given packages, tidied once.
wrapper() {
  local dir="$1" module="$2" version="$3"; shift 3
  mkdir -p "$dir"
  [[ -f "$dir/go.sum" ]] && return
  (cd "$dir" && rm -f go.mod && go mod init "phalanx.dev/kind/$(basename "$dir")" >/dev/null 2>&1
   { printf '//go:build tools\n\npackage tools\n\nimport (\n'; for p in "$@"; do printf '\t_ "%s"\n' "$p"; done; printf ')\n'; } >tools.go
   go get "$module@$version" >&2 && go mod tidy -e >&2)
}

if [[ ! -x "$OUT/kind" ]]; then
  log "building kind $KIND_VERSION"
  GOBIN="$OUT" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
fi

# kubeadm and kube-proxy: the same wrapper as build-kube.sh's (k8s.io/kubernetes with its staging modules replaced by
# their published versions), a module of its own so the project's stays as it is.
kdir="$CACHE/src/kind-kube-$KUBE_VERSION"
if [[ ! -f "$kdir/go.sum" ]]; then
  mkdir -p "$kdir"
  staging="v0${KUBE_VERSION#v1}"
  (cd "$kdir" && rm -f go.mod && go mod init phalanx.dev/kind/kube >/dev/null 2>&1)
  upstream="$(cd "$kdir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  { echo "require k8s.io/kubernetes $KUBE_VERSION"
    awk '/=> \.\/staging/ {print "replace " $1 " => " $1 " '"$staging"'"}' "$upstream"; } >>"$kdir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kubeadm"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n)\n' >"$kdir/tools.go"
  (cd "$kdir" && go mod tidy -e >&2)
fi
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for b in kubeadm kube-proxy; do
  [[ -x "$OUT/$b" ]] && continue
  log "building $b $KUBE_VERSION"
  (cd "$kdir" && go build -tags selinux,notest -trimpath -ldflags "-s -w $ldflags" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b")
  mv "$OUT/$b.tmp" "$OUT/$b"
done

if [[ ! -x "$OUT/pause" ]]; then
  log "building pause"
  (cd "$here/pause" && go build -trimpath -ldflags "-s -w" -o "$OUT/pause.tmp" .)
  mv "$OUT/pause.tmp" "$OUT/pause"
fi

if [[ ! -x "$OUT/crictl" ]]; then
  log "building crictl $CRICTL_VERSION"
  wrapper "$CACHE/src/crictl-$CRICTL_VERSION" sigs.k8s.io/cri-tools "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
  (cd "$CACHE/src/crictl-$CRICTL_VERSION" && go build -trimpath -ldflags "-s -w" -o "$OUT/crictl.tmp" sigs.k8s.io/cri-tools/cmd/crictl)
  mv "$OUT/crictl.tmp" "$OUT/crictl"
fi

if [[ ! -x "$OUT/coredns" ]]; then
  log "building coredns $COREDNS_VERSION"
  wrapper "$CACHE/src/coredns-$COREDNS_VERSION" github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns
  (cd "$CACHE/src/coredns-$COREDNS_VERSION" && go build -trimpath -ldflags "-s -w" -o "$OUT/coredns.tmp" github.com/coredns/coredns)
  mv "$OUT/coredns.tmp" "$OUT/coredns"
fi
if [[ ! -x "$OUT/helm" ]]; then
  log "building helm $HELM_VERSION"
  wrapper "$CACHE/src/helm-$HELM_VERSION" helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm
  (cd "$CACHE/src/helm-$HELM_VERSION" && go build -trimpath -ldflags "-s -w" -o "$OUT/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$OUT/helm.tmp" "$OUT/helm"
fi
# dra-example-driver's kubelet plugin (the project's build) for the driver's image; its chart is in the same module
ln -sf "$CACHE/bin/dra-example-driver-${DRA_DRIVER_VERSION:-v0.4.0}/dra-example-kubeletplugin" "$OUT/dra-example-kubeletplugin"
log "ready: $OUT"
echo "$OUT"
