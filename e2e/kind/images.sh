#!/usr/bin/env bash
# The images a Kind cluster runs on this machine, built here (no registry is reachable), into the Docker engine
# of host.sh (DOCKER_HOST):
#   phalanx.local/kind-rootfs:bookworm   Debian bookworm by debootstrap (cached as a tarball), imported
#   phalanx.local/kind-base:bookworm-*  + systemd units, containerd 2, crictl, the entrypoint (e2e/kind/base)
#   registry.k8s.io/...                  kube-apiserver, kube-controller-manager, kube-scheduler, etcd, CoreDNS and
#                                        pause from the static binaries of build-bins.sh; kube-proxy on the rootfs
#                                        (it needs iptables); the names and tags kubeadm v1.37.2 asks for
#   phalanx.local/kind-cni:v1            the pod network (e2e/kind/cni), in place of kindnetd
#   phalanx.local/kind-node:v1.37.2      the node: the base with kubeadm, kubelet and kubectl, /kind/version,
#                                        /kind/manifests/default-cni.yaml, and every image above already in its
#                                        containerd (pinned), as `kind build node-image` would leave it
# Prints the node image's name last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
NODE_IMAGE="${NODE_IMAGE:-phalanx.local/kind-node:$KUBE_VERSION}"
ROOTFS_IMAGE=phalanx.local/kind-rootfs:bookworm
# the base and the node are rebuilt when their files here change
source_hash="$(cd "$here" && cat base/* cni/* images.sh | sha256sum | cut -c1-12)"
BASE_IMAGE="phalanx.local/kind-base:bookworm-$source_hash"
CNI_IMAGE=phalanx.local/kind-cni:v1
export DOCKER_HOST="${DOCKER_HOST:-unix:///run/phalanx-kind/docker.sock}"
log() { echo "kind/images: $*" >&2; }
bins="$("$here/build-bins.sh" | tail -1)"
work="$(mktemp -d -t phalanx-kind-images-XXXX)"
build_container=""
cleanup() { [[ -z "$build_container" ]] || docker rm -f -v "$build_container" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
have() { docker image inspect "$1" >/dev/null 2>&1; }

# 1. the rootfs: Debian's packages for a node (systemd, runc, iptables, nftables, the CNI plugins, ...)
rootfs_tar="$CACHE/kind/rootfs-bookworm.tar"
if [[ ! -f "$rootfs_tar" ]]; then
  log "debootstrap bookworm (a few minutes)"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2
  mkdir -p "$CACHE/kind" && rm -rf "$CACHE/kind/rootfs"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,runc,iptables,nftables,iproute2,ethtool,conntrack,socat,util-linux,mount,kmod,procps,libseccomp2,containernetworking-plugins,ca-certificates,ebtables,pigz,jq,curl,ipset \
    bookworm "$CACHE/kind/rootfs" http://deb.debian.org/debian >&2
  tar -C "$CACHE/kind/rootfs" -cf "$rootfs_tar.tmp" . && mv "$rootfs_tar.tmp" "$rootfs_tar"
  rm -rf "$CACHE/kind/rootfs"
fi
have "$ROOTFS_IMAGE" || { log "importing $ROOTFS_IMAGE"; docker import "$rootfs_tar" "$ROOTFS_IMAGE" >/dev/null; }

# 2. the base
if ! have "$BASE_IMAGE"; then
  log "building $BASE_IMAGE"
  mkdir -p "$work/base/bin"
  cp "$here"/base/* "$work/base/"
  for b in containerd containerd-shim-runc-v2 ctr crictl; do cp -L "$bins/$b" "$work/base/bin/"; done
  docker build -q --build-arg "ROOTFS=$ROOTFS_IMAGE" -t "$BASE_IMAGE" "$work/base" >/dev/null
fi

# 3. the images the node's containerd holds: name, then the Dockerfile's lines (BIN is the binary's directory)
image() {
  local name="$1" dockerfile="$2"; shift 2
  have "$name" && return
  log "building $name"
  local dir="$work/$(echo "$name" | tr '/:' '__')"
  mkdir -p "$dir"
  local b; for b in "$@"; do cp -L "$bins/$b" "$dir/"; done
  printf '%s\n' "$dockerfile" >"$dir/Dockerfile"
  docker build -q -t "$name" "$dir" >/dev/null
}
static() { # name binary: FROM scratch, the binary on PATH (kubeadm's manifests call it by name)
  image "$1" "FROM scratch
COPY $2 /usr/local/bin/$2
ENV PATH=/usr/local/bin
ENTRYPOINT [\"/usr/local/bin/$2\"]" "$2"
}
images=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  static "registry.k8s.io/$c:$KUBE_VERSION" "$c"; images+=("registry.k8s.io/$c:$KUBE_VERSION")
done
image "registry.k8s.io/kube-proxy:$KUBE_VERSION" "FROM $ROOTFS_IMAGE
COPY kube-proxy /usr/local/bin/kube-proxy" kube-proxy
images+=("registry.k8s.io/kube-proxy:$KUBE_VERSION")
# what kubeadm lists for this version besides the four: etcd, CoreDNS, pause
while read -r ref; do
  case "$ref" in
    */etcd:*) static "$ref" etcd ;;
    */coredns:*) image "$ref" "FROM scratch
COPY coredns /coredns
ENTRYPOINT [\"/coredns\"]" coredns ;;
    */pause:*) image "$ref" "FROM scratch
COPY pause /pause
ENTRYPOINT [\"/pause\"]" pause ;;
    *) continue ;;
  esac
  images+=("$ref")
done < <("$bins/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null)
if ! have "$CNI_IMAGE"; then
  log "building $CNI_IMAGE"
  mkdir -p "$work/cni" && cp "$here/cni/phalanx-kind-cni" "$work/cni/"
  printf 'FROM %s\nCOPY phalanx-kind-cni /usr/local/bin/phalanx-kind-cni\n' "$ROOTFS_IMAGE" >"$work/cni/Dockerfile"
  docker build -q -t "$CNI_IMAGE" "$work/cni" >/dev/null
fi
images+=("$CNI_IMAGE")

# 4. the node: a container of the base, filled, committed
built_from="$(docker image inspect -f '{{index .Config.Labels "dev.phalanx.kind.source"}}' "$NODE_IMAGE" 2>/dev/null || true)"
if [[ "$built_from" == "$source_hash" ]]; then echo "$NODE_IMAGE"; exit 0; fi
log "building $NODE_IMAGE"
build_container="$(docker run -d --entrypoint sleep "$BASE_IMAGE" infinity)"
in_node() { docker exec -i "$build_container" "$@"; }
for b in kubeadm kubelet kubectl; do docker cp -L "$bins/$b" "$build_container:/usr/bin/$b"; done
in_node sh -c "chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl && echo $KUBE_VERSION >/kind/version"
docker cp "$here/cni/default-cni.yaml" "$build_container:/kind/manifests/default-cni.yaml"
in_node sh -c 'containerd >/var/log/containerd-build.log 2>&1 &'
in_node sh -c 'for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1'
for ref in "${images[@]}"; do
  log "loading $ref"
  docker save "$ref" | in_node ctr -n k8s.io images import --label io.cri-containerd.pinned=pinned --no-unpack --digests - >/dev/null
done
in_node ctr -n k8s.io images ls -q >&2
in_node sh -c 'kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-build.log'
docker commit --change "LABEL dev.phalanx.kind.source=$source_hash" --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$build_container" "$NODE_IMAGE" >/dev/null
log "built $NODE_IMAGE"
echo "$NODE_IMAGE"
