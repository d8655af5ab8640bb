# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server across several containers (SGLang 0.5.9 multi-node: --nnodes, --node-rank, --dist-init-addr).

Standard library only. The inventory shape: every sglang_containers host with the same ``sglang_server_group``
is one rank of one server; the rank order is the inventory order unless ``sglang_server_node_rank`` is set; rank
0's ``sglang_server_group_addr`` and ``sglang_server_dist_port`` form ``--dist-init-addr`` (torch.distributed's
TCPStore listens there: model_runner.py's ``tcp://{dist_init_addr}``).

``group_layout`` checks the shape and gives each rank its args; ``rank_mismatches`` compares what each rank would
run (SGLang build, model, driver) with rank 0's. Every problem names the host, its rank and the fix.
"""
from __future__ import absolute_import, division, print_function

import errno
import fcntl
import hashlib
import json
import socket
import struct
import time

from .argv import is_loopback

__metaclass__ = type

WILDCARDS = ("", "0.0.0.0", "::")


def _addr_problem(addr):
    if str(addr or "").strip("[]") in WILDCARDS:
        return "is not set"
    if is_loopback(addr):
        return "is a loopback address (the other ranks cannot reach it)"
    return None


def dist_init_addr(addr, port):
    text = str(addr).strip("[]")
    return "[%s]:%d" % (text, int(port)) if ":" in text else "%s:%d" % (text, int(port))


def group_layout(hosts):
    """``hosts``: the group members in inventory order, each {name, group, rank (or None), addr, dist_port, port,
    tp_size, pp_size, gpus (the count passed to it, or None when unknown)}.

    Returns {group: {"nnodes", "dist_init_addr", "rendezvous": {"addr", "port"} (rank 0's, apart), "ranks": [{"name",
    "rank", "args": {nnodes, node_rank, dist_init_addr}}], "problems": [...]}} - the ranks sorted by rank."""
    groups = {}
    for h in hosts:
        groups.setdefault(str(h["group"]), []).append(h)
    out = {}
    for name, members in sorted(groups.items()):
        problems = []
        explicit = [m for m in members if m.get("rank") not in (None, "")]
        if explicit and len(explicit) != len(members):
            unset = ", ".join(m["name"] for m in members if m not in explicit)
            problems.append("group %s: sglang_server_node_rank is set on %s but not on %s - set it on every rank or on "
                            "none (the inventory order)" % (name, ", ".join(m["name"] for m in explicit), unset))
            ranked = list(enumerate(members))
        elif explicit:
            try:
                ranked = sorted(((int(m["rank"]), m) for m in members), key=lambda x: x[0])
            except (TypeError, ValueError):
                problems.append("group %s: sglang_server_node_rank must be whole numbers (%s)" % (
                    name, ", ".join("%s=%r" % (m["name"], m["rank"]) for m in members)))
                ranked = list(enumerate(members))
            if [r for r, _m in ranked] != list(range(len(members))):
                problems.append("group %s: the ranks are %s; they must be 0 .. %d, each once" % (
                    name, ", ".join("%s=%s" % (m["name"], r) for r, m in ranked), len(members) - 1))
        else:
            ranked = list(enumerate(members))
        nnodes = len(members)
        if nnodes < 2:
            problems.append("group %s: only %s is in it - a group is one server on two or more containers; remove "
                            "sglang_server_group for a single-container server" % (name, members[0]["name"]))
        head = ranked[0][1]
        why = _addr_problem(head.get("addr"))
        if why:
            problems.append("%s (rank 0 of group %s): sglang_server_group_addr %s - set it to the address the other "
                            "ranks reach this container at (its bridge/VLAN address)" % (head["name"], name, why))
        port = head.get("dist_port")
        try:
            port = int(port)
            if not 0 < port < 65536:
                raise ValueError
        except (TypeError, ValueError):
            problems.append("%s (rank 0 of group %s): sglang_server_dist_port=%r must be a TCP port, 1-65535"
                            % (head["name"], name, port))
            port = None
        for r, m in ranked:
            if port is not None and int(m.get("port") or 30000) == port:
                problems.append("%s (rank %d of group %s): sglang_server_dist_port %d is its HTTP port too - pick "
                                "another" % (m["name"], r, name, port))
        shapes = sorted(set((int(m.get("tp_size") or 1), int(m.get("pp_size") or 1)) for m in members))
        if len(shapes) > 1:
            asked = ", ".join("%s: %d x %d" % (m["name"], int(m.get("tp_size") or 1), int(m.get("pp_size") or 1))
                              for m in members)
            problems.append("group %s: the ranks ask different tp_size x pp_size (%s) - one server has one layout: "
                            "set sglang_server_args for the group, not per host" % (name, asked))
        tp, pp = shapes[0]
        if (tp * pp) % nnodes:
            problems.append("group %s: tp_size x pp_size = %d is not a multiple of its %d containers (SGLang 0.5.9 "
                            "refuses it: each rank runs tp x pp / nnodes GPUs)" % (name, tp * pp, nnodes))
        else:
            per = tp * pp // nnodes
            for r, m in ranked:
                if m.get("gpus") is not None and int(m["gpus"]) != per:
                    problems.append("%s (rank %d of group %s): %d GPU(s) passed, the layout needs %d per rank "
                                    "(tp_size %d x pp_size %d / %d containers) - pass %d GPU(s) to each "
                                    "(lxc_gpu_passthrough_gpus) or change tp_size/pp_size"
                                    % (m["name"], r, name, int(m["gpus"]), per, tp, pp, nnodes, per))
        addr = dist_init_addr(head["addr"], port) if not why and port is not None else None
        out[name] = {"nnodes": nnodes, "dist_init_addr": addr, "problems": problems,
                     "rendezvous": {"addr": str(head.get("addr") or "").strip("[]"), "port": port},
                     "ranks": [{"name": m["name"], "rank": r,
                                "args": {"nnodes": nnodes, "node_rank": r, "dist_init_addr": addr}}
                               for r, m in ranked]}
    return out


# what every rank must share with rank 0: key -> (what it is, the fix)
SHARED = (
    ("lock_sha256", "the SGLang lock (its sha256)", "build every rank from the same lock (sglang_venv_lock)"),
    ("build", "the venv build (lock, Python, packages, sources)",
     "give every rank the same sglang_venv settings and Python"),
    ("model_revision", "the model revision", "pin one hf_model_revision for the group"),
    ("model_files", "the model's files (paths and hashes of the manifest)",
     "re-run hf_model on that rank (hf_model_verify: full) or pin one revision"),
    ("driver_version", "the NVIDIA driver", "install the same nvidia_driver_version on every node of the group"),
)


def serving(names, layout):
    """The hosts among ``names`` that serve SGLang's API (the replicas a router sends requests to): all of them but
    the ranks after rank 0 of each group in ``layout`` (group_layout's result). SGLang 0.5.9 runs only a health server
    on those ranks: /health answers 200, the API 404."""
    others = set(r["name"] for g in layout.values() for r in g["ranks"][1:])
    return [n for n in names if n not in others]


def restart_command(ranks, nodes):
    """The command that restarts a group's ranks together (deploy.yml's server play, every rank stopped before any
    starts): ``ranks`` the group's host names in rank order, ``nodes`` their Proxmox nodes (for the GPU facts the
    plan needs)."""
    return ("ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e sglang_server_restart=true "
            "--limit %s" % ",".join(list(nodes) + list(ranks)))


def _truthy(value):
    return value is True or str(value).lower() in ("true", "yes", "1")


def _running(status):
    return str(status.get("unit") or "").startswith("active")


def group_status(name, ranks, statuses, nodes):
    """One verdict for a multi-node group from its ranks' status (playbooks/status.yml): ``ranks`` the host names in
    rank order, ``statuses`` {host: its sglang_server_status, or None when it is not in this run}, ``nodes`` the
    ranks' Proxmox nodes. SGLang 0.5.9 serves the API on rank 0 only; a rank other than 0 runs a health server that
    answers 200 whatever happens to rank 0, and a rank lost after start-up ends the others at their next Gloo
    broadcast when idle, or leaves them waiting in an NCCL collective (the watchdog, 10 min) when a request was in
    flight - so the group serves only if every rank runs and rank 0 is healthy.

    Returns {"group", "serving": True / False / None (not every rank in this run), "down": [hosts], "message",
    "restart": the command that restarts the ranks together}."""
    label = dict((h, "%s (rank %d)" % (h, i)) for i, h in enumerate(ranks))
    cmd = restart_command(ranks, nodes)
    out = {"group": name, "serving": None, "down": [], "restart": cmd}
    missing = [h for h in ranks if statuses.get(h) is None]
    if missing:
        out["message"] = ("group %s: %s not in this run - a group is read as a whole (rank 0's health is the group's): "
                          "run status.yml with --limit %s" % (name, ", ".join(label[h] for h in missing),
                                                              ",".join(ranks)))
        return out
    out["down"] = [h for h in ranks if not _running(statuses[h])]
    head = statuses[ranks[0]]
    if out["down"]:
        said = []
        for h in out["down"]:
            st = statuses[h]
            failure = st.get("failure") or {}
            said.append("%s is %s%s" % (label[h], st.get("unit") or "unknown",
                                        ", its last launch failed: %s" % failure["kind"] if failure.get("kind") else ""))
        up = [label[h] for h in ranks if h not in out["down"]]
        still = ("; %s still run%s but cannot serve without %s (SGLang 0.5.9 waits on a lost rank in NCCL until the "
                 "watchdog, 10 min, when a request was in flight; idle, the others end at once)" % (
                     ", ".join(up), "s" if len(up) == 1 else "", "it" if len(out["down"]) == 1 else "them")
                 if up else "")
        out["serving"] = False
        out["message"] = ("group %s NOT serving: %s%s. Its ranks meet once, at start-up, so a rank restarted alone "
                          "waits for peers that never come: restart them together with `%s`" % (
                              name, "; ".join(said), still, cmd))
        return out
    if not _truthy(head.get("healthy")):
        out["serving"] = False
        # rank 0's log only: a rank other than 0 never logs the server "fired up" (only rank 0 runs the HTTP server)
        if head.get("log_outcome") == "starting":
            out["message"] = ("group %s starting: every rank runs, %s still starting - run status.yml again later"
                              % (name, label[ranks[0]]))
        else:
            out["message"] = ("group %s NOT serving: every rank runs but %s is not healthy - a rank lost after "
                              "start-up leaves the others waiting (SGLang 0.5.9: NCCL's watchdog, 10 min); read "
                              "each rank's log line above, then restart them together with `%s`" % (
                                  name, label[ranks[0]], cmd))
        return out
    out["serving"] = True
    out["message"] = "group %s serving: %d ranks up, %s healthy, KV tokens %s" % (
        name, len(ranks), label[ranks[0]], head.get("max_total_num_tokens"))
    return out


def rank_mismatches(group, ranks):
    """``ranks``: [{"name", "rank", "facts": {lock_sha256, build, model_revision, model_files, driver_version}}].
    A problem for each fact a rank has that is not rank 0's; a fact known on one side only is a problem too (a rank
    that cannot say what it runs is not known to match). Unknown on both sides (e.g. no driver facts on a node
    without GPUs) is nothing to compare."""
    ordered = sorted(ranks, key=lambda r: int(r["rank"]))
    return _mismatches(ordered, SHARED, lambda r: "rank %s of group %s" % (r["rank"], group), lambda head: "rank 0's")


# what a decode server must share with the prefill servers whose KV it takes (#59 item 3): the same SGLang (its KV
# layout and transfer protocol) and the same model (KV computed from other weights decodes to garbage, silently)
PD_SHARED = (
    ("lock_sha256", "the SGLang lock (its sha256)",
     "build every prefill and decode server from the same lock (sglang_venv_lock)"),
    ("model_revision", "the model revision", "pin one hf_model_revision for every prefill and decode server"),
    ("model_files", "the model's files (paths and hashes of the manifest)",
     "re-run hf_model on that server (hf_model_verify: full) or pin one revision"),
)


def pd_mismatches(servers):
    """``servers``: [{"name", "mode" (prefill|decode), "facts": {lock_sha256, model_revision, model_files}}] - the
    prefill and decode servers behind one router. A problem for each fact a server has that is not the first prefill
    server's (by name); a fact known on one side only is a problem too, as for a group's ranks."""
    ordered = sorted(servers, key=lambda s: (s["mode"] != "prefill", s["name"]))
    return _mismatches(ordered, PD_SHARED, lambda s: "%s server" % s["mode"],
                       lambda head: "%s's, the prefill server's" % head["name"])


def _mismatches(ordered, shared, who, reference):
    """Each fact (``shared``: (key, what, fix)) of ordered[1:] that is not ordered[0]'s, in words: "<name> (<who>):
    <what> - not the same as <reference> (<name>: <value>, <head>: <value>) - <fix>"."""
    if not ordered:
        return []
    head = ordered[0]
    problems = []
    for r in ordered[1:]:
        for key, what, fix in shared:
            mine, theirs = r["facts"].get(key), head["facts"].get(key)
            if mine == theirs:
                continue
            problems.append("%s (%s): %s - %s %s (%s: %s, %s: %s) - %s" % (
                r["name"], who(r), what, "unknown here, known on" if mine is None else
                "unknown on" if theirs is None else "not the same as", reference(head), r["name"], _short(mine),
                head["name"], _short(theirs), fix))
    return problems


