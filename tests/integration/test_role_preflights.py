"""The roles' preflights, through ansible-playbook on localhost: each bad input is refused by the preflight with the
message that names it and the fix, before anything changes. Each role's preflight is one assert (a re-run pays one
task, not one per check), whose checks run in order with the first failing one as the message - as the separate
asserts they replaced did; the cases below hold every message and that order (two bad inputs: the first is named)."""
import glob
import json
import os
import re

import pytest

from ansible_helpers import ROOT, recap, run_playbook

LOCK_059 = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-0.5.9.lock")
# a real CPython that is not 3.11 (pyenv's, as tests/ci/targets.sh finds them): 0.5.23's only wheel is cp311
OTHER_PYTHON = (sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[02].*/bin/python3.1[02]")))
                + [None])[0]
SERVER = {"sglang_server_python": "/nonexistent/venv/bin/python", "sglang_server_model_path": "/nonexistent/model",
          "sglang_server_plan": False}
NVIDIA = {"nvidia_driver_version": "580.126.09", "nvidia_driver_runfile_path": "/nonexistent/NVIDIA.run",
          "nvidia_driver_runfile_sha256": "0" * 64, "nvidia_driver_install_headers": False}
HF = {"hf_model_repo_id": "tiny-org/model", "hf_model_dir": "/nonexistent/models/tiny",
      "hf_model_revision": "0123456789abcdef0123456789abcdef01234567"}

