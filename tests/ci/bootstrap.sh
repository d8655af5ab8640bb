#!/usr/bin/env bash
# Install everything `make test` needs on a fresh Debian 12 machine (root): system packages, the
# pinned Python toolchain in .venv, the collections we depend on (from the pinned `ansible` wheel on
# PyPI, Galaxy being unreachable), and ansible-test's pip bootstrap substitute. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
ANSIBLE_BUNDLE_VERSION=12.3.0   # bundles community.proxmox 1.4.0, ansible.posix 2.1.0

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

stamp=".venv/.requirements.sha256"
want="$(sha256sum requirements-dev.txt | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
  echo "$want" > "$stamp"
fi

# The local Hugging Face Hub of the hf_snapshot tests (olah), in a venv of its own: its web stack must not
# move the pins of the toolchain above.
if [ ! -x .venv-hub/bin/olah-cli ] || ! cmp -s tests/lab/requirements-hub.txt .venv-hub/.installed; then
  python3 -m venv .venv-hub
  .venv-hub/bin/pip install -q --disable-pip-version-check -r tests/lab/requirements-hub.txt
  cp tests/lab/requirements-hub.txt .venv-hub/.installed
fi
# huggingface_hub at the SGLang lock's versions, for hf_snapshot's downloader=huggingface_hub tests (the venv's
# interpreter stands for the SGLang venv's). Made from the system's Python (/usr/bin/python3, as a deployment's venv
# is): the library runs as the model's owner account, never as root, and root's own Python under ~root is not
# reachable by another account.
hflib_base="$(command -v /usr/bin/python3 || command -v python3)"
if [ ! -x .venv-hflib/bin/python ] || ! cmp -s tests/lab/requirements-hflib.txt .venv-hflib/.installed \
   || [ "$(readlink -f .venv-hflib/bin/python3)" != "$(readlink -f "$hflib_base")" ]; then
  rm -rf .venv-hflib
  "$hflib_base" -m venv .venv-hflib
  .venv-hflib/bin/pip install -q --disable-pip-version-check -r tests/lab/requirements-hflib.txt
  cp tests/lab/requirements-hflib.txt .venv-hflib/.installed
fi

# The SGLang router at the role's pinned, hash-checked lock (roles/sglang_router/files/locks), for the router tests
# (the real router: a Rust binary in a wheel, CPU only).
router_lock=roles/sglang_router/files/locks/sglang-router-0.3.2.lock
if [ ! -x .venv-router/bin/python ] || ! cmp -s "$router_lock" .venv-router/.installed; then
  python3 -m venv .venv-router
  .venv-router/bin/pip install -q --disable-pip-version-check --require-hashes -r "$router_lock"
  cp "$router_lock" .venv-router/.installed
fi

coll="build/collections/ansible_collections"
if [ ! -d "$coll/community/proxmox" ] || [ ! -f "build/.bundle-$ANSIBLE_BUNDLE_VERSION" ]; then
  mkdir -p build/wheels
  .venv/bin/pip download -q --disable-pip-version-check --no-deps -d build/wheels "ansible==$ANSIBLE_BUNDLE_VERSION"
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