def _short(value):
    if value is None:
        return "unknown"
    text = str(value)
    return text[:12] if len(text) == 64 or len(text) == 40 else text


def manifest_digest(manifest):
    """The model's identity from a .gpuserve-snapshot.json: the sorted (path, LFS sha256 or git blob sha1, size)
    of its files - the same on every rank that holds the same files, whenever and however they were fetched."""
    files = sorted((f.get("path"), f.get("sha256") or f.get("oid"), f.get("size"))
                   for f in (manifest or {}).get("files", []))
    if not files:
        return None
    return hashlib.sha256(json.dumps(files).encode("utf-8")).hexdigest()


def _family(addr):
    return socket.AF_INET6 if ":" in str(addr).strip("[]") else socket.AF_INET


def listen(addr, port, peers, timeout, clock=time.time):
    """Rank 0's half of the rendezvous check: listen on addr:port (where torch.distributed's TCPStore will) and
    accept up to ``peers`` connections within ``timeout`` seconds. Returns {"listening", "in_use", "accepted": [peer
    addresses], "error"}. A port already in use is reported, not an error: on a re-run the running group's own
    store holds it, and the other ranks' connects then reach that."""
    host = str(addr).strip("[]")
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    out = {"listening": False, "in_use": False, "accepted": [], "error": None}
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                out["in_use"] = True
                return out
            out["error"] = "cannot listen on %s: %s" % (dist_init_addr(host, port), exc.strerror or exc)
            return out
        sock.listen(16)
        out["listening"] = True
        deadline = clock() + float(timeout)
        while len(out["accepted"]) < int(peers) and clock() < deadline:
            sock.settimeout(max(0.05, deadline - clock()))
            try:
                conn, peer = sock.accept()
            except socket.timeout:
                break
            out["accepted"].append(peer[0])
            conn.close()
    finally:
        sock.close()
    return out


