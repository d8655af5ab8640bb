# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The line rules of SGLang's start-up log: the phases and failure kinds, the patterns of each line
SGLang writes (0.5.9 wording, and the variants of 0.3.6-0.5.23: tests/wording), the redaction of secrets,
and the two rule tables ``LogParser`` reads a message with (``PROGRESS_RULES``, ``EVENT_RULES``).

Untrusted input: nothing is executed or evaluated, every regular expression is linear (no nested
quantifiers over the same characters) and every buffer is bounded.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections import deque


PHASES = ("args", "dist_init", "load_weights", "memory_pool", "cuda_graph", "draft", "http", "warmup", "ready")
_PHASE_INDEX = dict((p, i) for i, p in enumerate(PHASES))

# The failure kinds (their specificity, the phase each implies, ...) are declared in kinds.py.

MAX_LINE = 4096          # longer lines are cut (bounded memory per line)
TRACEBACK_TAIL = 30      # lines kept of the last traceback
MESSAGE_MAX = 600        # characters kept of the decisive message

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# journald / `systemctl status` / syslog prefixes: "Nov 29 21:26:45 host unit[123]: " and short-iso.
_JOURNAL = re.compile(
    r"^\s*(?:[A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    r" \S+ [^\s:\[]+(?:\[\d+\])?: ")
# SGLang's own prefix: "[2026-05-09 09:16:44(.123)( DP0)( TP1)] message"
_SGL = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?(.*)$")
_UVICORN_LEVEL = re.compile(r"^(INFO|ERROR|WARNING|DEBUG|CRITICAL):\s+(.*)$")
# Prefixes other tools put before SGLang's own line, stripped before anything else reads it:
# docker compose ("sglang-1  | "), kubectl logs --prefix ("[pod/name/container] "), ray ("(pid=123) ",
# "(Worker pid=1, ip=10.0.0.2) "), orchestration wrappers ("2026-05-09T09:16:44.123Z INFO    mod.func: ").
_FOREIGN = re.compile(
    r"^(?:[\w.-]{1,80}\s+\| ?"
    r"|\[pod/[^\]\s]{1,200}\] "
    r"|\((?:[A-Za-z_]\w{0,40} )?pid=\d+(?:, ip=[\d.:a-f]+)?\) "
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"
    r"(?:INFO|ERROR|WARNING|WARN|DEBUG|CRITICAL|FATAL)\s+(?:[\w.]{1,120}: )?)")
# a logger that puts a level and file:line after SGLang's bracket: "[ts] ERROR scheduler.py:3188: msg" -> "[ts] msg"
_BRACKET_LEVEL = re.compile(r"^(\[\d{4}-\d\d-\d\d[^\]]{0,60}\]) (?:INFO|ERROR|WARNING|WARN|DEBUG|CRITICAL)\s+"
                            r"[\w./-]{1,200}\.py:\d+:? ")

_NUM = r"(-?\d+(?:\.\d+)?)"
_RE_LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=" + _NUM + r" ?GB")
# 0.4.0-0.4.3 print no mem usage (the weights are then begin - end)
_RE_LOAD_END = re.compile(r"Load weight end\..*?avail mem=" + _NUM + r" ?GB(?:, mem usage=" + _NUM + r" ?GB)?")
# 0.4.3 prints no #tokens; 0.4.6 on print them first
_RE_KV = re.compile(r"KV Cache is allocated\.(?: #tokens: (\d+),)? (?:K size: " + _NUM + r" ?GB, V size: "
                    + _NUM + r" ?GB|KV size: " + _NUM + r" ?GB)")
_RE_KV_TOKENS = re.compile(r"#tokens: (\d+)")
_RE_KV_SIZES = re.compile(r"\bK size: " + _NUM + r" ?GB, V size: " + _NUM + r" ?GB|\bKV size: " + _NUM + r" ?GB")
# 0.5.3 prints no max_mamba_cache_size
_RE_MAMBA = re.compile(r"Mamba Cache is allocated\.(?: max_mamba_cache_size: (\d+),)? conv_state size: " + _NUM
                       + r" ?GB, ssm_state size: " + _NUM + r" ?GB(?:.*?intermediate_ssm_state_cache size: "
                       + _NUM + r" ?GB.*?intermediate_conv_window_cache size: " + _NUM + r" ?GB)?")
# 0.4.0 prints no chunked_prefill_size
_RE_SCHED = re.compile(r"max_total_num_tokens=(\d+), (?:chunked_prefill_size=(-?\d+), )?max_prefill_tokens=(\d+), "
                       r"max_running_requests=(\d+), context_len=(\d+)(?:, available_gpu_mem=" + _NUM + r" ?GB)?")
_RE_GRAPH_END = re.compile(r"Capture (?:draft )?(?:extend )?cuda graph end\..*?mem usage=" + _NUM + r" ?GB")
# a fraction as Python's repr prints it: 0.85, and below 1e-4 with an exponent (1e-05 was read as 1)
_FRACTION = r"([0-9.]+(?:[eE][-+]?[0-9]+)?)"
_RE_MFS = re.compile(r"mem_fraction_static=" + _FRACTION)
_RE_TP = re.compile(r"\btp_size=(\d+)")
_RE_PORT = re.compile(r"\bport=(\d+)")
_RE_DIST_ADDR = re.compile(r"\bdist_init_addr='([^']+)'")
_RE_GRAPH_BS = re.compile(r"\bcuda_graph_max_bs=(\d+)")
_RE_VERSION = re.compile(r"(?:sglang[_ ]version|SGLang v(?=\d)|sglang==)[=: ]*v?(\d+\.\d+\.\d+[\w.+-]*)", re.I)
_RE_KV_OOM = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
    r"(?: Current value: (?:self\.server_args\.)?mem_fraction_static=" + _FRACTION + r")?")
# 0.5.2x (model_runner_kv_cache_mixin): the same budget failure, raised as a ValueError that names the fraction
_RE_KV_OOM_LATER = re.compile(r"Loaded weights leave no GPU memory for the KV cache under "
                              r"--mem-fraction-static=(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
# a frame line, indented as Python prints it or flush left as some pastes have it
_RE_FRAME = re.compile(r'^\s*File "([^"]{0,500})", line \d+, in (\S{1,200})')
# what can end a traceback: "ExcType", "ExcType: message", "pkg.mod.ExcType: message" (any class name, not only
# *Error: triton's OutOfResources); anything else there is another program's output pasted after a cut traceback
_SOURCE_WORDS = frozenset(("raise", "return", "pass", "break", "continue", "yield", "else:", "try:", "finally:"))
_RE_EXC_ANY = re.compile(r"^[A-Za-z_][\w.]{0,120}(?::(?:\s.*)?)?$")
_RE_EXC = re.compile(r"^([A-Za-z_][\w.]{0,120}(?:Error|Exception|Exit|Interrupt|Failure|error|Warning))(?:: ?(.*))?$")
_RE_BIND = re.compile(r"\[Errno (?:98|48)\][^(]*\('?([^',)]*)'?, (\d+)\)")
_RE_TRIED = re.compile(r"Tried to allocate " + _NUM + r" ?([GM])iB")
_RE_FREE = re.compile(r"of which " + _NUM + r" ?([GM])iB is free")
_RE_NO_MODULE = re.compile(r"No module named '([^']{1,200})'")
_RE_ARGPARSE = re.compile(r"(?:launch_server\.py|__main__\.py|sglang\S*): error: (.*)$")
_RE_DEAD = re.compile(r"Rank (\d+) scheduler (?:is dead|died during initialization)(?:.*?exit code: (-?\d+))?")
_RE_EXITCODE = re.compile(r"^Exit code: (-?\d+)")
# 0.4.0 on: "Model architectures [...] are not supported for now"; 0.3.x: "Unsupported architectures: X. Supported list"
_RE_ARCH = re.compile(r"Model architectures? (\[[^\]]{0,300}\]|\S+) (?:are|is) not supported|has no SGlang implementation"
                      r"|Unsupported architectures?: (\S{1,300})\. Supported list")
# model_runner_kv_cache_mixin (0.4.x to 0.5.9): the user's --max-total-tokens above what the memory profile allows
_RE_DEVICE = re.compile(r"\bdevice='(\w+)'")
# 0.5.9's tokenizer manager refusing a request longer than the pool and context allow (the warm-up's too)
_RE_INPUT_TOO_LONG = re.compile(r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)")
_RE_PROFILED = re.compile(r"max_total_tokens=(-?\d+) is larger than the profiled value (-?\d+)")
_RE_HTTP_STATUS = re.compile(r"\b(401|403|404)\b")

_SPEC_WORDS = ("speculative_algorithm='EAGLE'", "speculative_algorithm='NEXTN'", "speculative_algorithm='EAGLE3'",
               "speculative_algorithm='STANDALONE'")

_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory", "NPU out of memory",
                "out of memory on device", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")
_IMPORT_MARKERS = ("ImportError", "ModuleNotFoundError", "undefined symbol", "Could not load any common_ops",
                   "Can not import FA3", "is not installed. Please", "which is less than the minimum required version",
                   "cannot open shared object file", "GLIBC_", "libcudart.so", "Ignore import error when loading")
_NCCL_MARKERS = ("gloo/transport/tcp", "ProcessGroupGloo", "Gloo connectFullMesh failed", "NCCL error",
                 "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError", "DistBackendError",
                 "DistNetworkError", "ProcessGroupNCCL", "ncclCommInitRank", "Watchdog caught collective",
                 "NCCL WARN", "torch.distributed.DistError", "init_process_group", "DistStoreError")
# torch's TCPStore meeting of several nodes (init_process_group with tcp://<--dist-init-addr>), libtorch's wording
# (format strings read from torch 2.9.1's libtorch_cpu.so): the ranks never met ...
_RENDEZVOUS_MARKERS = ("waiting for clients.", "The client socket has timed out after",
                       "The server socket has failed to listen", "TCP client failed to connect/validate to host",
                       "wait timeout after", "Timed out initializing process group in store based barrier")
# ... or a rank had joined rank 0's store and lost it: c10d's "recvValue failed on SocketImpl(...): <cause>" (also
# sendBytes/recvVector) with its 0-byte read or libc's strerror of a reset or a closed pipe
_STORE_LOST_MARKERS = ("Connection was likely closed", "Connection reset by peer", "Broken pipe")
_STORE_SOCKET = ("failed on SocketImpl(", "DistNetworkError", "TCPStore")
# Gloo's own words (torch 2.9.1's libtorch_cpu.so, third_party/gloo transport/tcp/pair.cc) when the rank at the other
# end of a pair is gone: 0.5.9's scheduler broadcasts over the Gloo CPU group on every loop, so a rank lost after
# start-up ends the others at their next broadcast
_GLOO_PEER_LOST = ("Connection closed by peer", "Read error", "Socket closed", "writev", "Connection reset by peer")
_RE_GLOO_PEER = re.compile(r"(?:peer|error|closed|writev) \[([^\]]+)\]:(\d+)")
# Hub access refusals huggingface_hub prints as bare lines (no exception class in front)
_HUB_ACCESS = ("is restricted. You must have access to it and be authenticated", "You must be authenticated to access",
               "Cannot access gated repo for url", "Access to model", "401 Client Error: Unauthorized for url",
               "Invalid credentials in Authorization header", "Invalid user token")
_MODEL_MARKERS = ("is not a local folder and is not a valid model identifier", "RepositoryNotFoundError",
                  "GatedRepoError", "Cannot access gated repo", "401 Client Error", "403 Client Error",
                  "Repository Not Found", "does not appear to have a file named config.json",
                  "Can't load the configuration of", "LocalEntryNotFoundError", "Incorrect path_or_model_id",
                  "EntryNotFoundError", "No such file or directory: '", "HFValidationError")
_MEMPOOL_FRAMES = ("init_memory_pool", "profile_max_num_token", "handle_max_mamba_cache")
_LOAD_FRAMES = ("load_model", "load_weights", "load_weights_and_postprocess", "_load_weights", "weight_loader")
_GRAPH_FRAMES = ("init_device_graphs", "capture", "capture_one_batch_size", "init_cuda_graphs")
_DRAFT_FRAMES = ("maybe_init_draft_worker", "init_draft_worker", "EAGLEWorker", "__init__eagle")


# Secrets SGLang (and what wraps it) prints: `server_args=ServerArgs(... api_key='...', admin_api_key='...')`
# (entrypoints/engine.py logs the dataclass repr), a token or password field, credentials in a URL, a bearer
# token.  Every line is redacted before anything reads it, so no fact, message, traceback or tail carries one.
REDACTED = "<redacted>"


# Cheap gate (plain substring tests: most lines never reach the rules): a secret-like name (api_key, api-key,
# admin-api-key, secret, password, *_token, *-token), a token field or query parameter, a bearer, URL credentials.
# Counters SGLang prints ("#token: 45", "token usage", "max_total_num_tokens=") are not secrets and stay readable.
def _maybe_secret(line):
    """True when a redaction rule could match (one lower-case copy, then plain substring tests)."""
    low = line.lower()
    return ("pi_key" in low or "pi-key" in low or "pikey" in low or "_token" in low or "ecret" in low
            or "assw" in low or "earer " in low or "token=" in low
            or "token" in low and ("token: '" in low or 'token: "' in low or "token:'" in low or 'token:"' in low
                                   or "token\": " in low or "token': " in low)
            or "-token" in low and "--" in low
            or "://" in low and "@" in low)


# a quoted value may hold its own quote escaped: Python's repr of a key with both ' and " is 'a\'b"c' (the value
# ended at the escaped quote before, and the rest of the key was printed); an unquoted value runs to a blank, a
# comma, a closing bracket or a quote
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_VALUE = r"(" + _QUOTED + r"|[^\s,)\]}'\"]+)"
# a secret's name, in any of the spellings a repr, a JSON or YAML dump, an env listing or a command line uses:
# api_key / api-key / apiKey / admin_api_key, secret, password / passwd, hf_token (never a bare token); a flag also
# --hf-token / --access-token. Not SGLang's counters: "#new-token: 8", "#cached-token: 0", "#token: 45".
_NAME = r"[\w-]*?(?:api[-_]?key|secret|passw(?:or)?d|_token)(?![\w-])"
_FLAG_NAME = r"[\w-]*?(?:api[-_]?key|secret|passw(?:or)?d|[-_]token)(?![\w-])"


def _keep_quotes(m):
    value = m.group(3)
    if _is_empty(value):
        return m.group(0)
    if value[:1] in "'\"":
        return m.group(1) + m.group(2) + value[:1] + REDACTED + value[:1]
    return m.group(1) + m.group(2) + REDACTED


_SECRET_RULES = (
    # a command line, or its repr: --api-key X, --api-key=X, '--api-key', 'X' (a value beginning with - is a flag)
    (re.compile(r"(?i)(--" + _FLAG_NAME + r")(=|\s+|['\"],\s*)(?!-)" + _VALUE), _keep_quotes),
    # name='value' / name="value" / name=value / name: value / "name": "value" of a repr, a config dump, JSON, YAML
    # or an env listing
    (re.compile(r"(?i)(?<![\w#-])(['\"]?" + _NAME + r"['\"]?)(\s*(?:=|:)\s*)" + _VALUE), _keep_quotes),
    # a bare token field only with a quoted value (token='hf_...', "token": "hf_..."), never a counter
    (re.compile(r"(?i)(?<![\w-])(['\"]?token['\"]?)(\s*(?:=|:)\s*)(" + _QUOTED + ")"), _keep_quotes),
    # a token in a query string: ?token=..., &access_token=...
    (re.compile(r"(?i)([?&]\w*token=)[^&\s'\"]+"), lambda m: m.group(1) + REDACTED),
    # scheme://user:password@host
    (re.compile(r"(://[^/\s:@'\"]+:)[^/\s@'\"]+@"), lambda m: m.group(1) + REDACTED + "@"),
    # Authorization: Bearer <token>
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), lambda m: m.group(1) + REDACTED),
)


