"""A stand-in for `python -m sglang.launch_server` (SGLang 0.5.9), for tests on machines without a GPU.

From the outside it behaves like the real server:
- parses SGLang's flags (argparse, so prefixes like --tp work and bad values exit 2 with argparse's text);
- replays a recorded SGLang 0.5.9 start-up log (tests/fixtures/sglang_logs/<scenario>.log) on stderr,
  line by line, with the log's own timing scaled by SGLANG_STANDIN_SPEED;
- for a "ready" scenario, binds --host/--port *for real* before the uvicorn lines (a taken port gives
  uvicorn's "[Errno 98] ... address already in use" and exit 3), then serves /health,
  /health_generate, /model_info, /server_info, /v1/models, /get_load and POST /generate (503 until the
  warm-up is done);
- for a failure scenario, ends the way SGLang does: SIGKILL of itself after the sigquit line
  (return code -9), or exit 1 for main-process tracebacks, or exit 2 for argparse errors;
- scenario "hang" prints the start and then waits forever (for timeouts).

The API key, as SGLang 0.5.9 handles it (read in the 0.5.9 wheel; nothing here is kinder than that):
- it is set only by ``--api-key`` or by the YAML file of ``--config`` (``srt/server_args.py``
  ``prepare_server_args`` -> ``srt/server_args_config_parser.py`` ``ConfigArgumentMerger``: one ``--config``
  only, a ``.yaml``/``.yml`` suffix, ``yaml.safe_load`` of a mapping, each key turned into ``--<key>`` verbatim,
  store_true flags as booleans, config before the command line so the command line wins). No environment
  variable sets it: ``SGLANG_API_KEY`` occurs nowhere in 0.5.9, and this stand-in ignores it too;
- the start-up log carries ``server_args=ServerArgs(...)`` with ``api_key='...'`` (``srt/entrypoints/engine.py``
  logs the dataclass repr), so whatever reads the log sees the key unless it redacts it;
- with a key, every request but ``OPTIONS``, ``/health*`` and ``/metrics`` needs ``Authorization: Bearer <key>``
  (``srt/utils/auth.py`` ``decide_request_auth``, NORMAL level; scheme case-insensitive, constant-time compare),
  else 401 ``{"error": "Unauthorized"}``; without a key nothing is checked.
Several nodes (``--nnodes`` > 1, ``--node-rank``, ``--dist-init-addr``), as 0.5.9 and the torch it pins do it:
- every node's scheduler meets the others in torch's ``init_process_group`` (``srt/model_executor/model_runner.py``
  ``init_torch_distributed``: ``tcp://<dist_init_addr>``, world size tp x pp, ``timeout=--dist-timeout``, None meaning
  torch's NCCL default of 10 min), right after "Init torch distributed begin.": rank 0 is the TCPStore master and
  listens on the port on every address (and holds it while the process lives); the others connect, retrying until
  the timeout. Start-up goes on only once all have joined. The two ways it fails carry torch's own format strings (read from libtorch_cpu.so, the
  chrono duration as fmt prints milliseconds) inside 0.5.9's "Scheduler hit an exception" and its sigquit:
  ``torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to
  (<host>, <port>).`` on a rank that cannot connect, ``torch.distributed.DistStoreError: Timed out after 600 seconds
  waiting for clients. 1/2 clients joined.`` on rank 0 when a rank never comes. A rank that reaches a rank 0 whose
  meeting is over (a rank 0 of an earlier launch: its store serves while the process lives) is taken in and never
  told the meeting is over: when that process ends, ``torch.distributed.DistNetworkError: recvValue failed on
  SocketImpl(fd=.., addr=[..]:.., remote=[..]:..): Failed to recv, got 0 bytes. Connection was likely closed. ...``
  (or libc's ``Connection reset by peer``) with c10's C++ backtrace lines under it; while it lives,
  ``torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /init/`` (the key illustrative). The waits
  are the real ones divided by SGLANG_STANDIN_SPEED;
- a rank other than 0 runs no tokenizer and no HTTP server of its own, and its log has no line only TP rank 0 prints
  (the KV cache dtype, the cuda graph batch sizes, max_total_num_tokens); its scheduler lines carry its rank
  prefix (`[ts TP1]`). Once its scheduler is ready (where TP rank 0 logs max_total_num_tokens) 0.5.9 starts
  ``launch_dummy_health_check_server`` (``srt/entrypoints/engine.py`` ``_launch_subprocesses``;
  ``srt/utils/common.py``) on --host/--port, uvicorn at log level warning (its one line: "Dummy health check server
  started in background thread at host:port", logged by SGLang's own logger - seen on the real one), answering GET
  /ping, /health and /health_generate with 200 always - no API key, no real health - and 404 to anything else; it
  then waits on its schedulers;
- a rank whose peer is gone during start-up is not told: the stand-in stops its start-up where it is and waits (the
  real one waits in a collective until NCCL's watchdog, 10 min). Once up and idle, it ends at once as 0.5.9 does:
  its scheduler broadcasts each loop's requests over the Gloo CPU group, so the next broadcast fails with Gloo's
  "Connection closed by peer [addr]:port" (a RuntimeError), then "Scheduler hit an exception" and the sigquit (see
  peer_lost_failure) - on every rank, rank 0 or not. With a request in flight it waits instead (NCCL), and rank 0
  answers /health and /health_generate (one handler in 0.5.9, ``srt/entrypoints/http_server.py``: a 1-token
  generate unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false) with 503 after SGLANG_HEALTH_CHECK_TIMEOUT (20 s,
  divided by SGLANG_STANDIN_SPEED) and 0.5.9's "Health check failed. Server couldn't get a response from
  detokenizer ..." line.
Scenario: the file <model-path>/standin_scenario, else SGLANG_STANDIN_SCENARIO (default ready_tp1_dense). Nothing here touches a GPU.
The interpreter's packages: 0.5.9's ``python -m sglang.launch_server`` imports ``srt/entrypoints/http_server.py``
before anything is parsed or logged, and that file imports numpy, orjson, requests, uvicorn and uvloop at its top
(lines 44-48 of the 0.5.9 wheel): in a venv without one of them the launch ends there with Python's traceback and
``ModuleNotFoundError: No module named '<name>'``, exit status 1. SGLANG_STANDIN_IMPORTS (comma-separated) names the
ones this stand-in imports first, unguarded, the same way - those a lab venv holds (a light build has no uvicorn).
"""
import argparse
import hmac
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.environ.get("SGLANG_STANDIN_FIXTURES") or os.path.join(
    HERE, "..", "..", "..", "fixtures", "sglang_logs")
