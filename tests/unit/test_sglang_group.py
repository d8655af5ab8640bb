"""sglang_group: one SGLang server across several containers - the inventory shape, each rank's args, and what every
rank must share with rank 0, each problem naming the host, its rank and the fix."""
import os
import time

import pytest

from unit_helpers import load_module_util

G = load_module_util("server.group")


def host(name, addr="10.0.3.27", rank=None, gpus=1, tp=2, pp=1, group="qwen", dist_port=5000, port=30000):
    return {"name": name, "group": group, "rank": rank, "addr": addr, "dist_port": dist_port, "port": port,
            "tp_size": tp, "pp_size": pp, "gpus": gpus}


def test_two_ranks_in_inventory_order_get_one_dist_init_addr():
    g = G.group_layout([host("ct100"), host("ct101", addr="10.0.3.101")])["qwen"]
    assert g["problems"] == [] and g["nnodes"] == 2 and g["dist_init_addr"] == "10.0.3.27:5000"
    assert g["rendezvous"] == {"addr": "10.0.3.27", "port": 5000}
    assert [(r["name"], r["args"]) for r in g["ranks"]] == [
        ("ct100", {"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.3.27:5000"}),
        ("ct101", {"nnodes": 2, "node_rank": 1, "dist_init_addr": "10.0.3.27:5000"})]


def test_explicit_ranks_choose_rank_0_and_ipv6_is_bracketed():
    g = G.group_layout([host("a", addr="fd00::1", rank=1), host("b", addr="fd00::2", rank=0)])["qwen"]
    assert g["problems"] == [] and g["dist_init_addr"] == "[fd00::2]:5000"
    assert g["rendezvous"] == {"addr": "fd00::2", "port": 5000}
    assert [(r["name"], r["rank"]) for r in g["ranks"]] == [("b", 0), ("a", 1)]


def test_only_rank_0_of_a_group_serves_the_api():
    """The replicas behind a router: a plain container, and rank 0 of each group - whatever the inventory order."""
    layout = G.group_layout([host("a", addr="fd00::1", rank=1), host("b", addr="fd00::2", rank=0),
                             host("c", group="gemma"), host("d", group="gemma")])
    assert G.serving(["solo", "a", "b", "c", "d", "other"], layout) == ["solo", "b", "c", "other"]
    assert G.serving(["x", "y"], {}) == ["x", "y"]
    # a group whose shape has problems still has its rank order (rank 0 is who would serve)
    broken = G.group_layout([host("a", addr="0.0.0.0"), host("b", tp=4)])
    assert broken["qwen"]["problems"] and G.serving(["a", "b"], broken) == ["a"]


def test_bad_shapes_are_named_with_host_rank_and_fix():
    g = G.group_layout([host("a", addr="0.0.0.0", gpus=2), host("b", tp=4)])["qwen"]
    text = "\n".join(g["problems"])
    assert "a (rank 0 of group qwen): sglang_server_group_addr is not set - set it to the address" in text
    assert "the ranks ask different tp_size x pp_size (a: 2 x 1, b: 4 x 1)" in text
    assert g["dist_init_addr"] is None
    g = G.group_layout([host("a", gpus=2), host("b")])["qwen"]
    assert g["problems"] == ["a (rank 0 of group qwen): 2 GPU(s) passed, the layout needs 1 per rank (tp_size 2 x "
                             "pp_size 1 / 2 containers) - pass 1 GPU(s) to each (lxc_gpu_passthrough_gpus) or change "
                             "tp_size/pp_size"]
    assert "loopback" in G.group_layout([host("a", addr="127.0.0.1"), host("b")])["qwen"]["problems"][0]
    assert "not a multiple of its 2 containers" in G.group_layout([host("a", tp=3), host("b", tp=3)])["qwen"]["problems"][0]


