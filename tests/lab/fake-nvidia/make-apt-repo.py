"""Build a flat apt repository of stand-in NVIDIA packages (empty but for the libnvidia-ml marker).

    python3 make-apt-repo.py <dir> <version> [<version> ...]

Each version gives nvidia-driver, nvidia-kernel-dkms, nvidia-smi, nvidia-persistenced, libnvidia-ml1 and libcuda1
.debs (built with dpkg-deb) and one Packages index, so `deb [trusted=yes] file:<dir> ./` serves them to apt.
Their relations are shaped as Debian's (and NVIDIA's Debian repository's) are, only stricter about versions: the
libraries and tools of one driver depend on each other at exactly that version (an upgrade or a downgrade has to
move them together), nvidia-smi needs NVML (libnvidia-ml1), and libcuda1 recommends the kernel module package
(so a container that installs it without --no-install-recommends would get DKMS). libnvidia-ml1 ships the
libnvidia-ml.so.<version> whose name tells the installed version.
"""
import hashlib
import os
import subprocess
import sys
import tempfile

PACKAGES = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "libnvidia-ml1", "libcuda1")
# name -> (Depends, Recommends), each at this very version
RELATIONS = {
    "nvidia-driver": (("libnvidia-ml1", "libcuda1", "nvidia-kernel-dkms"), ()),
    "nvidia-smi": (("libnvidia-ml1",), ()),
    "libcuda1": ((), ("nvidia-kernel-dkms",)),
}


def build(repo, name, version):
    upstream = version.split("-")[0]
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "DEBIAN"))
        with open(os.path.join(root, "DEBIAN", "control"), "w") as fh:
            depends, recommends = RELATIONS.get(name, ((), ()))
            fh.write("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: gpuserve lab <lab@invalid>\n"
                     % (name, version))
            for field, names in (("Depends", depends), ("Recommends", recommends)):
                if names:
                    fh.write("%s: %s\n" % (field, ", ".join("%s (= %s)" % (n, version) for n in names)))
            fh.write("Description: gpuserve lab stand-in for %s %s\n" % (name, upstream))
        marker = {"libnvidia-ml1": "libnvidia-ml.so.%s", "libcuda1": "libcuda.so.%s"}.get(name)
        if marker:
            lib = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
            os.makedirs(lib)
            open(os.path.join(lib, marker % upstream), "w").close()
        if name == "nvidia-persistenced":   # the real package ships its unit
            units = os.path.join(root, "lib", "systemd", "system")
            os.makedirs(units)
            with open(os.path.join(units, "nvidia-persistenced.service"), "w") as fh:
                fh.write("[Unit]\nDescription=NVIDIA Persistence Daemon (lab stand-in)\nConditionPathExists=/dev/nvidiactl\n\n"
                         "[Service]\nType=oneshot\nExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\n")
        deb = os.path.join(repo, "%s_%s_all.deb" % (name, version))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-b", root, deb], check=True, stdout=subprocess.DEVNULL)
    return deb


def stanza(repo, deb):
    control = subprocess.run(["dpkg-deb", "-f", deb], check=True, capture_output=True, text=True).stdout
    with open(deb, "rb") as fh:
        data = fh.read()
    rel = os.path.relpath(deb, repo)
    return "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n" % (control, rel, len(data), hashlib.sha256(data).hexdigest())


def main(repo, versions):
    os.makedirs(repo, exist_ok=True)
    index = "".join(stanza(repo, build(repo, name, v)) for v in versions for name in PACKAGES)
    with open(os.path.join(repo, "Packages"), "w") as fh:
        fh.write(index)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
