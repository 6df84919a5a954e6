"""Container images made on this machine, never pulled: OCI archives that containerd imports.

The real nodes have no registry to pull from. An image here is a root
filesystem directory packed as one layer into an OCI image layout archive,
which `ctr images import` loads under its name; pods use them with
`imagePullPolicy: Never` (or IfNotPresent, which finds them present).

Three images: a pause image for the sandboxes, a busybox image for the ranks
(both from Debian's busybox-static), and the operator's, the image the
repository's `Dockerfile` describes (a Debian root filesystem with its
python3 and `pip install .`), built by debootstrap and a chroot instead of
from a registry's base image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "phalanx.local/pause:3.10"
BUSYBOX_IMAGE = "phalanx.local/busybox:1.35"
OPERATOR_IMAGE = "phalanx.local/phalanx:dev"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the Dockerfile copies into its build.
DOCKERFILE_SOURCES = ("pyproject.toml", "README.md", "operator")
# The pause container only has to hold the sandbox's namespaces and end on SIGTERM (a PID 1 has no default handlers).
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


@dataclass(frozen=True)
class ImageConfig:
    """The part of an OCI image config a Dockerfile sets."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    workdir: str = ""
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    labels: dict[str, str] = field(default_factory=dict)


def oci_archive(rootfs: Path, out: Path, *, name: str, config: ImageConfig) -> str:
    """Pack `rootfs` as a one-layer OCI image layout archive named `name`; returns the manifest digest.

    The layer is written with numeric owners kept and mtimes zeroed, so the same tree gives the same digest.
    """
    layer_tar = _layer(rootfs)
    diff_id = _sha256(layer_tar)
    layer = gzip.compress(layer_tar, mtime=0)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "User": config.user,
            "WorkingDir": config.workdir,
            "Env": list(config.env),
            "Labels": config.labels or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha256(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _sha256(layer), "size": len(layer)}],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    digest = _sha256(manifest_blob)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": manifest["mediaType"],
                "digest": digest,
                "size": len(manifest_blob),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
            }
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with tarfile.open(tmp, "w") as archive:
        _add(archive, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add(archive, "index.json", json.dumps(index).encode())
        for blob in (config_blob, layer, manifest_blob):
            _add(archive, f"blobs/sha256/{_sha256(blob).split(':', 1)[1]}", blob)
    tmp.rename(out)
    return digest


def archive_name(archive: Path) -> str:
    """The image name an archive made by `oci_archive` carries."""
    with tarfile.open(archive) as tar:
        index = tar.extractfile("index.json")
        assert index is not None
        return json.loads(index.read())["manifests"][0]["annotations"]["io.containerd.image.name"]


def busybox_rootfs(root: Path, *, script: str | None = None) -> Path:
    """A root filesystem of Debian's static busybox with its applets linked, and `script` as /pause when given."""
    if not BUSYBOX.exists():
        raise FileNotFoundError(f"{BUSYBOX} is missing: install Debian's busybox-static (apt-get install busybox-static)")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
        (root / d).mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    if script is not None:
        pause = root / "pause"
        pause.write_text(f"#!/bin/sh\n{script}\n")
        pause.chmod(0o755)
    return root


def product_wheels(source: Path, wheels: Path, *, deps: bool = True) -> None:
    """The wheels `pip install .` in the Dockerfile would install (the product's, and with `deps` its dependencies'),
    built from a copy of what the Dockerfile copies: a build in the checkout would leave build/ there, and pack what
    a stale build/ holds."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for item in DOCKERFILE_SOURCES:
            if (source / item).is_dir():
                shutil.copytree(source / item, src / item, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy2(source / item, src / item)
        no_deps = [] if deps else ["--no-deps"]
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", *no_deps, "--wheel-dir", str(wheels), str(src)], check=True)


def operator_rootfs(root: Path, source: Path, *, cache: Path) -> Path:
    """The Dockerfile's image by hand: Debian's python3 from debootstrap (cached), then `pip install` of `source`.

    Needs root (debootstrap and chroot). The base tree is made once per suite and copied; the package is
    installed afresh each time, so the image always carries the working tree's code.
    """
    base = cache / f"debian-{DEBIAN_SUITE}-python3"
    if not (base / "usr" / "bin" / "python3").exists():
        if shutil.which("debootstrap") is None:
            raise FileNotFoundError("debootstrap is missing: install Debian's debootstrap (apt-get install debootstrap)")
        partial = Path(f"{base}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                DEBIAN_SUITE,
                str(partial),
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run([shutil.which("chroot") or "/usr/sbin/chroot", str(partial), "apt-get", "clean"], check=True)
        if base.exists():  # another build made it meanwhile
            shutil.rmtree(partial)
        else:
            partial.rename(base)
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run(["cp", "-a", str(base), str(root)], check=True)
    # the wheels come from this machine's pip (its index and trust settings); the chroot never reaches a network
    wheels = root / "wheels"
    product_wheels(source, wheels)
    venv = "/opt/phalanx"
    chroot = [shutil.which("chroot") or "/usr/sbin/chroot", str(root)]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    subprocess.run([*chroot, "python3", "-m", "venv", venv], check=True, env=env)
    pip = [f"{venv}/bin/pip", "install", "--quiet", "--no-index", "--find-links=/wheels", "--disable-pip-version-check", "phalanx"]
    subprocess.run([*chroot, *pip], check=True, env=env)
    (root / "usr" / "local" / "bin" / "phalanx").symlink_to(f"{venv}/bin/phalanx")
    shutil.rmtree(wheels)
    for junk in ("var/cache/apt", "var/lib/apt/lists", "root/.cache"):
        shutil.rmtree(root / junk, ignore_errors=True)
    return root


def dockerfile_config(dockerfile: Path) -> ImageConfig:
    """USER, WORKDIR and ENTRYPOINT as the Dockerfile sets them, so the hand-built image runs as the published one."""
    user = workdir = ""
    entrypoint: tuple[str, ...] = ()
    for line in dockerfile.read_text().splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "USER":
            user = rest.strip()
        elif word == "WORKDIR":
            workdir = rest.strip()
        elif word == "ENTRYPOINT":
            entrypoint = tuple(json.loads(rest))
    return ImageConfig(entrypoint=entrypoint, user=user, workdir=workdir)


def _layer(rootfs: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(_walk(rootfs)):
            info = archive.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.mtime = 0
            info.uname = info.gname = ""
            if info.isreg():
                with path.open("rb") as f:
                    archive.addfile(info, f)
            else:
                archive.addfile(info)
    return buf.getvalue()


def _walk(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        out.extend(base / d for d in dirnames)
        out.extend(base / f for f in filenames)
    return out


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