TS = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)")


def _merge_config(parser, argv):
    """ConfigArgumentMerger.merge_config_with_args of SGLang 0.5.9, for the actions this parser has."""
    idx = [i for i, a in enumerate(argv) if a == "--config"]
    if not idx:
        return argv
    if len(idx) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if idx[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = argv[idx[0] + 1]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise ValueError("Config file must be YAML format, got: %s" % os.path.splitext(path)[1])
    if not os.path.exists(path):
        raise ValueError("Config file not found: %s" % path)
    import yaml  # as SGLang: PyYAML's safe_load, a hard dependency
    with open(path) as fh:
        data = yaml.safe_load(fh)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true = [a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)]
    extra = []
    for key, value in data.items():
        if isinstance(value, bool):
            if key.replace("-", "_") in store_true:
                if value:
                    extra.append("--%s" % key)
            else:
                extra.extend(["--%s" % key, str(value).lower()])
        elif isinstance(value, list):
            if value:
                extra.append("--%s" % key)
                extra.extend(str(v) for v in value)
        else:
            extra.extend(["--%s" % key, str(value)])
    return extra + argv[:idx[0]] + argv[idx[0] + 2:]


def authorized(api_key, method, path, authorization):
    """srt/utils/auth.py decide_request_auth of SGLang 0.5.9 for NORMAL endpoints (all this stand-in serves)."""
    if method == "OPTIONS" or path.startswith("/health") or path.startswith("/metrics") or not api_key:
        return True
    parts = (authorization or "").split(" ", 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return False
    return hmac.compare_digest(parts[1].encode(), api_key.encode())


# ServerArgs fields 0.5.9 resolves before it logs them (__post_init__: the auto fraction, chunk and graph sizes, the
# device, the attention backend, the page size): a launch that leaves them unset logs the recording's resolved value
_RESOLVED = ("mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs", "page_size", "device",
             "attention_backend")
_REPR_VALUE = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,)]*)"


