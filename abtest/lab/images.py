"""The lab's images, built locally from busybox-static: no registry is ever contacted.

An OCI image layout (one uncompressed layer, a config, a manifest) is written as an
oci-archive and imported with the lab's own `ctr -n k8s.io images import` (the client of the
containerd it built; no other containerd's ctr is needed on the machine).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from abtest.errors import LabError
from abtest.lab import layout

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The sandbox ("pause") container must sit still and exit on SIGTERM; PID 1 ignores
# signals without a handler, hence the trap.
PAUSE_CMD = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def _rootfs_layer(busybox: Path) -> bytes:
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "usr", "usr/bin"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in sorted(set(applets.stdout.split())):
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "/bin/busybox"
            tar.addfile(link)
        for name, text in {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
            "etc/group": "root:x:0:\n",
        }.items():
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return digest


def write_oci_archive(out: Path, ref: str, layer: bytes, cmd: list[str]) -> None:
    with tarfile.open(out, mode="w") as tar:
        layer_digest = _blob(tar, layer)
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [PATH_ENV], "Cmd": cmd},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        }
        config_raw = json.dumps(config).encode()
        config_digest = _blob(tar, config_raw)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": f"sha256:{config_digest}",
                "size": len(config_raw),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": f"sha256:{layer_digest}",
                    "size": len(layer),
                }
            ],
        }
        manifest_raw = json.dumps(manifest).encode()
        manifest_digest = _blob(tar, manifest_raw)
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": f"sha256:{manifest_digest}",
                    "size": len(manifest_raw),
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                    },
                }
            ],
        }
        for name, obj in (("index.json", index), ("oci-layout", {"imageLayoutVersion": "1.0.0"})):
            raw = json.dumps(obj).encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def import_images(paths: layout.Paths, node: layout.Node | None = None) -> None:
    """Import both images into `node`'s containerd (default node 1): each node has its own."""
    node = node or layout.Node(1, paths)
    import_archives(paths, node.containerd_socket)


def import_archives(paths: layout.Paths, containerd_socket: Path) -> None:
    """Import both images into the containerd listening on `containerd_socket`."""
    layer = _rootfs_layer(Path("/bin/busybox"))
    ctr = [str(paths.bin / "ctr"), "--address", str(containerd_socket), "-n", "k8s.io"]
    for ref, cmd in ((layout.BUSYBOX_IMAGE, ["sh"]), (layout.PAUSE_IMAGE, PAUSE_CMD)):
        archive = paths.root / "images" / (ref.rsplit("/", 1)[1].replace(":", "_") + ".tar")
        write_oci_archive(archive, ref, layer, cmd)
        proc = subprocess.run(
            [*ctr, "images", "import", str(archive)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise LabError(f"importing {ref} failed: {proc.stderr.strip()}")
        listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True)
        if ref not in listed.stdout.split():
            raise LabError(f"imported {archive} but {ref} is not listed by containerd")
