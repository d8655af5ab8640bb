"""restart.yml (the rolling restart runbook) before any container is touched: a rank of a multi-node server is
refused - its ranks meet once, at start-up, so one restarted alone waits for peers that never come - with the
group's ranks and the deploy.yml command that restarts them together; a container outside any group goes on to
the roll. (The roll itself is the sglang_server role with sglang_server_restart: true.)"""
import os

import yaml

from test_deploy_playbook import ansible_playbook
from ansible_helpers import ROOT

PLAYBOOK = os.path.join(ROOT, "playbooks", "restart.yml")


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


def test_a_rank_of_a_group_is_refused_with_the_command_that_restarts_the_group(tmp_path):
    # --tags none: only the check (tagged always) could run; the roll would be skipped even if it were reached
    p = ansible_playbook("-i", inventory(tmp_path), PLAYBOOK, "--limit", "ct101", "--tags", "none")
    assert p.returncode != 0, p.stdout
    out = p.stdout
    assert "ct101 is a rank of the multi-node server lab (ct100, ct101): a rank restarted alone waits for peers" in out
    assert ("`ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e sglang_server_restart=true "
            "--limit pve1,ct100,ct101` (the nodes for their GPU facts; every rank is stopped") in out
    assert "Nothing was restarted." in out
    assert "Rolling restart of SGLang" not in out                  # the roll never started


def test_a_container_outside_any_group_goes_on_to_the_roll(tmp_path):
    p = ansible_playbook("-i", inventory(tmp_path), PLAYBOOK, "--limit", "ct129", "--tags", "none")
    assert p.returncode == 0, p.stdout
    assert "PLAY [Rolling restart of SGLang]" in p.stdout
    assert "is a rank of the multi-node server" not in p.stdout


def test_all_containers_at_once_are_refused_before_any_restart(tmp_path):
    p = ansible_playbook("-i", inventory(tmp_path), PLAYBOOK, "--tags", "none")
    assert p.returncode != 0
    assert "ct100 is a rank of the multi-node server lab" in p.stdout
    assert "PLAY [Rolling restart of SGLang]" not in p.stdout      # ct129 is not restarted either