def test_ranks_must_be_complete_and_the_dist_port_not_the_http_port():
    text = "\n".join(G.group_layout([host("a", rank=0), host("b", rank=2)])["qwen"]["problems"])
    assert "the ranks are a=0, b=2; they must be 0 .. 1, each once" in text
    text = "\n".join(G.group_layout([host("a", rank=0), host("b")])["qwen"]["problems"])
    assert "sglang_server_node_rank is set on a but not on b" in text
    text = "\n".join(G.group_layout([host("a", dist_port=30000), host("b")])["qwen"]["problems"])
    assert "a (rank 0 of group qwen): sglang_server_dist_port 30000 is its HTTP port too" in text
    assert "only a is in it" in G.group_layout([host("a")])["qwen"]["problems"][0]


FACTS = {"build": "0123456789abcdef", "lock_sha256": "a" * 64, "model_revision": "c" * 40, "model_files": "d" * 64,
         "driver_version": "570.153.02"}


def test_a_rank_on_another_revision_or_driver_is_named_against_rank_0():
    ranks = [{"name": "ct101", "rank": 1, "facts": dict(FACTS, model_revision="e" * 40, driver_version="550.127.08")},
             {"name": "ct100", "rank": 0, "facts": dict(FACTS)}]
    problems = G.rank_mismatches("qwen", ranks)
    assert problems == [
        "ct101 (rank 1 of group qwen): the model revision - not the same as rank 0's (ct101: eeeeeeeeeeee, ct100: "
        "cccccccccccc) - pin one hf_model_revision for the group",
        "ct101 (rank 1 of group qwen): the NVIDIA driver - not the same as rank 0's (ct101: 550.127.08, ct100: "
        "570.153.02) - install the same nvidia_driver_version on every node of the group"]
    assert G.rank_mismatches("qwen", [{"name": "x", "rank": 0, "facts": FACTS}, {"name": "y", "rank": 1, "facts": FACTS}]) == []
    unknown = G.rank_mismatches("qwen", [{"name": "x", "rank": 0, "facts": FACTS},
                                         {"name": "y", "rank": 1, "facts": dict(FACTS, lock_sha256=None)}])
    assert unknown and "the SGLang lock (its sha256) - unknown here, known on rank 0's" in unknown[0]
    both = dict(FACTS, driver_version=None)
    assert G.rank_mismatches("qwen", [{"name": "x", "rank": 0, "facts": both}, {"name": "y", "rank": 1, "facts": both}]) == []


def test_a_prefill_or_decode_server_on_another_lock_or_model_is_named_against_the_first_prefill_server():
    """#59 item 3: a decode server takes the KV its prefill server computed - the same SGLang and the same model, or
    garbage. The driver and the venv build may differ (they do not shape the KV); an unknown on one side is named."""
    decode = dict(FACTS, model_revision="e" * 40, driver_version="550.127.08", build="other")
    pd = [{"name": "ct131", "mode": "decode", "facts": decode},
          {"name": "ct130", "mode": "prefill", "facts": dict(FACTS, lock_sha256="f" * 64)},
          {"name": "ct129", "mode": "prefill", "facts": dict(FACTS)}]
    assert G.pd_mismatches(pd) == [
        "ct130 (prefill server): the SGLang lock (its sha256) - not the same as ct129's, the prefill server's (ct130: "
        "ffffffffffff, ct129: aaaaaaaaaaaa) - build every prefill and decode server from the same lock (sglang_venv_lock)",
        "ct131 (decode server): the model revision - not the same as ct129's, the prefill server's (ct131: "
        "eeeeeeeeeeee, ct129: cccccccccccc) - pin one hf_model_revision for every prefill and decode server"]
    same = [{"name": "b", "mode": "decode", "facts": dict(FACTS, build="x", driver_version=None)},
            {"name": "a", "mode": "prefill", "facts": FACTS}]
    assert G.pd_mismatches(same) == [] and G.pd_mismatches([]) == []
    unknown = G.pd_mismatches([{"name": "a", "mode": "prefill", "facts": FACTS},
                               {"name": "b", "mode": "decode", "facts": dict(FACTS, model_files=None)}])
    assert len(unknown) == 1 and "the model's files (paths and hashes of the manifest) - unknown here, known on a's" in unknown[0]