def _ipv4_of(name):
    """The IPv4 address of interface ``name`` (SIOCGIFADDR), None if it has none."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode("utf-8")[:15]))
        return socket.inet_ntoa(raw[20:24])
    except OSError:
        return None
    finally:
        sock.close()


def _ipv6_addresses(text):
    """{interface: [its IPv6 addresses, compressed]} from the text of /proc/net/if_inet6 (address in 32 hex digits,
    index, prefix length, scope, flags, name)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or len(parts[0]) != 32:
            continue
        try:
            addr = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(parts[0]))
        except ValueError:
            continue
        out.setdefault(parts[5], []).append(addr)
    return out


def source_address(addr, port=9):
    """This machine's own address towards ``addr``: the kernel's source address for it (a UDP connect, nothing is
    sent) - for rank 0, its rendezvous address itself. What SGLANG_HOST_IP must say: SGLang 0.5.9 and 0.5.23 take
    it before guessing (``get_local_ip_auto``: else the address towards 8.8.8.8, the default route's), and a rank's
    scheduler broadcast to remote ranks is reached there (``shm_broadcast.py``). None when it cannot be told."""
    host = str(addr).strip("[]")
    try:
        sock = socket.socket(_family(host), socket.SOCK_DGRAM)
    except (OSError, ValueError):
        return None
    try:
        sock.connect((host, int(port)))
        return sock.getsockname()[0].split("%")[0]
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def interface_to(addr, port=9, if_inet6="/proc/net/if_inet6"):
    """The network interface this machine reaches ``addr`` through - the one NCCL and Gloo must use
    (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME): the interface holding :func:`source_address` (IPv4: SIOCGIFADDR;
    IPv6: ``if_inet6``). For rank 0's own address, the interface that holds it. None when it cannot be told
    (loopback included)."""
    source = source_address(addr, port)
    if source is None:
        return None
    if _family(str(addr).strip("[]")) == socket.AF_INET:
        for _index, name in socket.if_nameindex():
            if name != "lo" and _ipv4_of(name) == source:
                return name
        return None
    try:
        wanted = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, source))
        with open(if_inet6) as fh:
            held = _ipv6_addresses(fh.read())
    except (OSError, ValueError):
        return None
    for name, addrs in sorted(held.items()):
        if name != "lo" and wanted in addrs:
            return name
    return None


def connect(addr, port, timeout):
    """A rank's half: a TCP connect to rank 0's rendezvous. {"reachable", "error"} - the error as the socket
    said it (refused, timed out, no route), which tells a firewall from a wrong address."""
    host = str(addr).strip("[]")
    try:
        sock = socket.create_connection((host, int(port)), float(timeout))
    except socket.timeout:
        return {"reachable": False, "error": "timed out after %ss (a firewall dropping the packets, or no such "
                                             "host on that network)" % timeout}
    except OSError as exc:
        return {"reachable": False, "error": exc.strerror or str(exc)}
    sock.close()
    return {"reachable": True, "error": None}
