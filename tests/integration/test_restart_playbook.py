"""restart.yml and rollout.yml (the runbooks that restart containers one at a time) before any container is
touched: a rank of a multi-node server is refused - its ranks meet once, at start-up, so one restarted alone waits
for peers that never come - with the group's ranks and the deploy.yml command that restarts them together; a
container outside any group goes on to the roll. And the replicas a router is given: rank 0 of a group, not its
other ranks (SGLang 0.5.9 serves no API there)."""
import json
import os

import pytest
import yaml

from test_deploy_playbook import ansible_playbook
from ansible_helpers import ROOT

RUNBOOKS = {"restart.yml": "Rolling restart of SGLang", "rollout.yml": "Rolling restart behind the router"}


def inventory(tmp_path):
    local = {"ansible_connection": "local", "gpuserve_node": "pve1"}
    hosts = {"ct100": dict(local, proxmox_vmid=100, sglang_server_group="lab"),
             "ct101": dict(local, proxmox_vmid=101, sglang_server_group="lab"),
             "ct129": dict(local, proxmox_vmid=129)}
    inv = {"all": {"children": {"pve_nodes": {"hosts": {"pve1": {"ansible_connection": "local"}}},
                                "sglang_containers": {"hosts": hosts}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


@pytest.mark.parametrize("runbook", sorted(RUNBOOKS))
def test_a_rank_of_a_group_is_refused_with_the_command_that_restarts_the_group(tmp_path, runbook):
    # --tags none: only the check (tagged always) could run; the roll would be skipped even if it were reached
    p = ansible_playbook("-i", inventory(tmp_path), os.path.join(ROOT, "playbooks", runbook), "--limit", "ct101",
                         "--tags", "none")
    assert p.returncode != 0, p.stdout
    out = p.stdout
    assert "ct101 is a rank of the multi-node server lab (ct100, ct101): a rank restarted alone waits for peers" in out
    assert ("`ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e sglang_server_restart=true "
            "--limit pve1,ct100,ct101` (the nodes for their GPU facts; every rank is stopped") in out
    assert "Nothing was restarted." in out
    assert RUNBOOKS[runbook] not in out                            # the roll never started


@pytest.mark.parametrize("runbook", sorted(RUNBOOKS))
def test_a_container_outside_any_group_goes_on_to_the_roll(tmp_path, runbook):
    p = ansible_playbook("-i", inventory(tmp_path), os.path.join(ROOT, "playbooks", runbook), "--limit", "ct129",
                         "--tags", "none")
    assert p.returncode == 0, p.stdout
    assert "PLAY [%s]" % RUNBOOKS[runbook] in p.stdout
    assert "is a rank of the multi-node server" not in p.stdout


@pytest.mark.parametrize("runbook", sorted(RUNBOOKS))
def test_all_containers_at_once_are_refused_before_any_restart(tmp_path, runbook):
    p = ansible_playbook("-i", inventory(tmp_path), os.path.join(ROOT, "playbooks", runbook), "--tags", "none")
    assert p.returncode != 0
    assert "ct100 is a rank of the multi-node server lab" in p.stdout
    assert "PLAY [%s]" % RUNBOOKS[runbook] not in p.stdout          # ct129 is not restarted either


def test_rollout_refuses_a_prefill_or_decode_server_with_the_command_that_restarts_the_pair(tmp_path):
    """#59 item 3: the router in PD mode names its prefill and decode servers on its command line - there is no worker
    API to take one out and put it back - so rollout.yml refuses them before anything moves, naming deploy.yml."""
    path = inventory(tmp_path)
    inv = yaml.safe_load(open(path))
    hosts = inv["all"]["children"]["sglang_containers"]["hosts"]
    hosts["ct130"] = dict(hosts["ct129"], proxmox_vmid=130, sglang_server_disaggregation_mode="decode")
    with open(path, "w") as fh:
        yaml.safe_dump(inv, fh)
    p = ansible_playbook("-i", path, os.path.join(ROOT, "playbooks", "rollout.yml"), "--limit", "ct129,ct130",
                         "--tags", "none")
    out = " ".join(p.stdout.split())
    assert p.returncode != 0
    assert ("ct130 is a decode server of the router's PD mode (sglang_server_disaggregation_mode): rollout.yml rolls "
            "plain replicas") in out, out[-3000:]
    assert "`ansible-playbook -i <inventory> playbooks/deploy.yml --tags server,router`" in out
    assert "PLAY [Rolling restart behind the router]" not in p.stdout and "ct129 is a" not in out


def test_the_router_is_given_rank_0_of_a_group_not_its_other_ranks(tmp_path):
    play = tmp_path / "replicas.yml"
    play.write_text(yaml.safe_dump([{
        "name": "The replicas", "hosts": "localhost", "gather_facts": False,
        "vars_files": [os.path.join(ROOT, "playbooks", "vars", f) for f in ("containers.yml", "replicas.yml")],
        "tasks": [{"name": "Show them", "ansible.builtin.debug": {
            "msg": "REPLICAS {{ gpuserve_replica_hosts | join(',') }} URLS {{ gpuserve_replica_urls | join(',') }}"}}]}]))
    inv = yaml.safe_load(open(inventory(tmp_path)))
    inv["all"]["children"]["sglang_containers"]["hosts"]["ct101"]["sglang_server_url"] = "http://10.0.3.101:30000"
    inv["all"]["children"]["sglang_containers"]["hosts"]["ct129"]["sglang_server_url"] = "http://10.0.3.129:30000/"
    inv["all"]["hosts"] = {"localhost": {"ansible_connection": "local"}}
    path = tmp_path / "hosts-urls.yml"
    path.write_text(yaml.safe_dump(inv))
    p = ansible_playbook("-i", str(path), str(play))
    assert p.returncode == 0, p.stdout
    assert "REPLICAS ct100,ct129 URLS http://127.0.0.1:30000,http://10.0.3.129:30000" in p.stdout


def test_prefill_and_decode_servers_are_the_routers_in_pd_mode_not_plain_replicas(tmp_path):
    """#59 item 3: containers with sglang_server_disaggregation_mode are handed to the router as PD mode's prefill
    (with each one's bootstrap port) and decode servers - what deploy.yml's and status.yml's router plays pass as
    sglang_router_pd_prefill / _pd_decode - and are no plain replicas; a plain container stays one (the router's
    preflight then refuses the mix, naming it)."""
    play = tmp_path / "pd.yml"
    play.write_text(yaml.safe_dump([{
        "name": "The replicas", "hosts": "localhost", "gather_facts": False,
        "vars_files": [os.path.join(ROOT, "playbooks", "vars", f) for f in ("containers.yml", "replicas.yml")],
        "tasks": [{"name": "Show them", "ansible.builtin.debug": {
            "msg": "URLS {{ gpuserve_replica_urls | join(',') }} PREFILL {% for p in gpuserve_pd_prefill %}{{ p.url }} "
                   "port {{ p.bootstrap_port }} (int: {{ p.bootstrap_port is integer }}) {% endfor %}"
                   "DECODE {{ gpuserve_pd_decode | join(',') }}"}}]}]))
    hosts = {"ct1": {"sglang_server_disaggregation_mode": "prefill", "sglang_server_url": "http://10.0.0.1:30000/",
                     "sglang_server_disaggregation_bootstrap_port": 9000},
             "ct2": {"sglang_server_disaggregation_mode": "decode", "sglang_server_url": "http://10.0.0.2:30000"},
             "ct3": {"sglang_server_url": "http://10.0.0.3:30000"}}
    path = tmp_path / "hosts-pd.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}},
                                            "children": {"sglang_containers": {"hosts": hosts}}}}))
    p = ansible_playbook("-i", str(path), str(play))
    assert p.returncode == 0, p.stdout
    assert ("URLS http://10.0.0.3:30000 PREFILL http://10.0.0.1:30000 port 9000 (int: True) "
            "DECODE http://10.0.0.2:30000") in " ".join(p.stdout.split()), p.stdout[-2000:]