def launch_server_args(line, args):
    """The recorded server_args line as this launch's own: every field the stand-in's parser knows takes the launch's
    value (a launch without --tp logs tp_size=1, with its model path, its key or api_key=None, its nodes), as the
    dataclass repr engine.py logs (f"{server_args=}") carries every field; only what 0.5.9 resolves itself and the
    launch left unset keeps the recording's resolved value."""
    body = line.rstrip()
    if not body.endswith(")"):
        return body
    fields = dict((k, v) for k, v in vars(args).items() if k != "config")
    fields["tokenizer_path"] = args.model_path
    # api_key last when added: within the 400 characters of a line the module's log_tail keeps, so the tests see that
    # it is redacted there (in 0.5.9's 10 kB repr it sits mid-line, beyond any tail)
    for name in sorted(fields, key=lambda n: (n == "api_key", n)):
        value = fields[name]
        if value is None and name in _RESOLVED:
            continue
        text = "%s=%r" % (name, value)
        pattern = re.compile(r"\b%s=%s" % (name, _REPR_VALUE))
        if pattern.search(body):
            body = pattern.sub(lambda _m, t=text: t, body, count=1)
        else:
            body = body[:-1] + ("" if body.endswith("(") else ", ") + text + ")"
    return body


def parse_args(argv):
    """prepare_server_args of 0.5.9: one parser, ServerArgs.add_cli_args, the --config file merged first."""
    from sglang.srt.server_args import ServerArgs  # pylint: disable=import-outside-toplevel
    p = argparse.ArgumentParser(prog="launch_server.py")
    ServerArgs.add_cli_args(p)
    return p.parse_args(_merge_config(p, argv))


class State(object):
    status = "Starting"
    args = None
    facts = {}
    in_flight = 0
    peer_lost = False
    lost_peer = ("0.0.0.0", 0)  # (address, port) of the rank whose connection ended
    speed = 50.0
    heartbeat = 0.0             # the last output the (stand-in) detokenizer gave: when the peer was lost
    lock = threading.Lock()


class RendezvousError(Exception):
    """What torch raises in init_process_group, as "torch.distributed.<Class>: <message>"."""


def _dist_addr(args):
    """(host, port) of the TCPStore: --dist-init-addr, else 0.5.9's single-node 127.0.0.1 (a port of its own)."""
    if not args.dist_init_addr:
        return "127.0.0.1", args.port + 1
    host, _sep, port = args.dist_init_addr.rpartition(":")
    return host.strip("[]"), int(port)


def _store_lost(conn, cause):
    """torch 2.9.1's words when a rank's connection to the TCPStore breaks after it joined (libtorch_cpu.so's
    "recvValue failed on {}: {}" around "SocketImpl(fd={}, addr={}, remote={})", the cause being c10d's 0-byte read
    or libc's strerror), with the C++ backtrace c10::Error carries (libc10.so's "Exception raised from ... (most
    recent call first):" and "frame #" lines; the addresses and the line number here are illustrative)."""
    try:
        (lhost, lport), (rhost, rport) = conn.getsockname()[:2], conn.getpeername()[:2]
    except OSError:
        (lhost, lport), (rhost, rport) = ("0.0.0.0", 0), ("0.0.0.0", 0)
    lib = "/opt/sglang/venv/lib/python3.11/site-packages/torch/lib"
    return "\n".join([
        "recvValue failed on SocketImpl(fd=%d, addr=[%s]:%d, remote=[%s]:%d): %s" % (
            conn.fileno(), lhost, lport, rhost, rport, cause),
        "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:670 (most recent call "
        "first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >) + 0x98 (0x7f3a8c1b2eb8 in %s/libc10.so)" % lib,
        "frame #1: <unknown function> + 0x5f1c0a2 (0x7f3a7a51c0a2 in %s/libtorch_cpu.so)" % lib,
        "frame #2: <omitting python frames>"])


