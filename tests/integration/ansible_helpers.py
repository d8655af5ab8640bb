"""Run the collection's modules for real through `ansible` (ad hoc, JSON callback) on localhost."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "tests", "lab", "sglang_standin")
VENV_BIN = os.path.dirname(sys.executable)
OLAH = os.path.join(ROOT, ".venv-hub", "bin", "olah-cli")
# huggingface_hub at the SGLang lock's version (tests/ci/locks/hflib.in), for downloader=huggingface_hub
HFLIB_PYTHON = os.path.join(ROOT, ".venv-hflib", "bin", "python")
# The lab's helpers (local_hub, make_wheel) are stdlib-only and serve the tests as well.
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from local_hub import LocalHub, free_port  # noqa: E402  pylint: disable=wrong-import-position


def ansible_env(**extra):
    """The environment `ansible` and `ansible-playbook` run in here: this tree's built collection and ansible.cfg,
    this interpreter on localhost, plus ``extra``."""
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
                ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_PYTHON_INTERPRETER=sys.executable, **extra)


def run_module(module, args, check=False, extra=(), env=None, prefix=()):
    """The module on localhost through `ansible` (run under the argv ``prefix``, e.g. unshare), its result."""
    env = ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **(env or {}))
    cmd = list(prefix) + [os.path.join(VENV_BIN, "ansible"), "localhost", "-m", module, "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    cmd.extend(extra)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON:\nSTDOUT:%s\nSTDERR:%s" % (p.stdout[-3000:], p.stderr[-3000:]))
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    res["_stdout"] = p.stdout
    res["_stderr"] = p.stderr
    return res


def descendants(pid):
    children = {}
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                with open("/proc/%s/stat" % n) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(n))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def start_module(module, args, tmp_dir):
    """The module through `ansible` in the background, in a session of its own (to be killed with kill_tree).
    Its AnsiballZ payload and ansible's local temp go under ``tmp_dir`` (a test's tmp_path): a killed module
    cannot remove them, and they would pile up in /tmp and ~/.ansible/tmp run after run."""
    os.makedirs(str(tmp_dir), exist_ok=True)
    env = ansible_env(TMPDIR=str(tmp_dir), ANSIBLE_LOCAL_TEMP=str(tmp_dir))
    return subprocess.Popen([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", module, "-a", json.dumps(args)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def kill_tree(proc):
    """SIGKILL a process and everything under it (the module, and the downloader it started, may not share a
    process group), as a power cut or an OOM kill would."""
    for pid in [proc.pid] + descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    time.sleep(0.5)


def run_playbook(plays, tmp_path, check=False, inventory=None):
    """Write plays (a list of play dicts) to a playbook in tmp_path and run it with ansible-playbook (with an
    inventory dict, written beside it, instead of the implicit localhost)."""
    pb = tmp_path / "pb.yml"
    pb.write_text(json.dumps(plays))
    inv = []
    if inventory is not None:
        (tmp_path / "inventory.yml").write_text(json.dumps(inventory))
        inv = ["-i", str(tmp_path / "inventory.yml")]
    env = ansible_env(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), str(pb)] + inv + (["--check"] if check else [])
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)


def recap(stdout, host="localhost"):
    """The PLAY RECAP counters of a host, as ints."""
    line = [x for x in stdout.splitlines() if x.startswith(host)][-1]
    return dict((k, int(v)) for k, v in (kv.split("=") for kv in line.split(":", 1)[1].split()))


def snapshot_args(repo, hub, local_dir, defaults=None, **kw):
    """hf_snapshot's arguments for a repo of a LocalHub at its commit, no disk margin, then defaults, then kw."""
    a = {"repo_id": repo, "revision": hub.sha, "local_dir": str(local_dir), "endpoint": hub.endpoint, "disk_margin_mib": 0}
    a.update(defaults or {})
    a.update(kw)
    return a


def write_token(tmp_path, token):
    """A 0600 token file, as hf_model writes it; its path."""
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    os.chmod(str(tf), 0o600)
    return str(tf)


def serve_local_hub(tmp_path_factory, name, repo_id, files):
    """A LocalHub (olah + front, tests/lab/local_hub.py) serving one repo; yields it with .sha set, then stops it."""
    if not os.path.exists(OLAH):
        pytest.fail("olah is not installed: run tests/ci/bootstrap.sh (make deps)")
    hub = LocalHub(tmp_path_factory.mktemp(name), OLAH)
    hub.sha = hub.add_repo(repo_id, files)
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def server(tmp_path):
    """Base args for sglang_server against the stand-in; stops whatever it started afterwards."""
    port = free_port()
    base = {
        "name": "t%d" % port, "manager": "process", "python": sys.executable, "model_path": "/srv/models/Llama-3.1-8B-Instruct",
        "port": port, "state_dir": str(tmp_path / "state"), "ready_timeout": 60, "health": "/health_generate",
        "public_env": {"PYTHONPATH": STANDIN, "SGLANG_STANDIN_SPEED": "40"},
    }
    yield base
    stop = {"name": base["name"], "manager": "process", "state": "stopped", "state_dir": base["state_dir"]}
    run_module("gpuserve.sglang.sglang_server", stop)