def test_the_refusal_names_the_ranks_in_rank_order(tmp_path):
    inv = yaml.safe_load(open(inventory(tmp_path)))
    hosts = inv["all"]["children"]["sglang_containers"]["hosts"]
    hosts["ct100"]["sglang_server_node_rank"], hosts["ct101"]["sglang_server_node_rank"] = 1, 0
    path = tmp_path / "hosts-ranked.yml"
    path.write_text(yaml.safe_dump(inv))
    p = ansible_playbook("-i", str(path), os.path.join(ROOT, "playbooks", "restart.yml"), "--limit", "ct100",
                         "--tags", "none")
    assert p.returncode != 0
    assert "ct100 is a rank of the multi-node server lab (ct101, ct100)" in p.stdout, p.stdout[-2000:]
    assert "--limit pve1,ct101,ct100`" in p.stdout


def test_status_reads_a_group_as_a_whole_from_each_ranks_status(tmp_path):
    """status.yml's group play (filter sglang_group_status) over hostvars as the status play leaves them: rank 1 down
    names the group not serving with the command that restarts it; a group with no rank in the run is not reported;
    a rank in the run without a status is named as unreadable, not as left out."""
    play = tmp_path / "group-status.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Verdicts", "hosts": "sglang_containers", "gather_facts": False,
        "vars_files": [os.path.join(ROOT, "playbooks", "vars", "containers.yml")],
        "tasks": [{"name": "Keep them", "ansible.builtin.copy": {
            "content": "{{ gpuserve_containers | gpuserve.sglang.sglang_group_status(ansible_play_hosts_all) "
                       "| to_json }}", "dest": str(tmp_path / "verdicts.json"),
            "mode": "0600"}, "run_once": True, "delegate_to": "localhost"}]}]))
    inv = yaml.safe_load(open(inventory(tmp_path)))
    hosts = inv["all"]["children"]["sglang_containers"]["hosts"]
    hosts["ct100"]["sglang_server_status"] = {"unit": "active/running", "healthy": True, "max_total_num_tokens": 9}
    hosts["ct101"]["sglang_server_status"] = {"unit": "failed/failed", "failure": {"kind": "nccl_error"}}
    path = tmp_path / "hosts-status.yml"
    path.write_text(yaml.safe_dump(inv))

    def verdicts(*extra):
        p = ansible_playbook("-i", str(path), str(play), *extra)
        assert p.returncode == 0, p.stdout
        return json.loads((tmp_path / "verdicts.json").read_text())

    (lab,) = verdicts()
    assert lab["serving"] is False and lab["down"] == ["ct101"]
    assert lab["message"].startswith("group lab NOT serving: ct101 (rank 1) is failed/failed, its last launch failed: "
                                     "nccl_error; ct100 (rank 0) still runs")
    assert lab["restart"].endswith("--limit pve1,ct100,ct101")
    assert verdicts("--limit", "ct129") == []
    del hosts["ct101"]["sglang_server_status"]
    path.write_text(yaml.safe_dump(inv))
    (lab,) = verdicts()
    assert lab["down"] == ["ct101"] and "ct101 (rank 1) is unknown (no status: unreachable" in lab["message"]
    (lab,) = verdicts("--limit", "ct100")
    assert lab["serving"] is None and "ct101 (rank 1) not in this run" in lab["message"]