def rendezvous(args, state, speed):
    """torch's TCPStore meeting of init_process_group (see the module doc); returns the open sockets to keep."""
    world = args.tp_size * args.pp_size
    mine = world // args.nnodes
    host, port = _dist_addr(args)
    timeout = args.dist_timeout or 600          # seconds; None -> torch's default_pg_nccl_timeout (10 min)
    deadline = time.time() + timeout / speed
    if args.node_rank == 0:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("0.0.0.0", port))
        except OSError as exc:
            raise RendezvousError("DistNetworkError", "The server socket has failed to listen on any local network "
                                  "address. port: %d, useIpv6: false, code: -%d, name: EADDRINUSE, message: address "
                                  "already in use" % (port, exc.errno or 98))
        srv.listen(64)
        joined, peers = mine, []
        while joined < world:
            srv.settimeout(max(0.05, deadline - time.time()))
            try:
                conn, _addr = srv.accept()
            except socket.timeout:
                raise RendezvousError("DistStoreError", "Timed out after %d seconds waiting for clients. %d/%d clients "
                                      "joined." % (timeout, joined, world))
            conn.settimeout(5)
            try:
                hello = conn.recv(64).decode("ascii", "replace").split()
                joined += int(hello[2])
                peers.append(conn)
            except (OSError, ValueError, IndexError):
                conn.close()
        for conn in peers:
            conn.sendall(b"go\n")

        def keep_listening():           # the TCPStore serves (and holds its port) as long as the process lives:
            srv.settimeout(None)        # a late joiner is taken in and held, never told the meeting is over; it
            late = []                   # waits until it times out, or until this process ends and the kernel
            while True:                 # closes the connection (a 0-byte read there)
                try:
                    conn = srv.accept()[0]
                    conn.settimeout(5)
                    conn.recv(64)
                    late.append(conn)
                except OSError:
                    time.sleep(0.1)
        threading.Thread(target=keep_listening, daemon=True).start()
    else:
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=max(0.05, min(1.0, deadline - time.time())))
                break
            except OSError:
                if time.time() >= deadline:
                    raise RendezvousError("DistNetworkError", "The client socket has timed out after %dms while "
                                          "trying to connect to (%s, %d)." % (timeout * 1000, host, port))
                time.sleep(min(1.0, max(0.0, deadline - time.time())))
        conn.sendall(("join %d %d\n" % (args.node_rank, mine)).encode("ascii"))
        conn.settimeout(max(0.05, deadline - time.time()))
        try:
            go = conn.recv(3)
        except socket.timeout:
            raise RendezvousError("DistStoreError", "wait timeout after %dms, keys: /init/" % (timeout * 1000))
        except OSError as exc:
            raise RendezvousError("DistNetworkError", _store_lost(conn, os.strerror(exc.errno or 104)))
        if not go:
            raise RendezvousError("DistNetworkError", _store_lost(conn, "Failed to recv, got 0 bytes. Connection was "
                                                                        "likely closed. Did the remote server "
                                                                        "shutdown or crash?"))
        peers = [conn]

    def watch_peers():
        addrs = {}
        for conn in peers:
            conn.settimeout(None)
            try:
                addrs[conn] = conn.getpeername()[:2]
            except OSError:
                addrs[conn] = ("0.0.0.0", 0)
        while peers:
            for conn in list(peers):
                try:
                    conn.settimeout(0.2)
                    if conn.recv(1) == b"":
                        state.heartbeat, state.peer_lost, state.lost_peer = time.time(), True, addrs[conn]
                        peers.remove(conn)
                except socket.timeout:
                    pass
                except OSError:
                    state.heartbeat, state.peer_lost, state.lost_peer = time.time(), True, addrs[conn]
                    peers.remove(conn)
    threading.Thread(target=watch_peers, daemon=True).start()
    return peers