def test_the_manifest_digest_ignores_when_and_how_the_files_came():
    files = [{"path": "config.json", "size": 10, "oid": "1" * 40}, {"path": "m.safetensors", "size": 9, "sha256": "2" * 64}]
    a = G.manifest_digest({"files": files, "fetched_at": "2026-11-30", "downloader": {"name": "builtin"}})
    b = G.manifest_digest({"files": list(reversed(files)), "fetched_at": "2026-12-01"})
    assert a == b and len(a) == 64
    assert G.manifest_digest({"files": [dict(files[0], oid="3" * 40), files[1]]}) != a
    assert G.manifest_digest({}) is None


def test_the_rendezvous_probe_over_loopback():
    """listen() accepts the ranks' connects; a port in use is reported as in use; a closed port is refused."""
    import socket
    import threading
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = {}
    t = threading.Thread(target=lambda: result.update(G.listen("127.0.0.1", port, 2, 5)))
    t.start()
    reached = 0
    end = time.time() + 5       # the listener's own window; its thread may start late on a loaded machine
    while reached < 2 and time.time() < end:
        ok = G.connect("127.0.0.1", port, 1)["reachable"]
        reached += ok
        if not ok:              # refused: the listener is not up yet (a refused connect is not accepted)
            time.sleep(0.01)
    t.join()
    assert reached == 2 and result["listening"] and len(result["accepted"]) == 2
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    assert G.listen("127.0.0.1", holder.getsockname()[1], 1, 1)["in_use"] is True
    closed = holder.getsockname()[1]
    holder.close()
    r = G.connect("127.0.0.1", closed, 1)
    assert r["reachable"] is False and "refused" in r["error"].lower()


