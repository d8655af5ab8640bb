"""The collection people install (#45 item 3): the built tarball carries the content and nothing of the tests, the lab
or the developer tooling; installed with ansible-galaxy into an empty path, its plugins document themselves and its
main job (plan.yml) runs from the installed copy."""
import glob
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest
import yaml

from ansible_helpers import ROOT, VENV_BIN

LEFT_OUT = ("tests/", "inventory/lab/", ".ci/", "Makefile", "ansible.cfg", ".venv", "build/", "changelogs/fragments/")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("galaxy")
    out = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp),
                          ROOT], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    tarball = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".tar.gz")]
    assert len(tarball) == 1, out
    coll = tmp / "installed"
    clean = dict((k, v) for k, v in os.environ.items() if not k.startswith("ANSIBLE_"))
    # as a user installs it, into an empty path that is the only one configured (a copy of the same version on another
    # configured path makes ansible-galaxy skip the install): its dependencies resolved (none to fetch), no Galaxy
    subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--offline", tarball[0],
                    "-p", str(coll)], capture_output=True, text=True, check=True, cwd=str(tmp),
                   env=dict(clean, ANSIBLE_COLLECTIONS_PATH=str(coll)))
    assert os.path.isfile(os.path.join(str(coll), "ansible_collections", "gpuserve", "sglang", "MANIFEST.json"))
    # the collection from the install (first on the path), the dependency collections (community.proxmox, ...) from the tests.
    env = dict(clean, ANSIBLE_COLLECTIONS_PATH="%s:%s" % (coll, os.path.join(ROOT, "build", "collections")),
               ANSIBLE_NOCOLOR="1")
    return {"tarball": tarball[0], "path": str(coll), "env": env, "tmp": str(tmp)}


def test_the_tarball_carries_the_content_and_nothing_of_the_tests_or_the_lab(installed):
    with tarfile.open(installed["tarball"]) as tar:
        names = tar.getnames()
    inside = [n for n in names if n.startswith(LEFT_OUT) or "/lab/" in n or "fake-nvidia" in n or "standin" in n
              or "/molecule/" in n or n.endswith("/molecule")]
    assert not inside, inside[:20]
    for must in ("LICENSES/GPL-3.0-or-later.txt", "README.md", "CHANGELOG.rst", "meta/runtime.yml", "playbooks/plan.yml",
                 "plugins/modules/sglang_server.py", "roles/sglang_server/tasks/main.yml",
                 "roles/sglang_venv/files/locks/sglang-0.5.9.lock", "inventory/example/hosts.yml",
                 "docs/docsite/extra-docs.yml", "docs/docsite/rst/runbook_status.rst"):
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
    plan = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "gpuserve.sglang.plan", "-e",
                           "plan_expect_failure=true"],
                          capture_output=True, text=True, env=installed["env"], cwd=installed["tmp"], check=False)
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "Outcome: kv_pool_oom" in plan.stdout


def _fqcns(text):
    return set(re.findall(r"\b([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*\b", text))