def rendezvous_failure(prefix, error):
    """0.5.9's scheduler traceback around torch's error (scheduler.py run_scheduler_process) and its sigquit."""
    kind, message = error.args
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    return [
        "[%s] Scheduler hit an exception: Traceback (most recent call last):" % prefix,
        '  File "%s/sglang/srt/managers/scheduler.py", line 3179, in run_scheduler_process' % site,
        "    scheduler = Scheduler(",
        '  File "%s/sglang/srt/model_executor/model_runner.py", line 804, in init_torch_distributed' % site,
        "    init_distributed_environment(",
        '  File "%s/sglang/srt/distributed/parallel_state.py", line 1567, in init_distributed_environment' % site,
        "    torch.distributed.init_process_group(",
        '  File "%s/torch/distributed/rendezvous.py", line 189, in _create_c10d_store' % site,
        "    return TCPStore(",
        "torch.distributed.%s: %s" % (kind, message),
        "",
        "[%s] Received sigquit from a child process. It usually means the child failed."
        % prefix.split(" TP")[0],
    ]


def peer_lost_failure(prefix, peer):
    """0.5.9 serving, idle, when another rank of its server is gone: its scheduler's loop broadcasts the received
    requests to the other ranks over the Gloo CPU group every time round (scheduler.py event_loop_overlap ->
    recv_requests -> utils/common.py broadcast_pyobj -> torch.distributed.broadcast), so the next broadcast fails at
    once with Gloo's words (torch 2.9.1's libtorch_cpu.so, gloo/transport/tcp/pair.cc; the line number illustrative)
    as a RuntimeError; "Scheduler hit an exception" and the sigquit end the server. The frames and their line numbers
    are the 0.5.9 wheel's and torch 2.9.1's."""
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    return [
        "[%s] Scheduler hit an exception: Traceback (most recent call last):" % prefix,
        '  File "%s/sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process' % site,
        "    scheduler.event_loop_overlap()",
        '  File "%s/torch/utils/_contextlib.py", line 120, in decorate_context' % site,
        "    return func(*args, **kwargs)",
        '  File "%s/sglang/srt/managers/scheduler.py", line 1148, in event_loop_overlap' % site,
        "    recv_reqs = self.recv_requests()",
        '  File "%s/sglang/srt/managers/scheduler.py", line 1301, in recv_requests' % site,
        "    recv_reqs = broadcast_pyobj(",
        '  File "%s/sglang/srt/utils/common.py", line 1288, in broadcast_pyobj' % site,
        "    dist.broadcast(tensor_size, src=src, group=dist_group)",
        '  File "%s/torch/distributed/c10d_logger.py", line 81, in wrapper' % site,
        "    return func(*args, **kwargs)",
        '  File "%s/torch/distributed/distributed_c10d.py", line 2841, in broadcast' % site,
        "    work.wait()",
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [%s]:%d"
        % peer,
        "",
        # serving, the tokenizer manager's handler says it (tokenizer_manager.py), not engine.py's start-up words
        "[%s] SIGQUIT received. signum=None, frame=None. It usually means one child failed." % prefix.split(" TP")[0],
    ]