def _is_empty(value):
    return value in ("None", "''", '""', "null", "") or value.startswith(("None", "[]", "{}"))


def redact(line):
    """``line`` with every secret SGLang or its wrappers print replaced by ``<redacted>``."""
    if not _maybe_secret(line):
        return line
    for rule, repl in _SECRET_RULES:
        line = rule.sub(repl, line)
    return line


def _strip(line):
    """Remove ANSI colour codes, CR and a journald/syslog prefix from one raw line; redact secrets."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    line = redact(line.rstrip("\r\n"))     # first: a secret across the cut would be left half unredacted
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE]
    c0 = line[:1]
    if c0 and c0 not in " \t":
        m = _FOREIGN.match(line)
        if m and not line.startswith("Traceback"):
            line = line[m.end():]
        elif c0 == "[" and line.find(".py:", 20, 240) != -1:
            line = _BRACKET_LEVEL.sub(r"\1 ", line, count=1)
    if line[:1].isalnum() and not line.startswith("Traceback"):
        m = _JOURNAL.match(line)
        if m:
            line = line[m.end():]
    elif line[:1] == " " and line.lstrip()[:1].isalnum():
        m = _JOURNAL.match(line)
        if m:
            line = line[m.end():]
    return line


def _gb(value, unit):
    value = float(value)
    return round(value / 1024.0, 3) if unit == "M" else value


def _tb_has(frames, names):
    for _path, func in frames:
        for n in names:
            if func == n or func.endswith(n):
                return True
    return False


def _tb_path_has(frames, words):
    for path, _func in frames:
        for w in words:
            if w in path:
                return True
    return False


_DIST_FRAMES = ("init_distributed_environment", "init_torch_distributed", "initialize_model_parallel",
                "init_process_group", "init_world_group", "rendezvous", "_store_based_barrier")
_ARCH_FRAMES = ("get_model_architecture", "resolve_transformers_arch", "_get_model_architecture",
                "get_model_cls_by_arch_name", "resolve_model_cls")
_SCHED_INIT_FRAMES = ("init_tp_model_worker", "init_model_worker", "TpModelWorker", "__init__", "initialize")


def _infer_cut(tb, parser):
    """(kind, message, evidence) of a traceback cut before its exception line: the deepest telling frame, else the
    phase reached. Every result is marked inferred by the caller."""
    frames = list(tb.frames)
    if _tb_has(frames, _MEMPOOL_FRAMES) or any(n + "(" in ln for ln in tb.text for n in _MEMPOOL_FRAMES):
        return "kv_pool_oom", "traceback cut off inside init_memory_pool (memory-pool sizing)", "frame init_memory_pool"
    for path, func in reversed(frames):
        if func in _DIST_FRAMES:
            return "nccl_error", "traceback cut off in distributed / model-parallel initialisation", "frame " + func
        if func in _ARCH_FRAMES:
            return "unsupported_model", "traceback cut off while looking up the model class", "frame " + func
        if func in ("make_layers",) or ("/models/" in path and func == "__init__"):
            return "weight_load_oom", "traceback cut off inside the model constructor building its layers", \
                "frame %s in %s" % (func, path.rsplit("/", 1)[-1])
        if func in _LOAD_FRAMES:
            return "other", "traceback cut off at a generic weight-loading call", "frame " + func
    if parser.facts.get("weights_gb") is not None and "max_total_num_tokens" not in parser.facts and \
            _tb_has(frames, _SCHED_INIT_FRAMES) and _PHASE_INDEX[parser.phase] <= _PHASE_INDEX["memory_pool"]:
        return "kv_pool_oom", ("traceback cut off after the weights loaded and before any pool line, in scheduler "
                               "initialisation"), "phase: weights loaded, no KV pool line"
    return "other", "traceback cut off before its exception line", None


def _is_rank0(rank):
    """The main process (no rank) or a rank whose every index is 0 (TP0, DP0 TP0, PP0 TP0)."""
    return not rank or all(part.rstrip("0123456789") != part and int(part.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") or 0) == 0
                           for part in rank.split())


# The rule tables LogParser._line reads a message with (handlers are LogParser methods).
# Start-up progress and numbers, by the words a message begins with (looked up by its first character, so most
# lines test one or two prefixes): the first match handles the line.
PROGRESS_RULES = (
    ("Load weight ", "_on_load_weight"),
    ("Init torch distributed", "_on_dist_init"),
    ("KV Cache is allocated", "_on_kv_cache"),
    ("Mamba Cache is allocated", "_on_mamba_cache"),
    ("Memory pool end", "_on_memory_pool_end"),
    ("Capture ", "_on_capture"),
    ("max_total_num_tokens=", "_on_scheduler_limits"),
    ("server_args=ServerArgs(", "_on_server_args"),
    ("The server is fired up and ready to roll", "_on_ready"),
    # a rank other than 0 of a multi-node server: 0.5.9's engine.py starts its health server once its schedulers are
    # ready (utils/common.py launch_dummy_health_check_server logs this at info); it never logs "fired up"
    ("Dummy health check server started", "_on_ready"),
    ("Started server process", "_on_http"),
    ("Waiting for application startup", "_on_http"),
    ("Application startup complete", "_on_http"),
    ("Uvicorn running on", "_on_uvicorn"),
    ("Prefill batch", "_on_traffic"),
    ("Decode batch", "_on_nothing"),
)
# Then, in this order: ("starts", words) a message beginning with the words, ("has", words) one containing any of
# them. A handler returning False passes the message on to the next rule; a message no rule takes may be the
# wrapped continuation of the line before it.
EVENT_RULES = (
    ("has", ('"GET /model_info', '"POST /generate'), "_on_traffic"),
    ("has", ("Traceback (most recent call last)",), "_on_traceback"),
    # the parent's words while it starts (engine.py, "Received sigquit from a child process"), the tokenizer
    # manager's once it serves (tokenizer_manager.py, "SIGQUIT received. signum=..."): a rank lost after start-up
    ("has", ("sigquit", "SIGQUIT received"), "_on_sigquit"),
    ("has", ("scheduler is dead", "died during initialization"), "_on_scheduler_dead"),
    ("starts", "SIGTERM received", "_on_sigterm"),
    ("starts", "Gracefully exiting", "_on_graceful_exit"),
    ("starts", "Exit code:", "_on_exit_code"),
    ("starts", "Initialization failed", "_on_init_failed"),
    ("starts", "Ignore import error when loading", "_on_import_warning"),
    ("has", ("rror", "memory", "xception", "Killed", "not supported"), "_maybe_error_line"),
    ("has", ("the profiled value",), "_on_profiled"),
    ("starts", "Loading safetensors checkpoint shards:", "_on_shards"),
    ("has", ("ccess", "uthenticat"), "_on_hub_access"),
)


class _Traceback(object):
    __slots__ = ("rank", "frames", "exc", "text", "phase", "closed", "lineno", "after_frame", "after_blank")

    def __init__(self, rank, phase, lineno):
        self.rank = rank
        self.phase = phase
        self.lineno = lineno
        self.frames = deque(maxlen=64)
        self.exc = []            # exception lines of the chain (bounded)
        self.text = deque(maxlen=TRACEBACK_TAIL)
        self.closed = False
        self.after_frame = False     # the previous line was a frame: this one is its source line
        self.after_blank = False     # a blank line came after the exception line
