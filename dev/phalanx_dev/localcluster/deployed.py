"""The operator as a user installs it: its image, loaded into the real nodes, and `kubectl apply -k`.

No registry: the image the `Dockerfile` describes is built here (`images`),
imported into every real node's containerd, and the overlay in
`e2e/install/` changes only its name and pull policy. Everything else is
`manifests/` as it ships: two replicas behind the webhook Service, the
generated TLS Secret, the leader Lease, the PodDisruptionBudget.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

from phalanx_dev.localcluster import images, realnodes
from phalanx_dev.localcluster.cluster import LocalCluster, cache_dir, node_binaries

NAMESPACE = "phalanx-system"
DEPLOYMENT = "phalanx"
LEASE = "phalanx-leader"
OVERLAY = Path("e2e") / "install"
SOURCES = (*images.DOCKERFILE_SOURCES, "Dockerfile")


def source_digest(repo: Path) -> str:
    """What the image is made of: a new digest (a new image) whenever a source file changes."""
    digest = hashlib.sha256()
    for item in SOURCES:
        path = repo / item
        for f in sorted(path.rglob("*") if path.is_dir() else [path]):
            if f.is_file() and "__pycache__" not in f.parts:
                digest.update(str(f.relative_to(repo)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


def build_image(repo: Path) -> Path:
    """The operator's OCI archive for this checkout (cached by source digest)."""
    store = cache_dir() / "images"
    store.mkdir(parents=True, exist_ok=True)
    out = store / f"phalanx-{source_digest(repo)}.tar"
    if not out.exists():
        started = time.monotonic()
        # a directory of its own: two checkouts may build at once
        rootfs = images.operator_rootfs(Path(tempfile.mkdtemp(prefix="phalanx-rootfs-", dir=store)) / "rootfs", repo, cache=store)
        images.oci_archive(rootfs, out, name=images.OPERATOR_IMAGE, config=images.dockerfile_config(repo / "Dockerfile"))
        shutil.rmtree(rootfs.parent)
        for old in store.glob("phalanx-*.tar"):
            if old != out and time.time() - old.stat().st_mtime > 3600:  # another checkout's may be in use
                old.unlink(missing_ok=True)
        _log(f"built {images.OPERATOR_IMAGE} in {time.monotonic() - started:.0f}s ({out})")
    return out


def install(cluster: LocalCluster, repo: Path, timeout: float = 180) -> None:
    """Build and load the image, apply the overlay, and wait for both replicas Ready and one of them leading."""
    archive = build_image(repo)
    nodes = realnodes.loaded(cluster.cluster_dir)
    if not nodes:
        raise RuntimeError(f"cluster {cluster.spec.name} has no real nodes to run the operator's pods (`--real-nodes N`)")
    for node in nodes:
        realnodes.import_image(node, archive, node_binaries())
    existed = cluster.kubectl("-n", NAMESPACE, "get", f"deployment/{DEPLOYMENT}", check=False).returncode == 0
    cluster.kubectl("apply", "-k", str(repo / OVERLAY))
    if existed:  # a new image under the same name: pods made before it would go on with the old one
        cluster.kubectl("-n", NAMESPACE, "rollout", "restart", f"deployment/{DEPLOYMENT}")
    wait_ready(cluster, timeout)


def wait_ready(cluster: LocalCluster, timeout: float = 180) -> str:
    """Both replicas of the new rollout Ready and the Lease held by one of them; returns the leader's pod name."""
    deadline = time.monotonic() + timeout
    status = cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}", f"--timeout={int(timeout)}s", check=False)
    if status.returncode != 0:
        pods = cluster.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout
        raise TimeoutError(f"deployment/{DEPLOYMENT} not rolled out: {status.stderr.strip()}\n{pods}")
    while True:
        pods = _ready_pods(cluster)
        lease = json.loads(cluster.kubectl("-n", NAMESPACE, "get", "lease", LEASE, "-o", "json", check=False).stdout or "{}")
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder in pods and len(pods) >= 2:
            return holder
        if time.monotonic() > deadline:
            raise TimeoutError(f"lease {LEASE} held by {holder!r}, Ready replicas {pods}")
        time.sleep(0.5)


def uninstall(cluster: LocalCluster, repo: Path) -> None:
    cluster.kubectl("delete", "-k", str(repo / OVERLAY), "--ignore-not-found", "--wait=true", "--timeout=120s", check=False)


def _ready_pods(cluster: LocalCluster) -> list[str]:
    items = json.loads(cluster.kubectl("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=phalanx", "-o", "json").stdout)[
        "items"
    ]
    return [
        p["metadata"]["name"]
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])
    ]


def _log(message: str) -> None:
    print(f"localcluster: {message}", flush=True)
