# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# Each filter imports the module_utils package it uses in its own body: Ansible runs each task in a worker process of
# its own that loads this file again, and importing every package up front cost about 0.1 s per task that used any
# of these filters (measured on the lab); now a task pays for what it uses.


def sglang_log(text):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import logs as logs_utils
    if not isinstance(text, str):
        raise AnsibleFilterError("sglang_log: expected log text, got %s" % type(text).__name__)
    return logs_utils.parse_log(text)


def sglang_argv(args, python, model_path, config_file=None):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    try:
        return server_utils.server_argv(python, model_path, args, config_file=config_file or None)
    except server_utils.ArgvError as exc:
        raise AnsibleFilterError("sglang_argv: %s" % exc)


def sglang_args_problems(args, release=None):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    if not isinstance(args, dict):
        raise AnsibleFilterError("sglang_args_problems: expected the server args as a mapping")
    return server_utils.validate_args(args, release or None)


def sglang_secret_args(args, program="server"):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    if not isinstance(args, dict) or program not in ("server", "router"):
        raise AnsibleFilterError("sglang_secret_args: expected a mapping of args, and program server or router")
    return server_utils.secret_names(list(args), program)


def sglang_args_from_argv(argv):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    if not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError("sglang_args_from_argv: expected the argv list of a launch record")
    return server_utils.args_from_argv(list(argv))


def path_entries(paths, **attrs):
    """Paths as entries of gpuserve.sglang.layout's paths (or pve_lxc_conf's devices), each with the same attributes.
    In place of map('community.general.dict_kv', 'path') | map('combine', ...): a task's worker that names any
    community.general filter loads that collection's routing first (about 80 ms, in every such task)."""
    if isinstance(paths, (str, bytes, dict)) or not hasattr(paths, "__iter__"):
        raise AnsibleFilterError("path_entries: expected a list of paths, got %s" % type(paths).__name__)
    paths = list(paths)
    bad = [p for p in paths if not isinstance(p, str) or not p]
    if bad:
        raise AnsibleFilterError("path_entries: every path must be a non-empty string, got %r" % (bad[0],))
    if "path" in attrs:
        raise AnsibleFilterError("path_entries: 'path' comes from the list, not from the attributes")
    return [dict(attrs, path=p) for p in paths]


def sglang_is_loopback(host):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.is_loopback(host)


def _containers(containers, name):
    """``containers``: gpuserve_containers (playbooks/vars/containers.yml), one record per sglang_containers host.
    Before 0.13.0 the group filters took (hostvars, names, ...): ``*before_0_13`` takes those extra arguments so that
    such a call is refused here, by name, rather than by a count of arguments."""
    from collections.abc import Mapping
    if isinstance(containers, Mapping) or not all(isinstance(c, Mapping) and "name" in c for c in containers or []):
        raise AnsibleFilterError(
            "%s takes gpuserve_containers (one record per sglang_containers host, from the collection's "
            "playbooks/vars/containers.yml), not hostvars: load that file (vars_files) and write "
            "gpuserve_containers | gpuserve.sglang.%s(...)" % (name, name))
    return list(containers or [])


def _group_hosts(containers):
    hosts = []
    for c in containers:
        if not c.get("group"):
            continue
        gpus = c.get("gpus")
        hosts.append(dict(c, gpus=len(gpus) if isinstance(gpus, (list, tuple)) and gpus else None))
    return hosts


def sglang_server_groups(containers, *before_0_13):
    """The multi-node groups among ``containers`` (gpuserve_containers, inventory order)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.group_layout(_group_hosts(_containers(containers, "sglang_server_groups")))


def sglang_replica_hosts(containers, *before_0_13):
    """The containers that serve SGLang's API: a multi-node group's rank 0, not its other ranks."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    containers = _containers(containers, "sglang_replica_hosts")
    return server_utils.serving([c["name"] for c in containers], sglang_server_groups(containers))