# (case, role, vars, what the message says) - every check of every merged preflight
CASES = [
    ("server-name", "sglang_server", dict(SERVER, sglang_server_name="my server"),
     r"set sglang_server_python .* and a sglang_server_name of letters, digits, '-' and '_' \(got name=my server\)"),
    ("server-name-first", "sglang_server", dict(SERVER, sglang_server_name="a b", sglang_server_args={"port": 1}),
     r"sglang_server_name of letters"),
    ("server-bind", "sglang_server", dict(SERVER, sglang_server_args={"port": 31000}),
     r"sglang_server_args sets port: set sglang_server_host / sglang_server_port instead"),
    ("server-public", "sglang_server", dict(SERVER, sglang_server_host="0.0.0.0"),
     r"sglang_server_host=0\.0\.0\.0 exposes the GPUs to the network: set sglang_server_api_key"),
    ("server-goal", "sglang_server", dict(SERVER, sglang_server_args_goal="fit"),
     r"sglang_server_args_goal=fit: one of fit, context, concurrency, tokens, and the planner that chooses needs the plan"),
    ("server-args", "sglang_server", dict(SERVER, sglang_server_args={"tp_size": 0}),
     r"tp_size.*: fix sglang_server_args \(nothing was changed\)"),
    ("server-secret", "sglang_server", dict(SERVER, sglang_server_args={"api_key": "x"}),
     r"sglang_server_args holds \['api_key'\]: argv is visible to every user in `ps`"),
    # #42 item 1: a list value smuggling a flag (SGLang's argparse keeps the last --host)
    ("server-smuggle", "sglang_server", dict(SERVER, sglang_server_args={"log_level": ["info", "--host", "0.0.0.0"]}),
     r"args\.log_level='--host': a value beginning with '-' would reach the program as a flag of its own.*"
     r"fix sglang_server_args \(nothing was changed\)"),
    ("server-host-flag", "sglang_server", dict(SERVER, sglang_server_host="--api-key=x", sglang_server_public_without_api_key=True),
     r"sglang_server_host='--api-key=x': a value beginning with '-'"),
    # #42 item 5: a line break in a value the unit is written from would start a directive of its own
    ("server-unit-newline", "sglang_server",
     dict(SERVER, sglang_server_model_path="/srv/models/q\nExecStartPre=+/usr/bin/touch /root/pwned\n#"),
     r"sglang_server_model_path='/srv/models/q\\nExecStartPre=.*' holds a control character .*\(nothing was changed\)"),
    ("server-unit-after", "sglang_server", dict(SERVER, sglang_server_unit_after=["a.service\nExecStartPre=+/bin/sh"]),
     r"sglang_server_unit_after='a\.service\\nExecStartPre=\+/bin/sh' holds a control character"),
    ("server-unit-after-word", "sglang_server", dict(SERVER, sglang_server_unit_after=["a.service b.service"]),
     r"sglang_server_unit_after: 'a\.service b\.service' is not a unit name"),
    # #42 item 8: short keys and tokens
    ("server-short-key", "sglang_server", dict(SERVER, sglang_server_api_key="k"),
     r"sglang_server_api_key is 1 characters long: use at least 16 .*\(nothing was changed\)"),
    # #59 item 3: prefill/decode - a backend that moves no KV, an arg reaching the role's own PD flags (abbreviated)
    ("server-pd-fake", "sglang_server", dict(SERVER, sglang_server_disaggregation_mode="prefill",
                                             sglang_server_disaggregation_transfer_backend="fake"),
     r"sglang_server_disaggregation_transfer_backend=fake moves no KV .* \(nothing was changed\)"),
    # (an abbreviation is refused before, as every arg's is: "give an option's full name")
    ("server-pd-arg", "sglang_server", dict(SERVER, sglang_server_args={"disaggregation_transfer_backend": "fake"}),
     r"sglang_server_args\.disaggregation_transfer_backend: SGLang 0\.5\.9's parser takes "
     r"--disaggregation-transfer-backend: prefill/decode is the role's - set "
     r"sglang_server_disaggregation_transfer_backend \(nothing was changed\)"),
    ("router-pd-half", "sglang_router", {"sglang_router_workers": [], "sglang_router_pd_decode": ["http://10.0.3.101:30000"]},
     r"sglang_router_pd_prefill \(0\) and sglang_router_pd_decode \(1\): PD mode needs at least one of each"),
    ("router-short-key", "sglang_router", {"sglang_router_api_key": "short-key", "sglang_router_workers": []},
     r"sglang_router_api_key is 9 characters long: use at least 16"),
    ("router-smuggle", "sglang_router",
     {"sglang_router_extra_args": {"health_check_interval_secs": [10, "--host", "0.0.0.0"]}, "sglang_router_workers": []},
     r"sglang_router_extra_args\.health_check_interval_secs='--host': a value beginning with '-'"),
    ("router-prometheus-host", "sglang_router", {"sglang_router_prometheus_host": "--host", "sglang_router_workers": []},
     r"sglang_router_prometheus_host='--host'"),
    ("hf-short-token", "hf_model", dict(HF, hf_model_token="hf_abc"),
     r"hf_model_token is 6 characters long: use at least 16 .* Nothing was changed\."),
    ("venv-wheel-sha", "sglang_venv", {"sglang_venv_flash_attn": "wheel", "sglang_venv_flash_attn_wheel": "/w/fa.whl"},
     r"sglang_venv_flash_attn_wheel_sha256 must be the sha256 \(64 hex digits\) of /w/fa\.whl .* Nothing was changed\."),
    ("venv-wheel-unset", "sglang_venv", {"sglang_venv_flash_attn": "wheel"},
     r"sglang_venv_flash_attn_wheel set when sglang_venv_flash_attn=wheel"),
    ("venv-binary-sha", "sglang_venv", {"sglang_venv_uv_source": "binary", "sglang_venv_uv_binary": "/w/uv"},
     r"sglang_venv_uv_binary_sha256 must be the sha256 \(64 hex digits\) of sglang_venv_uv_binary"),
    # #42 item 6: a source build only of an sdist pinned by hash
    ("venv-fa-source-unpinned", "sglang_venv", {"sglang_venv_flash_attn": "source", "sglang_venv_flash_attn_version": "2.7.4"},
     r"flash-attn 2\.7\.4 has no hash-pinned source distribution \(.*flash-attn-2\.7\.4\.txt\).*Nothing was changed\."),
    # #59 item 3: a transfer engine only from a file that pins its wheels by hash
    ("venv-te-unpinned", "sglang_venv", {"sglang_venv_transfer_engine": "mooncake",
                                         "sglang_venv_transfer_engine_version": "0.3.12"},
     r"mooncake-transfer-engine 0\.3\.12 has no hash-pinned file \(.*mooncake-transfer-engine-0\.3\.12\.txt\): write one "
     r"as the file of 0\.3\.13\.post1 is written .* Nothing was changed\."),
    # #58 item 2: the build account apart from the service account (the same account, its group, a home inside)
    ("venv-build-account", "sglang_venv", {"sglang_venv_build_user": "sglang"},
     r"sglang_venv_build_user=sglang must be an account of its own - not root, not sglang_venv_user or its group "
     r"sglang_venv_unix_group \(sglang, sglang\) .* Nothing was changed\."),
    ("venv-build-home", "sglang_venv", {"sglang_venv_build_home": "/var/lib/sglang/build"},
     r"sglang_venv_build_home=/var/lib/sglang/build and sglang_venv_home=/var/lib/sglang must not overlap"),
    ("venv-uv-req", "sglang_venv", {"sglang_venv_uv_version": "0.9.29"},
     r"uv 0\.9\.29 has no hash-pinned requirement .*uv-0\.9\.29\.txt\): generate it with `uv pip compile"),
    # #47 item 2, the last link: a uv too old for the build's options is refused, even as a binary with its sha256
    ("venv-uv-floor", "sglang_venv", {"sglang_venv_uv_version": "0.4.3", "sglang_venv_uv_source": "binary",
                                      "sglang_venv_uv_binary": "/w/uv", "sglang_venv_uv_binary_sha256": "0" * 64},
     r"sglang_venv_uv_version=0\.4\.3 is older than the oldest uv that takes every option this role's build passes "
     r"\(0\.4\.4; uv 0\.4\.3's `uv venv` has no --no-project\)\. Use uv 0\.4\.4 or newer.* Nothing was changed\."),
    ("venv-lock", "sglang_venv", {"sglang_venv_lock_file": "/nonexistent/sglang.lock"},
     r"sglang_venv_lock_file=/nonexistent/sglang\.lock does not exist\. This role ships locks for .*sglang-0\.5\.9\.lock"),
    ("venv-pins", "sglang_venv", {"sglang_venv_sglang_version": "0.5.8", "sglang_venv_lock_file": LOCK_059},
     r"sglang-0\.5\.9\.lock pins sglang 0\.5\.9, not 0\.5\.8: point sglang_venv_lock_file at the lock of that version"),
    # #47 item 2: the node's driver against the CUDA of the lock's torch (12.8, from its nvidia-cuda-runtime pin)
    ("venv-cuda-driver", "sglang_venv", {"sglang_venv_node_driver_version": "515.105.01", "sglang_venv_node": "pve1",
                                         "sglang_venv_node_containers": ["ct129", "ct131"]},
     r"sglang_venv: the lock's torch runs on CUDA 12\.8, which an NVIDIA driver loads from 525\.60\.13 on \(570\.26 "
     r"for all of it\), and pve1 has 515\.105\.01: .* Set nvidia_driver_version >= 570\.26 for pve1 \(role "
     r"nvidia_driver\): upgrading the driver restarts every GPU container of pve1 \(ct129, ct131\).* Nothing was "
     r"changed\."),
    # the same link for 0.5.23's lock: CUDA 13 (its nvidia-cuda-runtime 13.0.96) on the 570 branch that served 0.5.9
    ("venv-cuda13-driver", "sglang_venv", {"sglang_venv_sglang_version": "0.5.23",
                                           "sglang_venv_node_driver_version": "570.153.02", "sglang_venv_node": "pve1",
                                           "sglang_venv_node_containers": ["CT 129", "CT 131"]},
     r"sglang_venv: the lock's torch runs on CUDA 13\.0, which an NVIDIA driver loads from 580\.65\.06 on .* and pve1 "
     r"has 570\.153\.02: .* Set nvidia_driver_version >= 580\.65\.06 for pve1 \(role nvidia_driver\): upgrading the "
     r"driver restarts every GPU container of pve1 \(CT 129, CT 131\).* Nothing was changed\."),
    # the second link: the interpreter's Python against the tags of the lock's files (a real other CPython, asked)
    ("venv-wheels-python", "sglang_venv", {"sglang_venv_sglang_version": "0.5.23", "sglang_venv_python": OTHER_PYTHON},
     r"sglang_venv: sglang-0\.5\.23\.lock does not install on localhost \(CPython 3\.1[02]\.\d+, glibc 2\.\d+, "
     r"x86_64\): sglang==0\.5\.23 ships only cp311-cp311-manylinux_2_34_x86_64 \(CPython 3\.11, glibc >= 2\.34, "
     r"x86_64\);.* Point sglang_venv_python at an interpreter the wheels are built for .* Nothing was changed\."),
    # the CUDA of the lock's torch, where a message names it, is the lock's own (13.0 for 0.5.23), not a typed 12.8
    ("venv-nvcc-cuda13", "sglang_venv", {"sglang_venv_sglang_version": "0.5.23", "sglang_venv_flash_attn": "source",
                                         "sglang_venv_cuda_home": "/nonexistent/cuda"},
     r"/nonexistent/cuda/bin/nvcc does not exist\. Install the CUDA toolkit matching torch \(CUDA 13\.0\)"),
    ("hf-two-sources", "hf_model", dict(HF, hf_model_source_dir="/srv/snap", hf_model_source_host="node2"),
     r"Set hf_model_source_dir .* or hf_model_source_host .*, not both"),
    ("hf-host-key", "hf_model", dict(HF, hf_model_source_host="root@node2"),
     r"hf_model_source_host=root@node2: give its host key in hf_model_source_known_hosts"),
    ("hf-repo", "hf_model", dict(HF, hf_model_repo_id="a/b/c"), r"hf_model_repo_id"),
    ("nvidia-version", "nvidia_driver", dict(NVIDIA, nvidia_driver_version="latest"),
     r"nvidia_driver_version=latest: pin an exact version such as 570\.153\.02"),
    ("nvidia-runfile", "nvidia_driver", dict(NVIDIA, nvidia_driver_runfile_sha256="abc"),
     r"nvidia_driver_method=runfile needs nvidia_driver_runfile_url .* and nvidia_driver_runfile_sha256"),
    ("ct-apt-packages", "nvidia_driver:container",
     {"nvidia_driver_userspace_version": "570.153.02", "nvidia_driver_userspace_method": "apt",
      "nvidia_driver_userspace_apt_packages": []},
     r"set nvidia_driver_userspace_version .* and nvidia_driver_userspace_apt_packages \(the userspace packages, e\.g\. "
     r"libcuda1, libnvidia-ml1, nvidia-smi; is \[\]\)"),
    ("ct-apt-version", "nvidia_driver:container", {"nvidia_driver_userspace_version": "r570", "nvidia_driver_userspace_method": "apt"},
     r"set nvidia_driver_userspace_version \(the host's module version, e\.g\. 570\.153\.02; is r570\)"),
    ("ct-runfile", "nvidia_driver:container", {"nvidia_driver_userspace_version": "570.153.02", "proxmox_vmid": 100,
                                               "gpuserve_node": "pve1"},
     r"nvidia_driver_runfile_path \(the \.run on the node\) with its sha256"),
    ("nvidia-disk", "nvidia_driver", dict(NVIDIA, nvidia_driver_min_free_mib=2 ** 40, nvidia_driver_skip_gpu_check=True),
     r"/ has \d+ MiB free, the install needs 1099511627776 MiB \(nvidia_driver_min_free_mib\): free space first"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every case in one ansible-playbook run: each role include in a block whose rescue records the failed task and
    its message; the record is written to a file at the end (the test's own output, not the roles')."""
    tmp = tmp_path_factory.mktemp("preflights")
    tasks = []
    for case, role, variables, _message in CASES:
        tasks.append({"name": "case " + case, "block": [
            {"name": "run " + case, "ansible.builtin.include_role": dict(
                {"name": "gpuserve.sglang." + role.partition(":")[0]},
                **({"tasks_from": role.partition(":")[2]} if ":" in role else {})), "vars": variables},
            {"name": "not refused " + case, "ansible.builtin.set_fact": {
                "__said": "{{ __said | default({}) | combine({'%s': {'accepted': true}}) }}" % case}}],
            "rescue": [{"name": "refused " + case, "ansible.builtin.set_fact": {
                "__said": "{{ __said | default({}) | combine({'%s': {'accepted': false, 'task': ansible_failed_task.name,"
                          " 'msg': ansible_failed_result.msg}}) }}" % case}}]})
    record = {"content": "{{ __said | to_json }}", "dest": str(tmp / "said.json")}
    tasks.append({"name": "the record", "ansible.builtin.copy": record, "changed_when": False})
    p = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}], tmp)
    assert p.returncode == 0, p.stdout[-3000:]
    return json.loads((tmp / "said.json").read_text()), recap(p.stdout)


@pytest.mark.parametrize("case,role,variables,message", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_named_by_the_preflight_before_anything_changes(refusals, case, role, variables, message):
    said = refusals[0]
    assert not said[case]["accepted"], "%s: the role went on past its preflight" % case
    task, msg = said[case]["task"], said[case]["msg"]
    assert re.search(message, " ".join(str(msg).split())), (case, task, msg)
    assert "Validating arguments" not in task, (case, task)          # the preflight refused it, not the arg spec


def test_nothing_changed_in_any_case(refusals):
    assert refusals[1]["changed"] == 0 and refusals[1]["rescued"] == len(CASES)


@pytest.mark.parametrize("role, old, new", [("sglang_server", "sglang_server_service_group", "sglang_server_unix_group"),
                                            ("sglang_venv", "sglang_venv_group", "sglang_venv_unix_group"),
                                            ("sglang_router", "sglang_router_group", "sglang_router_unix_group")])
def test_a_unix_group_set_under_its_name_before_0_13_is_still_read_and_said(tmp_path, role, old, new):
    """0.13.0 renamed the service account's unix group ("group" means a multi-node group only): the old role name and
    gpuserve_service_group are still read, by precedence, and the preflight names each with its new name."""
    def run(variables):
        include = {"ansible.builtin.include_role": {"name": "gpuserve.sglang." + role, "tasks_from": "preflight",
                                                    "public": True}}
        show = {"ansible.builtin.debug": {"msg": "GROUP={{ %s }}" % new}}
        plays = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars": variables,
                  "tasks": [{"block": [include, show], "rescue": [show]}]}]
        p = run_playbook(plays, tmp_path)
        return " ".join(p.stdout.split()), re.findall(r"msg: GROUP=(\S*)", p.stdout)
    out, group = run({"gpuserve_service_group": "gpu", old: "sgl"})
    assert group == ["sgl"], out[-3000:]
    assert ("[DEPRECATED] %s is renamed %s in gpuserve.sglang 0.13.0 (\"group\" now means a multi-node group only)"
            % (old, new)) in out
    assert "[DEPRECATED] gpuserve_service_group is renamed gpuserve_service_unix_group" in out
    out, group = run({"gpuserve_service_group": "gpu"})
    assert group == ["gpu"] and "[DEPRECATED] %s " % old not in out
    out, group = run({"gpuserve_service_unix_group": "ops"})
    assert group == ["ops"] and "[DEPRECATED]" not in out


def test_a_prefill_server_whose_venv_cannot_import_its_transfer_engine_is_refused_before_anything_changes(tmp_path):
    """#59 item 3: a prefill server on the mooncake backend, with an interpreter that has no Mooncake (this test's
    own, a real CPython): refused by the role's import of mooncake.engine - naming the setting that installs it, with
    Python's own words - before any file is written; a plain server with the same interpreter is not asked."""
    import shutil  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "model_configs", "llama-3.1-8b.json"), str(model / "config.json"))
    server = {"sglang_server_python": sys.executable, "sglang_server_model_path": str(model), "sglang_server_plan": False,
              "sglang_server_env_dir": str(tmp_path / "env"), "sglang_server_disaggregation_mode": "prefill"}
    plays = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "the server", "vars": server,
         "ansible.builtin.include_role": {"name": "gpuserve.sglang.sglang_server", "tasks_from": "preflight"}}]}]
    p = run_playbook(plays, tmp_path)
    out = " ".join(p.stdout.split())
    assert p.returncode != 0
    assert ("localhost: sglang_server_disaggregation_transfer_backend=mooncake needs mooncake.engine in the venv, and %s "
            "cannot import it: ModuleNotFoundError: No module named 'mooncake'." % sys.executable) in out, out[-3000:]
    assert ("Build the venv with it: sglang_venv_transfer_engine=mooncake (mooncake-non-cuda on a machine without "
            "CUDA) - role sglang_venv installs Mooncake's pinned wheels and the libraries its engine links even over TCP "
            "(libibverbs1, libcurl4, libnuma1)") in out
    assert "Nothing was changed." in out
    assert "TASK [gpuserve.sglang.sglang_server : The transfer engine is there]" in p.stdout
    assert not (tmp_path / "env").exists()
    plain = run_playbook([dict(plays[0], tasks=[dict(plays[0]["tasks"][0], vars=dict(
        server, sglang_server_disaggregation_mode=""))])], tmp_path)
    assert recap(plain.stdout)["failed"] == 0, plain.stdout[-3000:]
    lines = [line for line in plain.stdout.splitlines() if line.strip()]
    at = [i for i, line in enumerate(lines) if "The KV transfer engine imports in the venv" in line]
    assert at and lines[at[0] + 1].startswith("skipping: [localhost]"), plain.stdout[-3000:]
