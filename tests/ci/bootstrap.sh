#!/usr/bin/env bash
# Install everything `make test` needs on a fresh Debian 12 machine (root): system packages, the
# locked Python toolchain in .venv, the collections we depend on (from the pinned `ansible` wheel on
# PyPI, Galaxy being unreachable), and ansible-test's pip bootstrap substitute. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
# bundles community.proxmox 1.4.0, ansible.posix 2.1.0: the version tests/ci/locks/ansible-bundle.lock pins by hash
ANSIBLE_BUNDLE_VERSION="$(sed -n 's/^ansible==\([^ ]*\).*/\1/p' tests/ci/locks/ansible-bundle.lock)"

need_apt=()
command -v git >/dev/null || need_apt+=(git)
command -v make >/dev/null || need_apt+=(make)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# the lab: rootful podman with runc (crun fails on this cgroup hybrid), images built by mmdebstrap
# openssl: the PVE API fake's TLS certificate; shellcheck: ansible-test sanity checks the shell scripts
# rsync + sshd: hf_snapshot's source_host tests copy over a real ssh on loopback
for c in podman runc mmdebstrap ssh-keygen newuidmap fuse-overlayfs slirp4netns openssl shellcheck rsync; do
  command -v "$c" >/dev/null || need_apt+=("$c")
done
[ -x /usr/sbin/sshd ] || need_apt+=(sshd)
# logrotate: the sglang_server role's log rotation, run for real by tests/integration/test_logrotate_real.py
[ -x /usr/sbin/logrotate ] || need_apt+=(logrotate)
# chromium: the plan's chart (an SVG) is rendered headless and its pixels checked, tests/integration/test_plan_chart_render.py
command -v chromium >/dev/null || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  pkgs=()
  for c in "${need_apt[@]}"; do
    case "$c" in ssh-keygen) pkgs+=(openssh-client) ;; sshd) pkgs+=(openssh-server) ;; newuidmap) pkgs+=(uidmap) ;; *) pkgs+=("$c") ;; esac
  done
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    echo "bootstrap: please install: ${pkgs[*]}" >&2; exit 1
  fi
fi
# promtool (Debian's prometheus package, its recommends left out): the alert rules are checked and unit-tested by
# tests/integration/test_alert_rules.py
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "bootstrap: please install: prometheus (for promtool)" >&2; exit 1
  fi
fi

# Every venv below is installed from a lock of tests/ci/locks (or the router role's own lock): every package pinned
# with its hash, nothing resolved at install time (tests/ci/lock.sh writes and checks them). After each install,
# tests/ci/locked.py checks the venv holds nothing but its lock's pins (and the interpreter's own pip/setuptools).
locks=tests/ci/locks
install_locked() {   # install_locked VENV BASE_PYTHON LOCK: (re)make VENV from LOCK when the lock or the Python changed
  local venv="$1" base="$2" lock="$3"
  local want
  # the interpreter behind BASE, never a venv's (make puts .venv/bin first on PATH, and the venv is removed below)
  # nor a shim (pyenv's): the same Python gives the same line on every run
  base="$("$base" -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))')"
  want="$(sha256sum "$lock" | cut -d' ' -f1) $base"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    "$base" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes --only-binary :all: -r "$lock"
    echo "$want" > "$venv/.installed"
  fi
  python3 tests/ci/locked.py venv "$venv" "$lock"
}
# the toolchain: ansible-core, ansible-lint, molecule, pytest, uv, ...
install_locked .venv "$(command -v python3)" "$locks/dev.lock"
# The local Hugging Face Hub of the hf_snapshot tests (olah), in a venv of its own: its web stack must not
# move the pins of the toolchain above.
install_locked .venv-hub "$(command -v python3)" "$locks/hub.lock"
# huggingface_hub at the SGLang lock's versions, for hf_snapshot's downloader=huggingface_hub tests (the venv's
# interpreter stands for the SGLang venv's). Made from the system's Python (/usr/bin/python3, as a deployment's venv
# is): the library runs as the model's owner account, never as root, and root's own Python under ~root is not
# reachable by another account.
install_locked .venv-hflib "$(command -v /usr/bin/python3 || command -v python3)" "$locks/hflib.lock"

# antsibull-docs (what Ansible's docsite builds collection pages with) and the ansible-core it runs ansible-doc from,
# apart from the toolchain above: its web and Sphinx stack must not move those pins (#62 item 1)
install_locked .venv-docs "$(command -v python3)" "$locks/docs.lock"

# the oldest ansible-core the collection claims (meta/runtime.yml), for tests/ci/core-floor.sh (#62 item 5)
install_locked .venv-core-floor "$(command -v python3)" "$locks/core-floor.lock"

# The SGLang router at the role's pinned, hash-checked lock (roles/sglang_router/files/locks), for the router tests
# (the real router: a Rust binary in a wheel, CPU only).
install_locked .venv-router "$(command -v python3)" roles/sglang_router/files/locks/sglang-router-0.3.2.lock

coll="build/collections/ansible_collections"
if [ ! -d "$coll/community/proxmox" ] || [ ! -f "build/.bundle-$ANSIBLE_BUNDLE_VERSION" ]; then
  mkdir -p build/wheels
  .venv/bin/pip download -q --disable-pip-version-check --no-deps --require-hashes -d build/wheels \
    -r "$locks/ansible-bundle.lock"
  .venv/bin/python - "$ANSIBLE_BUNDLE_VERSION" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob("build/wheels/ansible-%s-*.whl" % sys.argv[1])[0]
# the collections of tests/requirements.yml (the tests' own: the content needs none)
wanted = ("ansible_collections/community/proxmox/", "ansible_collections/ansible/posix/", "ansible_collections/containers/podman/")
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(wanted):
            z.extract(n, "build/collections")
PY
  touch "build/.bundle-$ANSIBLE_BUNDLE_VERSION"
fi

# ansible-test fetches a pip bootstrap script from a host CI cannot reach: provide a substitute.
mkdir -p "$HOME/.ansible/test/cache"
for v in 24_2 24_3 25_0 25_1; do
  cp tests/ci/get_pip_substitute.py "$HOME/.ansible/test/cache/get_pip_$v.py"
done
echo "bootstrap: ok"
