"""The collection people install (#45 item 3): the built tarball carries the content and nothing of the tests, the lab
or the developer tooling; installed with ansible-galaxy into an empty path, its plugins document themselves and its
main job (plan.yml) runs from the installed copy."""
import json
import os
import subprocess
import tarfile

import pytest

from ansible_helpers import ROOT, VENV_BIN

LEFT_OUT = ("tests/", "inventory/lab/", ".ci/", "Makefile", "ansible.cfg", "requirements-dev.txt", ".venv", "build/")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("galaxy")
    out = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp),
                          ROOT], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    tarball = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".tar.gz")]
    assert len(tarball) == 1, out
    coll = tmp / "installed"
    subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--offline", "--no-deps",
                    tarball[0], "-p", str(coll)], capture_output=True, text=True, check=True, cwd=str(tmp))
    # the collection from the install (first on the path), the dependency collections (community.proxmox, ...) from the tests.
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    env.update(ANSIBLE_COLLECTIONS_PATH="%s:%s" % (coll, os.path.join(ROOT, "build", "collections")),
               ANSIBLE_NOCOLOR="1")
    return {"tarball": tarball[0], "path": str(coll), "env": env, "tmp": str(tmp)}


def test_the_tarball_carries_the_content_and_nothing_of_the_tests_or_the_lab(installed):
    with tarfile.open(installed["tarball"]) as tar:
        names = tar.getnames()
    inside = [n for n in names if n.startswith(LEFT_OUT) or "/lab/" in n or "fake-nvidia" in n or "standin" in n]
    assert not inside, inside[:20]
    for must in ("LICENSES/GPL-3.0-or-later.txt", "README.md", "CHANGELOG.rst", "meta/runtime.yml", "playbooks/plan.yml",
                 "plugins/modules/sglang_server.py", "roles/sglang_server/tasks/main.yml",
                 "roles/sglang_venv/files/locks/sglang-0.5.9.lock", "inventory/example/hosts.yml"):
        assert must in names, must


def test_the_installed_copy_documents_every_module_and_runs_the_main_job(installed):
    where = os.path.join(installed["path"], "ansible_collections", "gpuserve", "sglang")
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-doc"), "-t", "module", "-l", "gpuserve.sglang", "--json"],
                       capture_output=True, text=True, env=installed["env"], cwd=installed["tmp"], check=True)
    listed = set(json.loads(p.stdout))
    shipped = {"gpuserve.sglang." + f[:-3] for f in os.listdir(os.path.join(ROOT, "plugins", "modules"))
               if f.endswith(".py") and not f.startswith("_")}
    assert listed == shipped
    for name in sorted(listed):
        doc = subprocess.run([os.path.join(VENV_BIN, "ansible-doc"), "--json", name], capture_output=True, text=True,
                             env=installed["env"], cwd=installed["tmp"], check=True)
        assert os.path.realpath(json.loads(doc.stdout)[name]["doc"]["filename"]).startswith(os.path.realpath(where))
    plan = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), os.path.join(where, "playbooks", "plan.yml")],
                          capture_output=True, text=True, env=installed["env"], cwd=installed["tmp"], check=False)
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "Outcome: kv_pool_oom" in plan.stdout