def test_the_dependencies_galaxy_yml_declares_are_the_ones_the_content_uses():
    """#45 item 4: every collection the content names (a task's module, a filter, a lookup, a connection) is a
    dependency, and nothing else is: test-only collections are in tests/requirements.yml."""
    with open(os.path.join(ROOT, "galaxy.yml")) as fh:
        declared = set((yaml.safe_load(fh)["dependencies"] or {}))
    used = set()
    for top in ("roles", "playbooks"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*.yml"), recursive=True):
            if "/molecule/" in path:
                continue
            with open(path) as fh:
                text = "\n".join(line for line in fh if not line.lstrip().startswith("#"))
            used |= _fqcns(text)
    used = {c for c in used if c.split(".")[0] in ("community", "ansible", "containers", "kubernetes", "cisco")}
    used -= {"ansible.builtin", "ansible.legacy"}
    assert used == declared, "content uses %s, galaxy.yml declares %s" % (sorted(used), sorted(declared))


def test_an_execution_environment_from_the_tarball(installed):
    """#45 item 5: docs/ee/execution-environment.yml builds a context with ansible-builder 3.2.0 (the tarball and its
    requirements inside), and ansible-builder's introspection of the installed collection finds what the controller
    side needs (meta/execution-environment.yml)."""
    work = os.path.join(installed["tmp"], "ee")
    shutil.copytree(os.path.join(ROOT, "docs", "ee"), work)
    shutil.copy(installed["tarball"], os.path.join(work, "gpuserve-sglang.tar.gz"))
    builder = [os.path.join(VENV_BIN, "uv"), "tool", "run", "-q", "--from", "ansible-builder==3.2.0", "ansible-builder"]
    create = subprocess.run(builder + ["create", "-f", "execution-environment.yml", "--context", "ctx"], cwd=work,
                            capture_output=True, text=True, check=False)
    assert create.returncode == 0, create.stdout + create.stderr
    ctx = os.path.join(work, "ctx")
    assert os.path.isfile(os.path.join(ctx, "_build", "collections", "gpuserve-sglang.tar.gz"))
    with open(os.path.join(ctx, "_build", "requirements.yml")) as fh:
        assert yaml.safe_load(fh)["collections"] == [{"name": "/build/collections/gpuserve-sglang.tar.gz", "type": "file"}]
    with open(os.path.join(ctx, "Containerfile")) as fh:
        containerfile = fh.read()
    assert "ansible-galaxy collection install" in containerfile and "introspect" in containerfile
    assert "ansible-core==2.19.14" in containerfile
    found = subprocess.run(builder + ["introspect", installed["path"]], capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr
    wants = yaml.safe_load(found.stdout.split("\n", 1)[1])
    assert "proxmoxer>=2.0  # from collection gpuserve.sglang" in wants["python"]
    assert "openssh-client [platform:dpkg]  # from collection gpuserve.sglang" in wants["system"]


def test_the_release_step_gives_the_repository_address_from_one_setting_and_invents_none(tmp_path):
    """#62 item 4: galaxy.yml names no address (never a placeholder); Galaxy's importer requires `repository`, so the
    release step (tests/ci/tarball.sh, `make tarball`) takes it from GPUSERVE_REPOSITORY_URL and refuses without an
    https one; the tarball's MANIFEST.json then names it, and nothing else of galaxy.yml changed."""
    script = os.path.join(ROOT, "tests", "ci", "tarball.sh")
    # the tree make test laid out (laying out a new one would pull it from under the lab lane's molecule runs)
    tree = os.path.join(ROOT, "build", "collections", "ansible_collections", "gpuserve", "sglang")
    for bad in ("", "http://git.example.org/gpuserve/sglang"):
        r = subprocess.run([script, str(tmp_path / "none"), tree], capture_output=True, text=True, check=False,
                           env=dict(os.environ, GPUSERVE_REPOSITORY_URL=bad))
        assert r.returncode == 2 and "set GPUSERVE_REPOSITORY_URL to the repository's https address" in r.stderr
        assert not (tmp_path / "none").exists()
    url = "https://git.example.org/gpuserve/sglang"
    subprocess.run([script, str(tmp_path / "dist"), tree], capture_output=True, text=True, check=True,
                   env=dict(os.environ, GPUSERVE_REPOSITORY_URL=url))
    tarball = glob.glob(str(tmp_path / "dist" / "gpuserve-sglang-*.tar.gz"))
    assert len(tarball) == 1
    with tarfile.open(tarball[0]) as tar:
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
    with open(os.path.join(ROOT, "galaxy.yml")) as fh:
        galaxy = yaml.safe_load(fh)
    assert info["repository"] == url and "repository" not in galaxy
    assert info["version"] == galaxy["version"] and info["issues"] is None and info["homepage"] is None
    with tarfile.open(tarball[0]) as tar:
        assert "docs/docsite/links.yml" not in tar.getnames()       # no tracker or edit link is known there
    # a GitHub address gives the repository's own issue tracker and the docsite's edit links, nothing more
    url = "https://github.com/gpuserve/sglang"
    subprocess.run([script, str(tmp_path / "gh"), tree], capture_output=True, text=True, check=True,
                   env=dict(os.environ, GPUSERVE_REPOSITORY_URL=url))
    with tarfile.open(glob.glob(str(tmp_path / "gh" / "gpuserve-sglang-*.tar.gz"))[0]) as tar:
        info = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
        links = yaml.safe_load(tar.extractfile("docs/docsite/links.yml"))
    assert info["repository"] == url and info["issues"] == url + "/issues" and info["homepage"] is None
    assert links == {"edit_on_github": {"repository": "gpuserve/sglang", "branch": "main", "path_prefix": ""}}
