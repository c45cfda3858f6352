"""The systemd node's root filesystem: Debian bookworm from Debian's packages (debootstrap),
built once at the first `lab up --systemd-node` and cached under ~/.cache/abtest/.

The image holds what a kubeadm node's OS holds (systemd as PID 1, dbus, sshd, sudo, mount,
iptables, a wget for the healthz probe) and nothing of Kubernetes: the kubelet, containerd,
runc, crictl and the CNI plugins are the lab's own binaries, laid in per node (sdnode.py),
so the image does not change with the lab's release. Its cache key is the suite, the package
list and IMAGE_REVISION, so a change to any of them builds a new image beside the old one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from abtest.errors import LabError
from abtest.lab.binaries import cache_root
from abtest.lab.build_lock import build_lock
from abtest.lab.build_progress import log_time
from abtest.lab.layout import Say

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# Beyond debootstrap's minbase: what the node needs to boot (systemd, dbus), be reached
# (openssh-server, sudo), run containers (iptables, kmod, procps for the kubelet's helpers)
# and answer the health probe (wget: health.py uses curl, wget or busybox wget).
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "sudo",
    "iproute2",
    "iptables",
    "kmod",
    "procps",
    "wget",
    "ca-certificates",
)
# Bump when the post-install steps below change (it is part of the cache key).
IMAGE_REVISION = 1
SSH_USER = "abtest"
# Units a container never needs: a console login, timers that fetch or scrub, and the
# network configuration the lab does itself (the veth is configured before the boot).
MASKED_UNITS = (
    "console-getty.service",
    "getty@.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-networkd.service",
    "systemd-networkd-wait-online.service",
    "networking.service",
)
# Host programs the build needs (Debian packages named in scripts/bootstrap).
BUILD_TOOLS = {
    "debootstrap": "/usr/sbin/debootstrap",
    "systemd-container": "/usr/bin/systemd-nspawn",
}


def image_key() -> str:
    spec = json.dumps([SUITE, sorted(PACKAGES), IMAGE_REVISION, sorted(MASKED_UNITS)])
    return f"{SUITE}-{hashlib.sha256(spec.encode()).hexdigest()[:12]}"


def image_dir() -> Path:
    return cache_root() / "systemd-node" / image_key()


def rootfs() -> Path:
    """The cached root filesystem (complete only when image_ready())."""
    return image_dir() / "rootfs"


def image_ready() -> bool:
    return (image_dir() / "complete").is_file()


def missing_tools() -> list[str]:
    return [pkg for pkg, path in BUILD_TOOLS.items() if not Path(path).exists()]


def ensure_image(say: Say) -> Path:
    """The cached rootfs, built first when missing. A half-built image (an interrupted
    build) is never used: it is removed and built again."""
    if image_ready():
        return rootfs()
    # a build of its own at a time: another one's half-built image is not ours to remove
    with build_lock(cache_root(), say, "systemd-node-image"):
        if not image_ready():
            _build_image(say)
    return rootfs()


def _build_image(say: Say) -> None:
    missing = missing_tools()
    if missing:
        raise LabError(
            f"the systemd node needs the Debian packages {', '.join(missing)}: "
            f"run `apt-get install {' '.join(missing)}` (scripts/bootstrap installs them)"
        )
    work = image_dir()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    say(f"building the systemd node's image ({SUITE}, debootstrap; once, cached in {work})")
    t0 = time.monotonic()
    log = work / "build.log"
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(rootfs()),
        MIRROR,
    ]
    with log.open("w") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise LabError(f"debootstrap failed (exit {proc.returncode}); {log} ends:\n{tail}")
    _post_install(rootfs())
    took = time.monotonic() - t0
    (work / "complete").write_text(json.dumps({"build_s": round(took, 1)}) + "\n")
    say(f"  image built in {took:.0f} s ({_size_mib(rootfs())} MiB)")
    log_time("build", "systemd node image", took)


def _post_install(root: Path) -> None:
    """Make the Debian tree a container node's: no machine id or SSH host keys of its own
    (each node gets its own at boot and from the lab), the lab's SSH user with passwordless
    sudo (as the shipped kubeadm profile expects), units a container never needs masked."""
    machine_id = root / "etc" / "machine-id"
    machine_id.write_text("")
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    subprocess.run(
        ["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/sh", SSH_USER],
        check=True,
        capture_output=True,
    )
    subprocess.run(["chroot", str(root), "usermod", "-p", "*", SSH_USER], check=True)
    sudoers = root / "etc" / "sudoers.d" / "abtest"
    sudoers.write_text(f"{SSH_USER} ALL=(root) NOPASSWD: ALL\n")
    os.chmod(sudoers, 0o440)
    for unit in MASKED_UNITS:
        link = root / "etc" / "systemd" / "system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # The apt lists and package cache are not needed at run time (~100 MiB less to copy).
    for cache in (root / "var" / "cache" / "apt", root / "var" / "lib" / "apt" / "lists"):
        for entry in cache.glob("*"):
            if entry.is_file() and entry.name not in ("lock",):
                entry.unlink()


def _size_mib(path: Path) -> int:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True).stdout
    return int(out.split()[0]) if out.split() else 0
