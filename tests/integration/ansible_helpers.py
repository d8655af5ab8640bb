"""Run the collection's modules for real through `ansible` (ad hoc, JSON callback) on localhost."""
import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "tests", "lab", "sglang_standin")
VENV_BIN = os.path.dirname(sys.executable)


def run_module(module, args, check=False):
    env = dict(os.environ)
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    cmd = [os.path.join(VENV_BIN, "ansible"), "localhost", "-m", module, "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise AssertionError("ansible printed no JSON:\nSTDOUT:%s\nSTDERR:%s" % (p.stdout[-3000:], p.stderr[-3000:]))
    res = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    res["_stdout"] = p.stdout
    res["_stderr"] = p.stderr
    return res


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def server(tmp_path):
    """Base args for sglang_server against the stand-in; stops whatever it started afterwards."""
    port = free_port()
    base = {
        "name": "t%d" % port, "python": sys.executable, "model_path": "/srv/models/Llama-3.1-8B-Instruct",
        "port": port, "state_dir": str(tmp_path / "state"), "ready_timeout": 60, "health": "/health_generate",
        "public_env": {"PYTHONPATH": STANDIN, "SGLANG_STANDIN_SPEED": "40"},
    }
    yield base
    stop = {"name": base["name"], "state": "stopped", "state_dir": base["state_dir"]}
    run_module("gpuserve.sglang.sglang_server", stop)