def dummy_health_handler():
    """srt/utils/common.py launch_dummy_health_check_server of 0.5.9: 200 on three paths, no key, nothing logged."""
    class D(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):
            pass

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            body = b"" if path in ("/ping", "/health", "/health_generate") else b'{"detail":"Not Found"}'
            self.send_response(200 if not body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    return D


def make_handler(state):
    class H(BaseHTTPRequestHandler):
        def log_message(self, fmt, *a):  # uvicorn-style access line on stdout
            now = time.strftime("%Y-%m-%d %H:%M:%S")
            sys.stdout.write('[%s] INFO:     %s - "%s" %s\n' % (now, self.client_address[0], self.requestline, a[1]))
            sys.stdout.flush()

        def _send(self, code, body=None):
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            a = state.args
            path = self.path.split("?")[0]
            if not authorized(a.api_key, "GET", path, self.headers.get("Authorization")):
                return self._send(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate") and state.peer_lost:
                # 0.5.9: one handler for both (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION defaults to true): a 1-token
                # generate that needs every rank - one is gone, so nothing arrives within SGLANG_HEALTH_CHECK_TIMEOUT
                # (20 s; here divided by SGLANG_STANDIN_SPEED), then this line and 503
                wait = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
                tic = time.time()
                time.sleep(wait / state.speed)
                sys.stderr.write("[%s] Health check failed. Server couldn't get a response from detokenizer for last "
                                 "%d seconds. tic start time: %s. last_heartbeat time: %s\n" % (
                                     time.strftime("%Y-%m-%d %H:%M:%S"), wait, time.strftime("%H:%M:%S",
                                                                                             time.localtime(tic)),
                                     time.strftime("%H:%M:%S", time.localtime(state.heartbeat))))
                sys.stderr.flush()
                return self._send(503)
            if path in ("/health", "/health_generate"):
                return self._send(200 if state.status == "Up" else 503)
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, {"model_path": a.model_path, "tokenizer_path": a.model_path,
                                        "is_generation": True, "weight_version": "default"})
            if path in ("/server_info", "/get_server_info"):
                f = state.facts
                # as 0.5.9's get_server_info: the server args as given (context_length, max_running_requests and
                # max_total_tokens null unless set - tests/fixtures/sglang_http/server_info_real_cpu_capped.json is
                # the real answer), the scheduler's resolved values in internal_states
                return self._send(200, {
                    "model_path": a.model_path, "tp_size": a.tp_size, "port": a.port,
                    "mem_fraction_static": f.get("mem_fraction_static", a.mem_fraction_static),
                    "context_length": a.context_length, "max_running_requests": a.max_running_requests,
                    "max_total_tokens": a.max_total_tokens, "dp_size": 1, "status": "ready",
                    "max_total_num_tokens": f.get("max_total_num_tokens"),
                    "max_req_input_len": (f.get("context_len") or 1) - 1, "version": "0.5.9",
                    "internal_states": [{"memory_usage": {
                        "weight": f.get("weights_gb"),
                        "kvcache": round((f.get("k_size_gb") or 0) + (f.get("v_size_gb") or 0), 2),
                        "token_capacity": f.get("max_total_num_tokens"), "graph": f.get("cuda_graph_mem_gb")},
                        "effective_max_running_requests_per_dp": f.get("max_running_requests")}]})
            if path == "/get_load":
                # http_server.get_load -> Scheduler.get_load of 0.5.9: one entry per DP rank; num_reqs counts the
                # running and the waiting requests (here: the /generate requests being answered)
                return self._send(200, [{"dp_rank": 0, "num_reqs": state.in_flight, "num_waiting_reqs": 0,
                                         "num_tokens": 0, "ts_tic": time.perf_counter()}])
            if path == "/v1/models":
                name = a.served_model_name or a.model_path
                return self._send(200, {"object": "list", "data": [{"id": name, "object": "model",
                                                                    "owned_by": "sglang", "root": name,
                                                                    "max_model_len": state.facts.get("context_len")}]})
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            """POST /generate as 0.5.9's http_server answers a non-streaming GenerateReqInput: {"text", "meta_info"}
            (id, finish_reason, prompt/completion tokens, e2e_latency); 503 until the server is up. Each request
            takes SGLANG_STANDIN_GEN_MS milliseconds (default 20), so requests are in flight for a while; one in
            flight when another rank of the server is lost never ends (its forward waits in an NCCL collective)."""
            a = state.args
            path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not authorized(a.api_key, "POST", path, self.headers.get("Authorization")):
                return self._send(401, {"error": "Unauthorized"})
            if path not in ("/generate",):
                return self._send(404, {"detail": "Not Found"})
            if state.status != "Up":
                return self._send(503, {"error": {"message": "The server is not ready"}})
            try:
                req = json.loads(raw.decode("utf-8") or "{}")
                text = req.get("text")
                params = req.get("sampling_params") or {}
                n_out = int(params.get("max_new_tokens", 16))
            except (ValueError, AttributeError, TypeError) as e:
                return self._send(400, {"error": {"message": "invalid request: %s" % e}})
            t0 = time.time()
            with state.lock:
                state.in_flight += 1
            try:
                time.sleep(float(os.environ.get("SGLANG_STANDIN_GEN_MS", "20")) / 1000.0)
                while state.peer_lost:      # a forward needs every rank: with one gone it waits in NCCL, no end
                    time.sleep(1)
            finally:
                with state.lock:
                    state.in_flight -= 1
            prompt = len(str(text or "").split())
            return self._send(200, {"text": " ok" * n_out, "meta_info": {
                "id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": n_out},
                "prompt_tokens": prompt, "completion_tokens": n_out, "cached_tokens": 0,
                "e2e_latency": round(time.time() - t0, 4)}})
    return H