def sglang_group_restart(containers, group, *before_0_13):
    """The command that restarts every rank of multi-node group ``group`` together (its nodes, then its ranks)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    containers = _containers(containers, "sglang_group_restart")
    ranks = [r["name"] for r in sglang_server_groups(containers)[group]["ranks"]]
    return server_utils.restart_command(ranks, _nodes(containers, ranks))


def sglang_group_status(containers, hosts=None, *before_0_13):
    """One verdict per multi-node group among ``containers``, from each rank's status (status.yml); with ``hosts``
    (the play's), only the groups with a rank among them."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    containers = _containers(containers, "sglang_group_status")
    by_name = {c["name"]: c for c in containers}
    out = []
    for group, layout in sorted(sglang_server_groups(containers).items()):
        ranks = [r["name"] for r in layout["ranks"]]
        if hosts is not None and not set(ranks) & set(hosts):
            continue
        statuses = {}
        for h in ranks:
            st = by_name[h].get("status")
            if st is None and hosts is not None and h in hosts:      # in the run, but no status: it could not be read
                st = {"unit": "unknown (no status: unreachable, or its status failed - see above)"}
            statuses[h] = st
        out.append(server_utils.group_status(group, ranks, statuses, _nodes(containers, ranks)))
    return out


def sglang_scrape_targets(containers, routers=None, nodes=None, exporter_port=9100):
    """Prometheus file_sd target groups by job for the inventory's servers, containers, routers and nodes."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    containers = _containers(containers, "sglang_scrape_targets")
    return server_utils.scrape_targets(containers, sglang_server_groups(containers), routers or [], nodes or [],
                                       int(exporter_port))


def _nodes(containers, ranks):
    by_name = {c["name"]: c for c in containers}
    nodes = []
    for h in ranks:
        node = by_name[h].get("node")
        if node and node not in nodes:
            nodes.append(node)
    return nodes


def sglang_group_mismatches(ranks, group):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.rank_mismatches(group, ranks)


def sglang_pd_mismatches(servers):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    if not isinstance(servers, list) or not all(isinstance(s, dict) and "name" in s and "mode" in s for s in servers):
        raise AnsibleFilterError("sglang_pd_mismatches: expected [{name, mode, facts}] of the prefill and decode servers")
    return server_utils.pd_mismatches(servers)


def sglang_manifest_digest(manifest):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.manifest_digest(manifest)


def sglang_local_url(host, port=30000):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.local_url(host, port)


def sglang_systemd_exec(argv):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        raise AnsibleFilterError("sglang_systemd_exec: expected an argv list of strings")
    return server_utils.systemd_exec_line(list(argv))


def uv_lock_pins(text):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import venv as venv_utils
    if not isinstance(text, str):
        raise AnsibleFilterError("uv_lock_pins: expected the text of a lock file")
    return venv_utils.parse_lock(text)


def cuda_driver_check(pins, driver_version, node="the node", containers=()):
    """The node's driver against the CUDA of a lock's torch (``pins``: uv_lock_pins' result): level ok, limited,
    refuse or unknown, with the words and the fix."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import venv as venv_utils
    if not isinstance(pins, dict):
        raise AnsibleFilterError("cuda_driver_check: expected the pins of a lock (uv_lock_pins)")
    return venv_utils.driver_check(str(driver_version or ""), venv_utils.lock_cuda(pins), str(node),
                                   [str(c) for c in containers or []])


def lock_wheels_check(lock_text, tags_text, python, glibc, machine, packages=None, lock_name="the lock",
                      where="the container"):
    """Whether a lock's pins install on the container's CPython, glibc and machine, from the tags record beside the
    lock (None: the lock has none - level unknown)."""
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import wheels
    if not isinstance(lock_text, str) or not (tags_text is None or isinstance(tags_text, str)):
        raise AnsibleFilterError("lock_wheels_check: expected the text of a lock file and of its .tags record")
    return wheels.wheels_check(lock_text, tags_text, str(python), str(glibc), str(machine),
                               [str(p) for p in packages or []] or None, str(lock_name), str(where))


def flash_attn_wheel_problems(filename, torch_version, cuda_version, python_version, cxx11abi=True, machine="x86_64"):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import venv as venv_utils
    return venv_utils.flash_attn_mismatches(str(filename), str(torch_version), str(cuda_version),
                                            str(python_version), bool(cxx11abi), str(machine))


def flash_attn_max_jobs(cpus, mem_total_mib, mib_per_job=6144):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import venv as venv_utils
    return venv_utils.max_build_jobs(cpus, mem_total_mib, mib_per_job)


def nvidia_gpus_problem(facts, selectors, node):
    """Why a container using GPUs ``selectors`` of ``node`` cannot run on them, from the node's nvidia_gpu_facts; ''
    when it can (module_utils.host nvidia.gpus_problem)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import host as host_utils
    if facts is not None and not isinstance(facts, dict):
        raise AnsibleFilterError("nvidia_gpus_problem: expected the node's nvidia_gpu_facts (gpuserve_nvidia)")
    return host_utils.gpus_problem(facts or {}, list(selectors or []), str(node))


def nvidia_select_gpus(gpus, selectors):
    """The GPUs (nvidia_gpu_facts' list) named by device minors, UUIDs or PCI bus ids; every GPU when none given."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import host as host_utils
    if not isinstance(gpus, list):
        raise AnsibleFilterError("nvidia_select_gpus: expected the gpus list of nvidia_gpu_facts")
    selected, problems = host_utils.select_gpus(list(selectors or []), gpus)
    if problems:
        raise AnsibleFilterError("lxc_gpu_passthrough_gpus: %s" % "; ".join(problems))
    missing = [g.get("uuid") for g in selected if g.get("minor") is None]
    if missing:
        raise AnsibleFilterError("nvidia_select_gpus: the driver gives no device minor for %s (no "
                                 "/proc/driver/nvidia/gpus/*/information): cannot tell which /dev/nvidiaN they are"
                                 % ", ".join(missing))
    return selected


def nvidia_gpu_minors(selectors, gpus):
    """N of /dev/nvidiaN for each selector: a minor stays itself (checked against the node's GPUs when the driver
    reports them), a UUID or PCI bus id becomes its GPU's minor (needs the driver's report)."""
    selectors = list(selectors or [])
    if not gpus:
        named = [s for s in selectors if not (isinstance(s, int) or str(s).strip().isdigit())]
        if named:
            raise AnsibleFilterError("lxc_gpu_passthrough_gpus: %s name GPUs by UUID or PCI bus id, but the node's "
                                     "driver reports no GPU to resolve them; use /dev/nvidiaN numbers" % named)
        return [int(s) for s in selectors]
    return [g["minor"] for g in nvidia_select_gpus(gpus, selectors)] if selectors else []


def apt_policy_versions(text, version=None):
    from ansible_collections.gpuserve.sglang.plugins.module_utils import host as host_utils
    if not isinstance(text, str):
        raise AnsibleFilterError("apt_policy_versions: expected the text of apt-cache policy")
    return host_utils.policy_versions(text, version)


def hf_repo_id_problem(repo_id):
    """Why repo_id is not a Hub model id (the one rule hf_snapshot, the hf_model role and deploy.yml apply), or ''."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import hub as hub_utils
    return hub_utils.repo_id_problem(repo_id) or ""


def pve_vmid_problem(value, name="vmid"):
    """Why value is not a Proxmox CT id, naming the variable ``name`` (the one rule of deploy.yml, the roles and
    pve_lxc), or ''."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import pve as pve_utils
    return pve_utils.vmid_problem(value, name)


def lxc_passthrough_check(nv, gpus, uvm, mode, host, proc_devices, vmid=None):
    """Role lxc_gpu_passthrough's preflight: the nodes to pass, the command that opens them inside CT ``vmid``, and
    the first reason it cannot (module_utils.pve.conf passthrough_check)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import pve as pve_utils
    return pve_utils.passthrough_check(dict(nv or {}), list(gpus or []), bool(uvm), str(mode), str(host),
                                       str(proc_devices), vmid=vmid)


def lxc_passthrough_access(opened, nodes):
    """What opening each passed node inside the CT said (module_utils.pve.conf passthrough_access)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import pve as pve_utils
    return pve_utils.passthrough_access(opened, list(nodes or []))


def sglang_router_argv(host, port, policy, prometheus_host=None, prometheus_port=None, extra=None, pd_prefill=None,
                       pd_decode=None):
    """The router's arguments without workers and key (module_utils.server.router router_argv); with ``pd_prefill``
    and ``pd_decode``, PD mode's flags and servers."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    try:
        return server_utils.router_argv(host, port, policy, [], prometheus_host, prometheus_port, extra or {},
                                        pd_prefill or [], pd_decode or [])
    except (server_utils.RouterError, TypeError, ValueError) as e:
        raise AnsibleFilterError("sglang_router_argv: %s" % e)


def sglang_disaggregation_problems(mode, backend="mooncake", bootstrap_port=8998, args=None, release=None):
    """What is wrong with a server's prefill/decode settings, each naming its sglang_server_ variable
    (module_utils.server.argv disaggregation_problems)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.disaggregation_problems(mode, backend, bootstrap_port, args if isinstance(args, dict) else {},
                                                release)


def sglang_disaggregation_args(mode, backend="mooncake", bootstrap_port=8998):
    """The args a prefill or decode server gets from the role ({} for a plain server)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return server_utils.disaggregation_args(mode, backend, bootstrap_port)


def sglang_router_problems(host, port, policy, workers, extra=None, keyed=True, public_ok=False, prometheus_host=None,
                           pd_prefill=None, pd_decode=None):
    """What is wrong with the router's settings, each naming its sglang_router_ variable (module_utils.server.router)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    return (server_utils.router_problems(host, port, policy, workers, extra, "sglang_router_", bool(keyed),
                                         bool(public_ok), prometheus_host)
            + server_utils.pd_problems(pd_prefill, pd_decode, workers, "sglang_router_"))


def sglang_unit_value(value, name):
    """One value for the unit template: control characters refused naming ``name``, ``%`` doubled."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    try:
        return server_utils.unit_value(value, name)
    except ValueError as exc:
        raise AnsibleFilterError("sglang_unit_value: %s" % exc)


def sglang_unit_problems(values, unit_lists=None):
    """What the unit template would refuse: values holding a control character, and in the lists named by
    ``unit_lists`` anything that is not a unit name."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import server as server_utils
    problems = server_utils.control_problems(values)
    for name in unit_lists or []:
        problems.extend(server_utils.unit_name_problems(values.get(name, []), name))
    return problems


def gpuserve_secret_problem(value, name):
    """Why a key or token cannot be used, naming the variable, or '' (module_utils.host files.secret_problem)."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils import host as host_utils
    return host_utils.secret_problem(name, value) or ""


class FilterModule(object):
    def filters(self):
        return {"sglang_log": sglang_log, "sglang_argv": sglang_argv, "sglang_systemd_exec": sglang_systemd_exec,
                "sglang_args_problems": sglang_args_problems, "sglang_secret_args": sglang_secret_args,
                "apt_policy_versions": apt_policy_versions,
                "nvidia_select_gpus": nvidia_select_gpus, "nvidia_gpu_minors": nvidia_gpu_minors, "sglang_is_loopback": sglang_is_loopback,
                "sglang_local_url": sglang_local_url, "sglang_server_groups": sglang_server_groups,
                "sglang_replica_hosts": sglang_replica_hosts, "sglang_group_restart": sglang_group_restart,
                "sglang_group_status": sglang_group_status, "sglang_scrape_targets": sglang_scrape_targets,
                "sglang_group_mismatches": sglang_group_mismatches,
                "sglang_pd_mismatches": sglang_pd_mismatches, "sglang_manifest_digest": sglang_manifest_digest,
                "sglang_args_from_argv": sglang_args_from_argv,
                "uv_lock_pins": uv_lock_pins, "flash_attn_wheel_problems": flash_attn_wheel_problems,
                "cuda_driver_check": cuda_driver_check, "lock_wheels_check": lock_wheels_check,
                "flash_attn_max_jobs": flash_attn_max_jobs, "hf_repo_id_problem": hf_repo_id_problem,
                "pve_vmid_problem": pve_vmid_problem, "lxc_passthrough_check": lxc_passthrough_check,
                "nvidia_gpus_problem": nvidia_gpus_problem,
                "lxc_passthrough_access": lxc_passthrough_access, "sglang_router_argv": sglang_router_argv,
                "sglang_router_problems": sglang_router_problems, "path_entries": path_entries,
                "sglang_disaggregation_problems": sglang_disaggregation_problems,
                "sglang_disaggregation_args": sglang_disaggregation_args,
                "gpuserve_secret_problem": gpuserve_secret_problem, "sglang_unit_value": sglang_unit_value,
                "sglang_unit_problems": sglang_unit_problems}