def test_the_interface_to_an_address_is_the_one_holding_the_source_address():
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME from the kernel's own answer: for every non-loopback interface of
    this machine with an IPv4 address, its own address is reached 'through' it; loopback and IPv6 say nothing."""
    import socket
    seen = 0
    for _i, name in socket.if_nameindex():
        addr = G._ipv4_of(name)
        if name == "lo" or not addr:
            continue
        assert G.interface_to(addr) == name
        seen += 1
    assert seen >= 1
    assert G.interface_to("127.0.0.1") is None and G.interface_to("::1") is None
    assert G.interface_to("not an address") is None


def test_the_source_address_towards_an_address_is_this_machines_own_on_that_network():
    """SGLANG_HOST_IP: for each of this machine's IPv4 addresses, the address towards it is itself (rank 0's
    rendezvous address); towards loopback, loopback (which interface_to then refuses); nothing for a non-address."""
    import socket
    for _i, name in socket.if_nameindex():
        addr = G._ipv4_of(name)
        if addr:
            assert G.source_address(addr, 5000) == addr
    assert G.source_address("127.0.0.1") == "127.0.0.1"
    assert G.source_address("not an address") is None and G.source_address("[::1]") in ("::1", None)


def test_an_ipv6_rendezvous_address_gets_its_interface_too(tmp_path):
    """The same for IPv6, from /proc/net/if_inet6: every global or unique-local address of a non-loopback interface of
    this machine is reached through that interface (skipped where the machine has none)."""
    import socket
    held = G._ipv6_addresses(open("/proc/net/if_inet6").read()) if os.path.exists("/proc/net/if_inet6") else {}
    mine = [(name, a) for name, addrs in held.items() if name != "lo" for a in addrs if not a.startswith("fe80")]
    if not mine:
        pytest.skip("no IPv6 address but link-local on this machine")
    for name, addr in mine:
        assert G.interface_to(addr) == name and G.interface_to("[%s]" % addr) == name
    assert G.interface_to("::1") is None
    # the table as the kernel writes it; an address no interface holds is not guessed
    table = tmp_path / "if_inet6"
    table.write_text("00000000000000000000000000000001 01 80 10 80       lo\n"
                     "fd000000000000000000000000000002 04 40 00 82     eth0\n"
                     "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n")
    assert G._ipv6_addresses(table.read_text()) == {"lo": ["::1"], "eth0": ["fd00::2", "fe80::fc:ff:fe00:1"]}
    name, addr = mine[0]
    empty = tmp_path / "empty"
    empty.write_text("")
    assert G.interface_to(addr, if_inet6=str(empty)) is None
    assert G.interface_to(addr, if_inet6=str(tmp_path / "missing")) is None
    assert socket.AF_INET6 == G._family(addr)


def up(tokens=207346, healthy=True, outcome="ready"):
    return {"unit": "active/running", "healthy": healthy, "max_total_num_tokens": tokens, "log_outcome": outcome,
            "failure": None}


RESTART = ("ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e sglang_server_restart=true "
           "--limit pve1,pve2,ct100,ct101")


def test_the_group_restart_command_names_the_nodes_then_the_ranks_in_rank_order():
    assert G.restart_command(["ct100", "ct101"], ["pve1", "pve2"]) == RESTART


def test_a_group_serves_only_with_every_rank_up_and_rank_0_healthy():
    ok = G.group_status("lab", ["ct100", "ct101"], {"ct100": up(), "ct101": up(tokens=None)}, ["pve1", "pve2"])
    assert ok["serving"] is True and ok["down"] == []
    assert ok["message"] == "group lab serving: 2 ranks up, ct100 (rank 0) healthy, KV tokens 207346"
    # rank 1's health server says 200 whatever rank 0 does: rank 0 unhealthy means the group does not serve
    sick = G.group_status("lab", ["ct100", "ct101"], {"ct100": up(healthy="False"), "ct101": up()}, ["pve1", "pve2"])
    assert sick["serving"] is False and sick["down"] == []
    assert sick["message"].startswith("group lab NOT serving: every rank runs but ct100 (rank 0) is not healthy")
    assert sick["message"].endswith("restart them together with `%s`" % RESTART)
    starting = G.group_status("lab", ["ct100", "ct101"], {"ct100": up(healthy=False, outcome="starting"),
                                                          "ct101": up()}, ["pve1"])
    assert starting["serving"] is False
    assert starting["message"] == ("group lab starting: every rank runs, ct100 (rank 0) still starting - run "
                                   "status.yml again later")
    # rank 1's log never says ready (only rank 0 logs the server fired up): it does not make a lost group "starting"
    lost = G.group_status("lab", ["ct100", "ct101"], {"ct100": up(healthy=False), "ct101": up(outcome="starting")},
                          ["pve1"])
    assert lost["message"].startswith("group lab NOT serving: every rank runs but ct100 (rank 0) is not healthy")


def test_a_rank_down_is_named_with_its_failure_and_the_command_that_restarts_the_group():
    dead = {"unit": "failed/failed", "healthy": True, "failure": {"kind": "kv_pool_oom"}}
    v = G.group_status("lab", ["ct100", "ct101"], {"ct100": up(), "ct101": dead}, ["pve1", "pve2"])
    assert v["serving"] is False and v["down"] == ["ct101"] and v["restart"] == RESTART
    assert v["message"] == (
        "group lab NOT serving: ct101 (rank 1) is failed/failed, its last launch failed: kv_pool_oom; ct100 (rank 0) "
        "still runs but cannot serve without it (SGLang 0.5.9 waits on a lost rank in NCCL until the watchdog, 10 min, "
        "when a request was in flight; idle, the others end at once). Its ranks meet once, at start-up, so a rank "
        "restarted alone waits for peers that never come: restart them together with `%s`" % RESTART)
    both = G.group_status("lab", ["ct100", "ct101"], {"ct100": {"unit": "inactive/dead"}, "ct101": dead}, ["pve1"])
    assert both["down"] == ["ct100", "ct101"]
    assert "ct100 (rank 0) is inactive/dead; ct101 (rank 1) is failed/failed" in both["message"]
    assert "still run" not in both["message"]
    three = G.group_status("lab", ["a", "b", "c"], {"a": up(), "b": dead, "c": {"unit": "inactive/dead"}}, ["pve1"])
    assert "; a (rank 0) still runs but cannot serve without them (" in three["message"]


def test_a_rank_not_in_this_run_makes_the_verdict_unknown_and_says_how_to_read_it():
    v = G.group_status("lab", ["ct100", "ct101"], {"ct100": None, "ct101": up()}, ["pve1"])
    assert v["serving"] is None
    assert v["message"] == ("group lab: ct100 (rank 0) not in this run - a group is read as a whole (rank 0's health "
                            "is the group's): run status.yml with --limit ct100,ct101")