SCHEDULER_READY = object()
# lines only the scheduler of TP rank 0 prints (reference sglang-0.5.9.md 1.3: lines 6, 13 and 17)
TP0_ONLY = ("Using KV cache dtype", "Capture cuda graph bs", "max_total_num_tokens=")


def first_tp_rank(args):
    """The TP rank of this node's first GPU (its scheduler lines' prefix `TP<r>`): node_rank x GPUs per node."""
    return args.node_rank * (args.tp_size * args.pp_size // args.nnodes)


def die_with(lines):
    """A scheduler's failure as 0.5.9 logs it, then the end of the server (its sigquit kills the process tree)."""
    for line in lines:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def node_lines(lines, args):
    """The recorded start-up as one node of a multi-node server logs it (0.5.9): the scheduler's lines - from
    "Init torch distributed begin." to the max_total_num_tokens line - carry the rank prefix (`[ts TP<r>]`, as with
    TP > 1; r is the node's first TP rank); on a node other than 0, the lines only TP rank 0 prints are left out, and
    where its scheduler would say max_total_num_tokens it reports ready instead (SCHEDULER_READY: 0.5.9's engine.py
    then starts the dummy health server)."""
    rank = first_tp_rank(args)
    out, inside = [], False
    for line in lines:
        if "Init torch distributed begin." in line:
            inside = True
        if inside:
            last = "max_total_num_tokens=" in line
            m = TS.match(line)
            if m and " TP" not in line[m.end():m.end() + 4]:
                line = line[:m.end()] + " TP%d" % rank + line[m.end():]
            if args.node_rank > 0 and any(w in line for w in TP0_ONLY):
                if last:
                    out.append(SCHEDULER_READY)
                    inside = False
                continue
            if last:
                inside = False
        out.append(line)
    return out


def main():
    for name in [n.strip() for n in os.environ.get("SGLANG_STANDIN_IMPORTS", "").split(",") if n.strip()]:
        __import__(name)     # unguarded, as http_server.py's imports: Python's own traceback and exit status 1
    args = parse_args(sys.argv[1:])
    state = State()
    state.args = args
    scenario = os.environ.get("SGLANG_STANDIN_SCENARIO", "ready_tp1_dense")
    pick = os.path.join(args.model_path, "standin_scenario")
    if os.path.isfile(pick):
        with open(pick) as fh:
            scenario = fh.read().strip()
    speed = state.speed = float(os.environ.get("SGLANG_STANDIN_SPEED", "50"))
    hang = scenario == "hang"
    path = os.path.join(FIXTURES, ("starting_mid_load" if hang else scenario) + ".log")
    with open(path) as fh:
        lines = fh.read().splitlines()
    if lines and lines[0].startswith("# shape:"):
        lines = lines[1:]
    # facts for /server_info, read the way the collection reads them (the stand-in has no other truth)
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "plugins"))
    from module_utils import logs  # noqa: E402  (plain stdlib files)
    state.facts = logs.parse_log("\n".join(lines))["facts"]
    main_process_failure = bool(lines) and not lines[0].startswith("[")
    if lines and not main_process_failure and not any("server_args=ServerArgs(" in line for line in lines):
        m = TS.match(lines[0])
        lines.insert(0, "[%s] server_args=ServerArgs()" % (m.group(1) if m else time.strftime("%Y-%m-%d %H:%M:%S")))
    if args.nnodes > 1:
        lines = node_lines(lines, args)
    prev = None
    server = None
    met = args.nnodes <= 1
    for line in lines:
        if line is SCHEDULER_READY:     # a rank other than 0: its scheduler is up, 0.5.9 starts the health server
            try:
                dummy = ThreadingHTTPServer((args.host, args.port), dummy_health_handler())
            except OSError:
                sys.stderr.write("[%s] ERROR:    [Errno 98] error while attempting to bind on address ('%s', %d): "
                                 "address already in use\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), args.host, args.port))
                sys.stderr.flush()
                hang = True             # the health thread died; the schedulers go on
                break
            threading.Thread(target=dummy.serve_forever, daemon=True).start()
            state.status = "Up"
            sys.stderr.write("[%s] Dummy health check server started in background thread at %s:%d\n"
                             % (time.strftime("%Y-%m-%d %H:%M:%S"), args.host, args.port))
            sys.stderr.flush()
            continue
        m = TS.match(line)
        if m and prev is not None:
            t = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
            delay = max(0.0, t - prev) / speed
            time.sleep(min(delay, 2.0))
        if m:
            prev = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
        while met and args.nnodes > 1 and state.peer_lost and state.status != "Up":
            time.sleep(3600)            # a collective with a rank that is gone: no word, no end
        if args.nnodes > 1 and args.node_rank > 0 and "Started server process" in line:
            break                       # only rank 0 runs the tokenizer and the HTTP server
        if not met and "Init torch distributed begin." in line:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            met = True
            try:
                rendezvous(args, state, speed)
            except RendezvousError as exc:
                gave_up = (prev or time.time()) + (args.dist_timeout or 600)
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(gave_up))
                die_with(rendezvous_failure("%s TP%d" % (when, first_tp_rank(args)), exc))
            continue
        if "Started server process" in line and server is None:
            try:
                server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
            except OSError:
                sys.stderr.write("[%s] ERROR:    [Errno 98] error while attempting to bind on address "
                                 "('%s', %d): address already in use\n"
                                 % (time.strftime("%Y-%m-%d %H:%M:%S"), args.host, args.port))
                sys.stderr.flush()
                sys.exit(3)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            line = line.replace("[4242]", "[%d]" % os.getpid())
        line = line.replace("127.0.0.1:30000", "%s:%d" % (args.host, args.port))
        if " server_args=ServerArgs(" in line:
            line = launch_server_args(line, args)
        if "The server is fired up" in line:
            state.status = "Up"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if "Received sigquit" in line or "SIGQUIT received" in line:
            os.kill(os.getpid(), signal.SIGKILL)
    if hang:
        while True:
            time.sleep(3600)
    if state.status == "Up":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(0.1)
            # another rank gone while nothing is in flight: the next Gloo broadcast ends this one (see
            # peer_lost_failure); with a request in flight the real one waits in an NCCL collective instead, and its
            # health check fails after SGLANG_HEALTH_CHECK_TIMEOUT (the /health handler above)
            if state.peer_lost and state.in_flight == 0:
                die_with(peer_lost_failure("%s TP%d" % (time.strftime("%Y-%m-%d %H:%M:%S"), first_tp_rank(args)),
                                           state.lost_peer))
    if "bad_argument" in scenario:
        sys.exit(2)
    if main_process_failure or "Initialization failed" in "\n".join(lines[-6:]):
        sys.exit(1)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
