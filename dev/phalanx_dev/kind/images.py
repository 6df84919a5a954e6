"""The images `kind load image-archive` puts on the nodes of a Kind cluster built here, as OCI archives.

The same hand-made images as the real-node tier (localcluster.images), named as the manifests and the chart ask:
the operator's (the Dockerfile's image, built by debootstrap and pip from this checkout: phalanx.local/phalanx:dev,
the name e2e/install's overlay sets), the ranks' busybox (Debian's busybox-static, answering to the workloads'
docker.io/library/busybox:1.36 as on the real nodes), and dra-example-driver's (its kubelet plugin, built from the
Go module proxy, on the same busybox tree, under the name and tag its chart asks for).

    python -m phalanx_dev.kind.images --driver-plugin PATH [--driver-image NAME]   # prints one archive a line
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from phalanx_dev.localcluster import deployed, images
from phalanx_dev.localcluster.cluster import cache_dir

REPO = Path(__file__).resolve().parents[3]
BUSYBOX_NAME = "docker.io/library/busybox:1.36"
DRIVER_IMAGE = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.4.0"


def _archive(out: Path, name: str, config: images.ImageConfig, extra: dict[str, Path]) -> Path:
    """A busybox tree with `extra` files (path in the image -> file here) packed as `name`, cached by content."""
    digest = hashlib.sha256(name.encode() + images.BUSYBOX.read_bytes())
    for target, source in sorted(extra.items()):
        digest.update(target.encode() + source.read_bytes())
    archive = out / f"{name.rsplit('/', 1)[-1].replace(':', '-')}-{digest.hexdigest()[:12]}.tar"
    if archive.exists():
        return archive
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=out))
    try:
        root = images.busybox_rootfs(work / "rootfs")
        for target, source in extra.items():
            path = root / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, path)
        images.oci_archive(root, archive, name=name, config=config)
    finally:
        shutil.rmtree(work)
    return archive


def archives(driver_plugin: Path, driver_image: str = DRIVER_IMAGE) -> list[Path]:
    out = cache_dir() / "kind" / "images"
    return [
        deployed.build_image(REPO),
        _archive(out, BUSYBOX_NAME, images.ImageConfig(cmd=("sh",)), {}),
        _archive(
            out,
            driver_image,
            images.ImageConfig(cmd=("dra-example-kubeletplugin",)),
            {"/usr/bin/dra-example-kubeletplugin": driver_plugin.resolve()},
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver-plugin", type=Path, required=True, help="dra-example-kubeletplugin, as built here")
    parser.add_argument("--driver-image", default=DRIVER_IMAGE, help="the name the chart asks for")
    args = parser.parse_args()
    # stdout is the archives, one a line (cluster.sh loads each word): what a build says goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        built = archives(args.driver_plugin, args.driver_image)
    for archive in built:
        print(archive)


if __name__ == "__main__":
    main()
