"""deploy.yml as an operator meets it before any host is touched: tags select what they name, and a bad
inventory value is named in a few lines with nothing run."""
import json
import os
import shutil
import subprocess

import pytest

import yaml

from ansible_helpers import ROOT, VENV_BIN
from test_nvidia_gpu_facts import fake_smi

PLAYBOOK = os.path.join(ROOT, "playbooks", "deploy.yml")


def ansible_playbook(*args, cwd=ROOT, env=None):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook")] + list(args), capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300, check=False)


def test_tags_server_runs_the_server_role_not_the_venv_or_the_model():
    p = ansible_playbook("-i", os.path.join(ROOT, "inventory", "example"), PLAYBOOK, "--list-tasks", "--tags", "server")
    assert p.returncode == 0, p.stderr
    tasks = [line.strip() for line in p.stdout.splitlines() if "TAGS:" in line and not line.strip().startswith("play #")]
    venv_or_model = [t for t in tasks if t.startswith(("gpuserve.sglang.sglang_venv :", "gpuserve.sglang.hf_model :"))]
    assert venv_or_model and all("Validating arguments" in t for t in venv_or_model), venv_or_model
    assert any(t.startswith("gpuserve.sglang.sglang_server : SGLang is ready") for t in tasks)


def inventory(tmp_path, node=None, **ct):
    host = {"ansible_connection": "local", "proxmox_vmid": 129, "gpuserve_node": "pve1"}
    host.update(ct)
    inv = {"all": {"children": {"pve_nodes": {"hosts": {"pve1": dict({"ansible_connection": "local"}, **(node or {}))}},
                                "sglang_containers": {"hosts": {"ct129": host}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def test_a_bad_inventory_value_is_named_in_a_few_lines_and_nothing_runs(tmp_path):
    p = ansible_playbook("-i", inventory(tmp_path, proxmox_vmid="129; reboot", gpuserve_node="pve9",
                                         sglang_server_args={"mem_fraction_static": 1.2},
                                         hf_model_repo_id="Qwen/../etc", gpuserve_service_user="Sglang; x",
                                         gpuserve_venv="opt/sglang venv"), PLAYBOOK)
    assert p.returncode != 0
    out = p.stdout
    assert "proxmox_vmid=129; reboot must be a Proxmox CT id, 100-999999999" in out
    assert "gpuserve_node=pve9 must name a host of group pve_nodes (pve1)" in out
    assert "sglang_server_args.mem_fraction_static=1.2: outside (0.0, 1.0)" in out
    # the same repo-id rule as hf_snapshot's (filter hf_repo_id_problem), not a looser copy of it
    assert "hf_model_repo_id='Qwen/../etc': expected <org>/<name>" in out
    # the names every role reads from one place, checked once here
    assert "gpuserve_service_user=Sglang; x must be a Linux user name" in out
    assert "gpuserve_venv=opt/sglang venv must be an absolute path without blanks" in out
    assert "Nothing was changed." in out
    failed = out[out.index("fatal:"):out.index("PLAY RECAP")]
    assert len(failed.splitlines()) <= 12, failed          # a few lines, not an argument spec dump
    assert "Proxmox nodes - GPUs" not in out                # no later play started


def test_good_inventory_values_pass_the_first_play(tmp_path):
    """The same checks let a usable inventory through: the defaults of the shared names, and set values."""
    for ct in ({}, {"gpuserve_service_user": "svc-llm", "gpuserve_venv": "/srv/venvs/sglang"}):
        p = ansible_playbook("-i", inventory(tmp_path, **ct), PLAYBOOK, "--tags", "nothing-but-always")
        assert p.returncode == 0, p.stdout[-2000:]
        assert "Nothing was changed." not in p.stdout


def test_the_plan_chart_is_printed_as_one_block_a_person_reads_at_a_glance():
    """plan.yml through the configured (YAML) callback: one literal block, every bar on its own unwrapped line."""
    p = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", "plan_expect_failure=true")
    assert p.returncode == 0, p.stdout[-2000:]
    lines = [line[8:] for line in p.stdout.splitlines() if line.startswith(" " * 8)]
    assert "msg: |-" in p.stdout
    assert "  weights        25.43 GiB |######################" in lines
    assert "  KV cache       -2.95 GiB |<0: over budget by 2.95 GiB" in lines
    fix = [line for line in lines if line.startswith("  fix speculative_eagle_topk=1")]
    assert fix and fix[0].endswith("(set all three together))")      # a long line is not wrapped


def test_a_node_on_apt_gets_its_containers_userspace_from_apt_too(tmp_path):
    """The container entry runs with the node's method: on apt it asks for the CT's packages (refused here, with
    none given, before anything changes - which shows the apt branch ran); a node on a .run it was not given
    leaves the container entry out, as before."""
    apt = ansible_playbook("-i", inventory(tmp_path, node={"nvidia_driver_version": "570.153.02",
                                                           "nvidia_driver_method": "apt"},
                                           nvidia_driver_userspace_apt_packages=[]),
                           PLAYBOOK, "--tags", "userspace")
    assert apt.returncode != 0
    said = " ".join(apt.stdout.split())
    assert "ct129: set nvidia_driver_userspace_version (the host's module version, e.g. 570.153.02; is 570.153.02) " \
           "and nvidia_driver_userspace_apt_packages" in said, apt.stdout[-3000:]
    runfile = ansible_playbook("-i", inventory(tmp_path, node={"nvidia_driver_version": "570.153.02"}),
                               PLAYBOOK, "--tags", "userspace")
    assert runfile.returncode == 0, runfile.stdout[-3000:]
    assert "Container | the version and the installer are named" not in runfile.stdout


def lost_gpu_path(tmp_path):
    """A PATH whose nvidia-smi is a node's whose GPU at 0000:c1:00.0 fell off the bus (fixture gpu-lost.smi.out, exit
    15; test_nvidia_gpu_facts' stand-in)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_smi(bin_dir, "gpu-lost.smi.out", 15)
    return "%s:%s" % (bin_dir, os.environ["PATH"])


def test_a_node_whose_gpu_fell_off_the_bus_stops_the_container_that_uses_it_before_launch(tmp_path):
    """The node's nvidia-smi (on PATH here: exits 15 with NVML's line for the GPU at 0000:c1:00.0) read by the node
    play; the container on GPU 1 stops before its server role with the node's words - this machine has no
    /proc/driver/nvidia/gpus, so which /dev/nvidiaN was lost is unknown and the container may use it. A node
    without any driver stops every container."""
    env_path = lost_gpu_path(tmp_path)
    inv = inventory(tmp_path, node={"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
                    lxc_gpu_passthrough_gpus=[1])
    p = ansible_playbook("-i", inv, PLAYBOOK, "--tags", "server", env={"PATH": env_path})
    said = " ".join(p.stdout.split())
    assert p.returncode != 0
    assert ("ct129: a GPU (0000:c1:00.0) of pve1 is lost, and the driver does not say which /dev/nvidiaN it was, so "
            "this container may use it - GPU 0000:c1:00.0 lost: Unable to determine the device handle") in said, \
        p.stdout[-3000:]
    assert "Nothing was launched." in said and "TASK [gpuserve.sglang.sglang_server" not in p.stdout
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: the no-driver half needs one without (as CI's)")
    none = ansible_playbook("-i", inv, PLAYBOOK, "--tags", "server")
    said = " ".join(none.stdout.split())
    assert none.returncode != 0
    assert "ct129: the GPUs of pve1 cannot be used: no_driver - nvidia-smi not found." in said, none.stdout[-3000:]


def test_status_names_a_nodes_lost_gpu_in_one_line(tmp_path):
    """status.yml reads each node's GPUs read-only: with the nvidia-smi of a node whose GPU fell off the bus (the
    constructed fixture, exit 15), one line names the state, the lost GPU and what to do."""
    inv = tmp_path / "nodes.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"pve_nodes": {"hosts": {"pve1": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}))
    p = ansible_playbook("-i", str(inv), os.path.join(ROOT, "playbooks", "status.yml"), "--check",
                         env={"PATH": lost_gpu_path(tmp_path), "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    assert p.returncode == 0, p.stdout[-3000:]
    assert ('"msg": "pve1 GPUs gpu_lost: GPU 0000:c1:00.0 lost: Unable to determine the device handle for '
            'GPU0000:C1:00.0: Unknown Error. The GPU stopped answering on the PCIe bus') in p.stdout, p.stdout[-3000:]
    assert "changed=0" in p.stdout


def test_the_plan_chart_reads_line_by_line_under_the_default_callback_too():
    """#45 item 8: a user's own project (the default JSON result format) gets one chart line per list item, not one
    string full of \\n."""
    p = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", "plan_expect_failure=true",
                         env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    assert p.returncode == 0, p.stdout[-2000:]
    assert '"msg": [' in p.stdout and "\\n" not in p.stdout
    assert '"  weights        25.43 GiB |######################",' in p.stdout
    assert '"  KV cache       -2.95 GiB |<0: over budget by 2.95 GiB",' in p.stdout


def test_a_plan_that_predicts_the_launch_dies_fails_the_play_unless_expected():
    """#60 item 6: plan.yml ended failed=0 when it predicted the pool error; the recap says it now, and the task name
    names no release it may not be planning."""
    p = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"))
    assert p.returncode != 0 and "failed=1" in p.stdout, p.stdout[-2000:]
    said = " ".join(p.stdout.split())
    assert "SGLang 0.5.9 is predicted to die with these args: kv_pool_oom (nothing was launched)" in said
    assert "Outcome: kv_pool_oom" in p.stdout                      # the plan itself was shown first
    assert "SGLang 0.5.9's arithmetic" not in p.stdout
    expected = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", "plan_expect_failure=true")
    assert expected.returncode == 0 and "failed=0" in expected.stdout, expected.stdout[-2000:]
    assert "SGLang 0.5.9: kv_pool_oom predicted, as plan_expect_failure says" in expected.stdout
    # 0.5.23's own arithmetic: the same args start there, with a shorter pool than the context (no failure)
    newer = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", "plan_release=0.5.23")
    assert newer.returncode == 0 and "Outcome: context_truncated" in newer.stdout, newer.stdout[-2000:]
    starts = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", "plan_gpu_profile=h100-80gb",
                              "-e", "plan_gpu_count=1", "-e",
                              '{"plan_args": {"tp_size": 1, "speculative_algorithm": null}}')
    assert starts.returncode == 0 and "Outcome: context_truncated" in starts.stdout, starts.stdout[-2000:]


def test_a_marginal_plan_fails_plan_yml_unless_accepted():
    """#60 item 4: a pool budget of 27 MiB (M0 46 GiB, weights 16 GiB, mfs 0.3484) is within the 64 MiB SGLang's two
    free-memory readings may differ by: plan.yml shows the plan with its fix and fails, unless accepted."""
    extra = json.dumps({"plan_model_config_file": os.path.join(ROOT, "tests", "fixtures", "model_configs",
                                                               "llama-3.1-8b.json"),
                        "plan_gpu_count": 1, "plan_args": {"mem_fraction_static": 0.3484, "context_length": 128},
                        "plan_measured": {"avail_mem_before_load_gb": 46.0, "weights_gb": 16.0,
                                          "avail_mem_after_load_gb": 30.0}})
    p = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", extra)
    said = " ".join(p.stdout.split()).replace("''", "'")
    assert p.returncode != 0 and "failed=1" in p.stdout, p.stdout[-2000:]
    assert "Outcome: marginal (as planned: fits:" in said and "fix mem_fraction_static=0.351 -> fits" in said
    assert "SGLang 0.5.9: the plan is marginal - 27.0 MiB of KV budget, within the 64.0 MiB" in said, said[-2000:]
    ok = ansible_playbook(os.path.join(ROOT, "playbooks", "plan.yml"), "-e", extra, "-e", "plan_accept_marginal=true")
    assert ok.returncode == 0 and "failed=0" in ok.stdout, ok.stdout[-2000:]
