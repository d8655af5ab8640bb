# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpuserve lab: real containers on rootful podman (runc), no registry needed.

Run with python3 (standard library only):
    lab.py clean     remove every labelled lab container and Hub of every slot (leftovers of a killed run)
    lab.py images    build the images if their recipe changed (cached by recipe hash)
    lab.py up        images + the Proxmox-like host with CT 100 running and its API stand-in on :8006; writes
                     build/lab/inventory.yml and build/lab/pve-api-ca.pem (the API's certificate)
                     (GPUSERVE_LAB_SLOT=N, 1-9: a second lab beside the first, state in build/lab/slotN)
    lab.py down      remove the lab host
    lab.py env       print the variables to export for podman/molecule (CONTAINERS_CONF, the slot's address, Hub, state)

Images: debian12-systemd (mmdebstrap from the machine's own Debian mirror, then podman import) and
pvehost (that + lxc + sshd + the pct stand-in). See tests/lab/README.md.
"""

import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build", "lab")
LABEL = "io.gpuserve.lab=1"
# Two labs may run side by side (make test's two lanes of molecule scenarios): GPUSERVE_LAB_SLOT=1 is a second lab
# host with its own name, address, Hub port and state directory (inventory, API certificate, Hub). Slot 0 is the
# lab as `make lab` and the README know it. The images, the ssh key and the wheels are shared (read only).
SLOT = int(os.environ.get("GPUSERVE_LAB_SLOT", "0") or 0)
if not 0 <= SLOT <= 9:
    sys.exit("lab: GPUSERVE_LAB_SLOT=%s: give 0-9" % SLOT)
SLOT_LABEL = "io.gpuserve.lab.slot=%d" % SLOT
HOST_NAME = "gpuserve-lab-pvehost" + ("-%d" % SLOT if SLOT else "")
# derived from the slot alone: `lab.py env` exports GPUSERVE_LAB_HOST_IP for the scenarios, and an export left in
# a shell must not move another slot's lab onto this address
HOST_IP = "10.88.0.%d" % (200 + SLOT)
GATEWAY = "10.88.0.1"             # podman's default network: where the lab's guests reach the Hub
HUB_PORT = 8091 + SLOT
STATE = BUILD if SLOT == 0 else os.path.join(BUILD, "slot%d" % SLOT)
SUITE = "bookworm"
PACKAGES = ["systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "iproute2", "procps",
            "openssh-server", "sudo", "ca-certificates", "less",
            # logrotate: the sglang_server role's log rotation (Debian's default, priority important)
            "logrotate",
            # PyYAML: the system python3 stands for the SGLang venv in role scenarios, and SGLang reads its
            # --config file (the API key) with yaml.safe_load
            "python3-yaml",
            # Prometheus and its node exporter: the sglang_monitoring role's install in the real scenario (CT 100),
            # the node exporter on the node; not started at boot (the hook below): only where a scenario starts them
            "prometheus", "prometheus-node-exporter"]
# the services the packages above would start in every guest, disabled in the image (the role enables them)
CUSTOMIZE = 'chroot "$1" systemctl disable prometheus.service prometheus-node-exporter.service'

CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""


def log(msg):
    sys.stderr.write("lab: %s\n" % msg)
    sys.stderr.flush()


def setup_env():
    os.makedirs(BUILD, exist_ok=True)
    conf = os.path.join(BUILD, "containers.conf")
    with open(conf, "w") as fh:
        fh.write(CONTAINERS_CONF)
    os.environ["CONTAINERS_CONF"] = conf
    return conf


def run(argv, **kw):
    check = kw.pop("check", True)
    return subprocess.run(argv, check=check, **kw)


def podman(*args, **kw):
    return run(["podman"] + list(args), **kw)


def debian_mirror():
    """The Debian mirror this machine's apt uses (the lab never hard-codes a package host)."""
    if os.environ.get("GPUSERVE_LAB_MIRROR"):
        return os.environ["GPUSERVE_LAB_MIRROR"]
    candidates = ["/etc/apt/sources.list"]
    d = "/etc/apt/sources.list.d"
    if os.path.isdir(d):
        candidates += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    for path in candidates:
        if not os.path.isfile(path):
            continue
        with open(path) as fh:
            for line in fh:
                parts = line.split()
                if path.endswith(".sources") and parts[:1] == ["URIs:"] and len(parts) > 1:
                    if "security" not in parts[1]:
                        return parts[1]
                elif parts[:1] == ["deb"]:
                    uri = [p for p in parts[1:] if not p.startswith("[")][0]
                    if "security" not in uri:
                        return uri
    sys.exit("lab: no Debian mirror found in /etc/apt/sources.list{,.d}: set GPUSERVE_LAB_MIRROR=<url>")


def digest(*parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


# The lab-only CPU-engine profile (inventory/lab/group_vars/sglang_lab_cpu_engine.yml) runs the real SGLang 0.5.9
# in CT 100: sgl-kernel's libraries load libcuda.so.1 even on CPU (Debian's non-free libcuda1, unpacked: never
# installed, no driver behind it) and libnuma.so.1 (main). Fetched once with apt itself from this machine's mirror
# (signed index, checked hashes) into build/lab/cache, where tests/lab/playbooks/stage-cpu-engine.yml takes them.
CPU_ENGINE_DEBS = {"libcuda1": "non-free", "libnuma1": "main"}
CACHE = os.path.join(BUILD, "cache")


def cpu_engine_debs():
    """{package: path of its .deb} in build/lab/cache, downloaded when missing."""
    os.makedirs(CACHE, exist_ok=True)

    def cached(name):
        found = sorted(f for f in os.listdir(CACHE) if f.startswith(name + "_") and f.endswith("_amd64.deb"))
        return os.path.join(CACHE, found[-1]) if found else None

    have = dict((n, cached(n)) for n in CPU_ENGINE_DEBS if cached(n))
    missing = [n for n in CPU_ENGINE_DEBS if n not in have]
    if missing:
        log("fetching %s (.deb, apt from %s)" % (", ".join(missing), debian_mirror()))
        apt = os.path.join(CACHE, "apt")
        for sub in ("lists/partial", "archives/partial", "sources"):
            os.makedirs(os.path.join(apt, sub), exist_ok=True)
        with open(os.path.join(apt, "sources", "lab.sources"), "w") as fh:
            fh.write("Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n"
                     "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
                     % (debian_mirror(), SUITE, " ".join(sorted(set(CPU_ENGINE_DEBS.values())))))
        opts = ["-q", "-o", "Dir::Etc::SourceList=/dev/null", "-o", "Dir::Etc::SourceParts=" + os.path.join(apt, "sources"),
                "-o", "Dir::State::Lists=" + os.path.join(apt, "lists"), "-o", "Dir::Cache=" + apt,
                "-o", "APT::Sandbox::User=root"]
        run(["apt-get"] + opts + ["update"], stdout=subprocess.DEVNULL)
        run(["apt-get"] + opts + ["download"] + missing, cwd=CACHE, stdout=subprocess.DEVNULL)
        for name in missing:
            have[name] = cached(name) or sys.exit("lab: apt-get download %s left no .deb in %s" % (name, CACHE))
    return have


def image_exists(ref):
    return podman("image", "exists", ref, check=False).returncode == 0


def debian_image():
    recipe = "mmdebstrap --variant=minbase --include=%s --customize-hook=%s %s" % (",".join(PACKAGES), CUSTOMIZE, SUITE)
    tag = "localhost/gpuserve-lab/debian12-systemd:%s" % digest(recipe)
    tar = os.path.join(BUILD, "debian12-%s.tar" % tag.rsplit(":", 1)[1])
    if not os.path.exists(tar):
        log("building the Debian 12 rootfs (mmdebstrap, ~1 min)")
        tmp = tar + ".part"
        run(["mmdebstrap", "--quiet", "--format=tar", "--variant=minbase", "--include=" + ",".join(PACKAGES),
             "--customize-hook=" + CUSTOMIZE, SUITE, tmp, debian_mirror()])
        os.rename(tmp, tar)
    if not image_exists(tag):
        log("importing %s" % tag)
        podman("import", "--change", 'CMD ["/sbin/init"]', tar, tag, stdout=subprocess.DEVNULL)
    podman("tag", tag, "localhost/gpuserve-lab/debian12-systemd:latest")
    return tag, tar


def pvehost_image(base):
    src = os.path.join(HERE, "pvehost")
    # shared with the collection and the integration tests: the config parser, the API fake and its schema
    # (the config parser is the package pve's conf.py, standard library only: copied in as pve_conf.py)
    shared = [(os.path.join(ROOT, "plugins", "module_utils", "pve", "conf.py"), "pve_conf.py"),
              (os.path.join(ROOT, "tests", "integration", "pve_fake.py"), "pve_fake.py"),
              (os.path.join(ROOT, "tests", "fixtures", "pve_api", "pve9-lxc.json"), "pve9-lxc.json")]
    files = sorted(os.listdir(src))
    parts = [base]
    for name in files:
        with open(os.path.join(src, name), "rb") as fh:
            parts += [name, fh.read()]
    for path, _name in shared:
        with open(path, "rb") as fh:
            parts.append(fh.read())
    tag = "localhost/gpuserve-lab/pvehost:%s" % digest(*parts)
    if not image_exists(tag):
        log("building %s" % tag)
        ctx = os.path.join(BUILD, "pvehost-context")
        shutil.rmtree(ctx, ignore_errors=True)
        shutil.copytree(src, ctx)
        for path, name in shared:
            shutil.copy(path, os.path.join(ctx, name))
        podman("build", "--quiet", "--network=host", "--build-arg", "BASE=" + base, "-t", tag, "-f",
               os.path.join(ctx, "Containerfile"), ctx, stdout=subprocess.DEVNULL)
    podman("tag", tag, "localhost/gpuserve-lab/pvehost:latest")
    return tag


def clean(every_slot=True):
    """Leftovers of a killed run: every slot's lab hosts and Hubs (`lab.py clean`), or this slot's only (`up`, with
    another slot's lab maybe running beside it)."""
    hub_dirs = [HUB_DIR]
    if every_slot:
        hub_dirs = [os.path.join(BUILD, "hub")] + [os.path.join(BUILD, d, "hub") for d in sorted(os.listdir(BUILD))
                                                   if d.startswith("slot")]
    for hub_dir in hub_dirs:
        hub_stop(hub_dir)
    ids = podman("ps", "-aq", "--filter", "label=" + (LABEL if every_slot else SLOT_LABEL),
                 capture_output=True, text=True).stdout.split()
    if ids:
        log("removing %d labelled lab container(s)" % len(ids))
        remove_containers(ids, stop_timeout=2)
    if not every_slot:       # this slot's name, also on a host started before hosts carried their slot's label
        remove_containers([HOST_NAME], stop_timeout=2)


def remove_containers(names, stop_timeout, attempts=4):
    """podman rm -f, again while it fails: a lab host whose nested containers are still being torn down can fail it
    once (a CI run's destroy of the real scenario, after five real SGLang start-ups, ended with podman's exit 2 and
    nothing else). Each failure is logged with podman's own words; the last one ends the lab command with them."""
    for attempt in range(1, attempts + 1):
        p = podman("rm", "-f", "-t", str(stop_timeout), "--ignore", *names, check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True)
        left = [n for n in names if podman("container", "exists", n, check=False).returncode == 0]
        if p.returncode == 0 and not left:
            return
        log("podman rm -f %s (try %d of %d): exit %d, %s still there: %s" % (
            " ".join(names), attempt, attempts, p.returncode, " ".join(left) or "none", p.stderr.strip()))
        if not left:
            return
        time.sleep(3 * attempt)
    sys.exit("lab: could not remove %s: %s" % (" ".join(left), p.stderr.strip()))


def ssh_key():
    key = os.path.join(BUILD, "id_ed25519")
    if not os.path.exists(key):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuserve-lab", "-f", key])
    return key


def wait_for(what, probe, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if probe():
            return
        time.sleep(0.5)
    sys.exit("lab: %s not ready after %ds (podman logs %s)" % (what, timeout, HOST_NAME))


def ssh_ok(key, *cmd):
    argv = ["ssh", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", "-o", "LogLevel=ERROR", "root@" + HOST_IP,
            " ".join(shlex.quote(c) for c in cmd)]   # ssh hands one string to the remote shell
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def tcp_open(port):
    try:
        with socket.create_connection((HOST_IP, port), timeout=1):
            return True
    except OSError:
        return False


INVENTORY = """# Written by tests/lab/lab.py up: the lab's Proxmox-like host and its CT 100.
all:
  children:
    pve_nodes:
      hosts:
        pvehost:
          ansible_host: {ip}
          ansible_user: root
          ansible_ssh_private_key_file: {key}
          ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
          ansible_python_interpreter: /usr/bin/python3
          # its Proxmox API stand-in (tests/lab/pvehost/pve_api.py), pinned by its own certificate
          pve_container_api_host: {ip}
          pve_container_api_user: root@pam
          pve_container_api_ca_file: {ca}
          pve_container_node: pve-lab
          pve_container_api_password: lab-root-password
    sglang_containers:
      hosts:
        ct100:
          ansible_connection: gpuserve.sglang.pct
          ansible_host: {ip}
          ansible_user: root
          ansible_ssh_private_key_file: {key}
          ansible_host_key_checking: false
          ansible_python_interpreter: /usr/bin/python3
          proxmox_vmid: 100
          gpuserve_node: pvehost
    # the lab-only CPU-engine profile (inventory/lab/group_vars/sglang_lab_cpu_engine.yml): CT 100 runs the real
    # SGLang 0.5.9 on the CPU, not the stand-in
    sglang_lab_cpu_engine:
      hosts:
        ct100:
"""


def site_ca_mount():
    """This machine's CA bundle for the lab's guests: where HTTPS to the package index passes a site proxy
    with its own CA (as here), the guests must trust what the machine trusts, as a site's hosts would."""
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    return ["-v", "%s:/var/lib/gpuserve-lab/site-ca.crt:ro" % bundle] if os.path.isfile(bundle) else []


def up():
    clean(every_slot=False)
    os.makedirs(STATE, exist_ok=True)
    base, tar = debian_image()
    host = pvehost_image(base)
    cpu_engine_debs()
    key = ssh_key()
    log("starting %s at %s" % (HOST_NAME, HOST_IP))
    podman("run", "-d", "--name", HOST_NAME, "--label", LABEL, "--label", SLOT_LABEL, "--hostname", "pve-lab",
           "--privileged", "--cgroupns=private", "--systemd=false", "-e", "container=podman",
           "--stop-signal=SIGRTMIN+3", "--ip", HOST_IP,
           "-v", "%s:/var/lib/gpuserve-lab/rootfs.tar:ro" % tar,
           "-v", "%s.pub:/root/.ssh/authorized_keys:ro" % key,
           *site_ca_mount(),
           host, "/sbin/init", stdout=subprocess.DEVNULL)
    wait_for("sshd on %s" % HOST_IP, lambda: tcp_open(22) and ssh_ok(key, "true").returncode == 0, 90)
    wait_for("CT 100", lambda: ssh_ok(key, "pct", "status", "100").stdout.strip() == "status: running", 90)
    wait_for("python3 in CT 100",
             lambda: ssh_ok(key, "pct", "exec", "100", "--", "python3", "-c", "print(1)").stdout.strip() == "1", 60)
    wait_for("the Proxmox API stand-in on %s:8006" % HOST_IP, lambda: tcp_open(8006), 60)
    ca = os.path.join(STATE, "pve-api-ca.pem")
    with open(ca, "w") as fh:
        fh.write(ssh_ok(key, "cat", "/etc/gpuserve-lab/pve-api/cert.pem").stdout)
    hub_start()
    inv = os.path.join(STATE, "inventory.yml")
    with open(inv, "w") as fh:
        fh.write(INVENTORY.format(ip=HOST_IP, key=key, ca=ca))
    log("up: inventory %s" % inv)


HUB_DIR = os.path.join(STATE, "hub")
OLAH = os.path.join(ROOT, ".venv-hub", "bin", "olah-cli")


def hub_stop(hub_dir=HUB_DIR):
    try:
        with open(os.path.join(hub_dir, "hub.json")) as fh:
            pid = json.load(fh)["pid"]
        os.kill(pid, signal.SIGTERM)
        log("stopped the local Hub (pid %d)" % pid)
        for _wait in range(50):        # gone (and its port free) before anything starts another
            time.sleep(0.1)
            os.kill(pid, 0)
    except (OSError, ValueError, KeyError):
        pass
    shutil.rmtree(hub_dir, ignore_errors=True)


def hub_start():
    """The lab's Hugging Face Hub (tests/lab/local_hub.py: olah + front) on the podman gateway, where CT 100
    reaches it through the host's NAT; serves gpuserve-lab/Llama-3.1-8B-Instruct for role hf_model."""
    hub_stop()
    if not os.path.exists(OLAH):
        log("no local Hub: %s is missing (tests/ci/bootstrap.sh installs it)" % OLAH)
        return None
    probe = socket.socket()
    probe.settimeout(2)
    try:
        # each slot has one fixed port: a Hub another checkout's lab of this slot left running holds it (say so, rather
        # than waiting a minute for ours to come up)
        if probe.connect_ex((GATEWAY, HUB_PORT)) == 0:
            sys.exit("lab: %s:%d is already served - another lab of slot %d (a second checkout's `lab.py up`) is "
                     "running; run `python3 tests/lab/lab.py down` there first, or use another GPUSERVE_LAB_SLOT"
                     % (GATEWAY, HUB_PORT, SLOT))
    finally:
        probe.close()
    os.makedirs(HUB_DIR)
    with open(os.path.join(HUB_DIR, "serve.log"), "w") as out:
        subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "lab", "local_hub.py"), "serve", "--workdir", HUB_DIR,
                          "--olah", OLAH, "--bind", GATEWAY, "--port", str(HUB_PORT)],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    state = os.path.join(HUB_DIR, "hub.json")
    wait_for("the local Hub on %s:%d" % (GATEWAY, HUB_PORT), lambda: os.path.exists(state), 60)
    with open(state) as fh:
        hub = json.load(fh)
    log("local Hub at %s (%s@%s)" % (hub["endpoint"], hub["repo_id"], hub["revision"][:12]))
    return hub


def down():
    hub_stop()
    remove_containers([HOST_NAME], stop_timeout=5)


def main(argv):
    setup_env()
    cmd = argv[0] if argv else "up"
    if cmd == "clean":
        clean()
    elif cmd == "images":
        debian_image()
        pvehost_image(debian_image()[0])
        cpu_engine_debs()
    elif cmd == "up":
        up()
    elif cmd == "down":
        down()
    elif cmd == "env":
        # what the molecule scenarios read for this slot's lab (tests/lab/molecule/base.yml)
        print("export CONTAINERS_CONF=%s GPUSERVE_LAB_SLOT=%d GPUSERVE_LAB_HOST_IP=%s GPUSERVE_LAB_STATE=%s "
              "GPUSERVE_LAB_HUB=http://%s:%d" % (os.environ["CONTAINERS_CONF"], SLOT, HOST_IP, STATE, GATEWAY, HUB_PORT))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