def test_the_group_filters_take_the_containers_records_and_refuse_hostvars_by_name(tmp_path):
    """The records of playbooks/vars/containers.yml carry what the layout needs (rank 0's address from
    sglang_server_group_addr, the GPU count from lxc_gpu_passthrough_gpus); hostvars, what the filters took before
    0.13.0, is refused with the name of what to pass instead."""
    play = tmp_path / "groups.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Layout", "hosts": "ct100", "gather_facts": False,
        "vars_files": [os.path.join(ROOT, "playbooks", "vars", "containers.yml")],
        "tasks": [{"name": "Keep it", "ansible.builtin.copy": {
            "content": "{{ {'groups': gpuserve_containers | gpuserve.sglang.sglang_server_groups,"
                       " 'replicas': gpuserve_containers | gpuserve.sglang.sglang_replica_hosts,"
                       " 'records': gpuserve_containers} | to_json }}",
            "dest": str(tmp_path / "layout.json"), "mode": "0600"}, "delegate_to": "localhost"},
            {"name": "The old call", "ansible.builtin.debug": {
                "msg": "{{ hostvars | gpuserve.sglang.sglang_server_groups(groups['sglang_containers']) }}"}}]}]))
    inv = yaml.safe_load(open(inventory(tmp_path)))
    hosts = inv["all"]["children"]["sglang_containers"]["hosts"]
    hosts["ct100"].update(sglang_server_group_addr="10.0.0.5", lxc_gpu_passthrough_gpus=[0, 1],
                          sglang_server_args={"tp_size": 4})
    hosts["ct101"].update(lxc_gpu_passthrough_gpus=["0000:41:00.0", "0000:42:00.0"], sglang_server_args={"tp_size": 4},
                          sglang_server_dist_port=5001)
    path = tmp_path / "hosts-layout.yml"
    path.write_text(yaml.safe_dump(inv))
    p = ansible_playbook("-i", str(path), str(play))
    assert p.returncode != 0
    assert ("sglang_server_groups takes gpuserve_containers (one record per sglang_containers host, from the "
            "collection's playbooks/vars/containers.yml), not hostvars") in p.stdout, p.stdout[-2000:]
    out = json.loads((tmp_path / "layout.json").read_text())
    lab = out["groups"]["lab"]
    assert lab["problems"] == [] and lab["nnodes"] == 2
    assert lab["dist_init_addr"] == "10.0.0.5:5000"
    assert [(r["name"], r["rank"]) for r in lab["ranks"]] == [("ct100", 0), ("ct101", 1)]
    assert out["replicas"] == ["ct100", "ct129"]
    rec = {r["name"]: r for r in out["records"]}
    assert rec["ct101"]["dist_port"] == 5001 and rec["ct129"]["group"] is None and rec["ct129"]["tp_size"] == 1
    assert rec["ct100"]["node"] == "pve1" and rec["ct100"]["status"] is None
