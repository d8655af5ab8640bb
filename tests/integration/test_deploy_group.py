"""deploy.yml's multi-node check (tag group): two containers with one sglang_server_group are two ranks of one
server - run here as two local hosts on this machine's own non-loopback address. A rank holding other model files is
refused by name with nothing launched; ranks that match meet at rank 0's rendezvous (a real listen and TCP connect)
and each gets nnodes, its node_rank and rank 0's dist_init_addr."""
import json
import subprocess

import pytest
import yaml

from ansible_helpers import free_port
from test_deploy_playbook import PLAYBOOK, ansible_playbook


def local_address():
    for addr in subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split():
        if ":" not in addr and not addr.startswith("127."):
            return addr
    return None


def rank_dir(tmp_path, name, oid):
    venv, model = tmp_path / name / "venv", tmp_path / name / "model"
    venv.mkdir(parents=True)
    model.mkdir(parents=True)
    (venv / ".gpuserve-build.json").write_text(json.dumps({"build": "0123456789abcdef", "lock_sha256": "a" * 64}))
    (model / ".gpuserve-snapshot.json").write_text(json.dumps({"revision": "c" * 40, "complete": True, "files": [
        {"path": "config.json", "size": 10, "oid": oid}]}))
    return str(venv), str(model)


def inventory(tmp_path, addr, port, oids):
    hosts = {}
    for i, (name, oid) in enumerate(zip(("rank-a", "rank-b"), oids)):
        venv, model = rank_dir(tmp_path, name, oid)
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                       "proxmox_vmid": 129 + i, "gpuserve_node": "pve1", "gpuserve_venv": venv,
                       "sglang_server_model_path": model, "sglang_server_group": "qwen",
                       "sglang_server_group_addr": addr, "sglang_server_dist_port": port,
                       "sglang_server_args": {"tp_size": 2},
                       "sglang_server_plan_gpus": [{"name": "NVIDIA RTX A6000", "memory_total_mib": 49140 + i}]}
    inv = {"all": {"children": {
        "pve_nodes": {"hosts": {"pve1": {"ansible_connection": "local",
                                         "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "sglang_containers": {"hosts": hosts}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def test_a_rank_with_other_model_files_is_refused_and_nothing_launches(tmp_path):
    addr = local_address()
    p = ansible_playbook("-i", inventory(tmp_path, addr, free_port(), ["1" * 40, "2" * 40]), PLAYBOOK, "--tags", "group")
    assert p.returncode != 0
    assert ("rank-b (rank 1 of group qwen): the model's files (paths and hashes of the manifest) - not the same as "
            "rank 0's (rank-b: ") in p.stdout, p.stdout[-3000:]
    assert "Nothing was launched." in p.stdout
    assert "Rank 0 listens" not in p.stdout.split("fatal:")[0].split("Every rank runs rank 0's")[-1]


def test_matching_ranks_meet_at_rank_0s_rendezvous_and_get_their_args(tmp_path):
    addr, port = local_address(), free_port()
    p = ansible_playbook("-i", inventory(tmp_path, addr, port, ["1" * 40, "1" * 40]), PLAYBOOK, "--tags", "group", "-v")
    assert p.returncode == 0, p.stdout[-4000:]
    out = p.stdout
    listened = out[out.index("TASK [Rank 0's listener has ended]"):]
    # the stdout callback prints results as YAML
    accepted = listened.split("accepted:", 1)[1].split("ansible_job_id", 1)[0]
    assert addr in accepted, listened[:2000]
    want = "%s:%d" % (addr, port)
    assert out.count("dist_init_addr: %s" % want) >= 2, out[-3000:]
    assert "node_rank: 0" in out and "node_rank: 1" in out and "nnodes: 2" in out
    # NCCL and Gloo on the interface that holds the address (as `ip` tells it), for both ranks; the members in order
    iface = subprocess.run(["ip", "-o", "-4", "addr", "show", "to", addr], capture_output=True, text=True,
                           check=True).stdout.split()[1]
    assert out.count("NCCL_SOCKET_IFNAME: %s" % iface) == 2 and out.count("GLOO_SOCKET_IFNAME: %s" % iface) == 2
    assert out.count("sglang_server_group_members:\n        - rank-a\n        - rank-b") == 2, out[-3000:]
    # each rank is planned as a rank of the whole layout: the GPUs of both ranks, in rank order
    both = out.split("sglang_server_plan_gpus:")[1:]
    assert len(both) == 2 and all(g.index("memory_total_mib: 49140") < g.index("memory_total_mib: 49141")
                                  for g in both), out[-3000:]


def local_address6():
    """A global or unique-local IPv6 address of this machine and the interface holding it (as `ip` tells), or None."""
    out = subprocess.run(["ip", "-o", "-6", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts[1] != "lo":
            return parts[3].split("/")[0], parts[1]
    return None


def test_ranks_meet_at_an_ipv6_rendezvous_and_nccl_gets_its_interface(tmp_path):
    found = local_address6()
    if not found:
        pytest.skip("no global IPv6 address on this machine")
    addr, iface = found
    port = free_port()
    p = ansible_playbook("-i", inventory(tmp_path, addr, port, ["1" * 40, "1" * 40]), PLAYBOOK, "--tags", "group", "-v")
    assert p.returncode == 0, p.stdout[-4000:]
    out = p.stdout
    assert out.count("dist_init_addr: '[%s]:%d'" % (addr, port)) + out.count("dist_init_addr: [%s]:%d" % (addr, port)) >= 2, \
        out[-3000:]
    assert out.count("NCCL_SOCKET_IFNAME: %s" % iface) == 2 and out.count("GLOO_SOCKET_IFNAME: %s" % iface) == 2


def test_the_operators_nccl_interface_wins(tmp_path):
    path = inventory(tmp_path, local_address(), free_port(), ["1" * 40, "1" * 40])
    inv = yaml.safe_load(open(path))
    inv["all"]["children"]["sglang_containers"]["hosts"]["rank-b"]["sglang_server_public_env"] = {
        "NCCL_SOCKET_IFNAME": "=ib0"}
    open(path, "w").write(yaml.safe_dump(inv))
    p = ansible_playbook("-i", path, PLAYBOOK, "--tags", "group", "-v")
    assert p.returncode == 0, p.stdout[-4000:]
    assert p.stdout.count("NCCL_SOCKET_IFNAME: =ib0") == 1 and p.stdout.count("NCCL_SOCKET_IFNAME:") == 2


def test_a_rank_0_address_that_is_not_its_own_is_named(tmp_path):
    """Rank 0's sglang_server_group_addr is an address it does not have (TEST-NET-1): it cannot listen there, rank 1
    cannot connect - both are named with the fix, and nothing launched."""
    p = ansible_playbook("-i", inventory(tmp_path, "192.0.2.1", free_port(), ["1" * 40, "1" * 40]), PLAYBOOK,
                         "--tags", "group")
    assert p.returncode != 0
    out = p.stdout
    assert "rank-b (rank 1 of group qwen) cannot reach rank 0's rendezvous 192.0.2.1:" in out, out[-3000:]
    assert "Open TCP port" in out and "Nothing was launched." in out


def test_a_decode_server_on_another_model_revision_is_refused_before_any_server_of_the_pair_launches(tmp_path):
    """#59 item 3: deploy.yml's prefill/decode check (tag pd), as the group's: a decode server whose model is another
    revision than its prefill server's is refused by name, both values shown, with nothing launched; with one revision
    the pair passes, and a plain server beside it is not asked."""
    path = inventory(tmp_path, "127.0.0.1", free_port(), ["1" * 40, "1" * 40])
    inv = yaml.safe_load(open(path))
    hosts = inv["all"]["children"]["sglang_containers"]["hosts"]
    for name, mode in (("rank-a", "prefill"), ("rank-b", "decode")):
        hosts[name].pop("sglang_server_group")
        hosts[name]["sglang_server_disaggregation_mode"] = mode
    plain = dict(hosts["rank-a"], sglang_server_model_path="/nonexistent", proxmox_vmid=131)
    plain.pop("sglang_server_disaggregation_mode")
    hosts["plain"] = plain
    model_b = hosts["rank-b"]["sglang_server_model_path"] + "/.gpuserve-snapshot.json"
    with open(model_b) as fh:
        manifest = json.load(fh)
    with open(model_b, "w") as fh:
        json.dump(dict(manifest, revision="d" * 40), fh)
    with open(path, "w") as fh:
        yaml.safe_dump(inv, fh)
    p = ansible_playbook("-i", path, PLAYBOOK, "--tags", "pd")
    assert p.returncode != 0
    assert ("rank-b (decode server): the model revision - not the same as rank-a's, the prefill server's (rank-b: "
            "dddddddddddd, rank-a: cccccccccccc) - pin one hf_model_revision for every prefill and decode server. "
            "Nothing was launched.") in " ".join(p.stdout.split()), p.stdout[-3000:]
    assert "TASK [Containers - SGLang served" not in p.stdout and "PLAY [Containers - SGLang served" not in p.stdout
    with open(model_b, "w") as fh:
        json.dump(manifest, fh)
    ok = ansible_playbook("-i", path, PLAYBOOK, "--tags", "pd")
    assert ok.returncode == 0, ok.stdout[-3000:]
    asked = ok.stdout.split("TASK [What this server would run")[1].split("TASK [")[0]
    assert "rank-a" in asked and "rank-b" in asked and "plain" not in asked, asked
