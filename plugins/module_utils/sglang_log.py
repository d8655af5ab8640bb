# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang start-up log intelligence (standard library only).

``parse_log(text)`` turns an SGLang start-up log (0.5.9 wording, and the 0.5.10 variants) into
structured facts: outcome, the decisive failure with a hint, the phase reached and the numbers
SGLang logged.  ``LogParser`` is the streaming form: feed it lines (or chunks) and ask for
``result()``; its memory does not grow with the length of the log.

Untrusted input: nothing is executed or evaluated, every regular expression is linear (no nested
quantifiers over the same characters) and every buffer is bounded.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
from collections import deque

PHASES = ("args", "dist_init", "load_weights", "memory_pool", "cuda_graph", "draft", "http", "warmup", "ready")
_PHASE_INDEX = dict((p, i) for i, p in enumerate(PHASES))

KINDS = (
    "kv_pool_oom", "weight_load_oom", "cuda_graph_oom", "cuda_oom", "port_in_use", "import_error",
    "nccl_error", "model_not_found", "unsupported_model", "tp_mismatch", "bad_argument", "warmup_failed", "other",
)

# How strongly a kind names a root cause.  When several failures are logged (two TP ranks, the
# sigquit echo, an NCCL error on the rank whose peer died) the most specific one wins; ties go to
# the earliest.  NCCL errors are often a consequence of a peer rank dying, hence ranked low.
_SPECIFICITY = {
    "kv_pool_oom": 9, "weight_load_oom": 9, "cuda_graph_oom": 9, "port_in_use": 9, "import_error": 9,
    "model_not_found": 9, "tp_mismatch": 9, "bad_argument": 9, "unsupported_model": 8, "warmup_failed": 8,
    "cuda_oom": 7,
    "nccl_error": 4, "other": 2,
}

# The phase a failure kind implies was reached (used when only the error line was pasted).
_KIND_PHASE = {
    "kv_pool_oom": "memory_pool", "weight_load_oom": "load_weights", "cuda_graph_oom": "cuda_graph",
    "nccl_error": "dist_init", "tp_mismatch": "load_weights", "port_in_use": "http", "warmup_failed": "warmup",
}

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
_RE_MFS = re.compile(r"mem_fraction_static=([0-9.]+)")
_RE_TP = re.compile(r"\btp_size=(\d+)")
_RE_PORT = re.compile(r"\bport=(\d+)")
_RE_DIST_ADDR = re.compile(r"\bdist_init_addr='([^']+)'")
_RE_GRAPH_BS = re.compile(r"\bcuda_graph_max_bs=(\d+)")
_RE_VERSION = re.compile(r"(?:sglang[_ ]version|SGLang v(?=\d)|sglang==)[=: ]*v?(\d+\.\d+\.\d+[\w.+-]*)", re.I)
_RE_KV_OOM = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
    r"(?: Current value: (?:self\.server_args\.)?mem_fraction_static=([0-9.]+))?")
# 0.5.2x (model_runner_kv_cache_mixin): the same budget failure, raised as a ValueError that names the fraction
_RE_KV_OOM_LATER = re.compile(r"Loaded weights leave no GPU memory for the KV cache under "
                              r"--mem-fraction-static=(\d+(?:\.\d+)?)")
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


# Cheap gate (plain substring tests: most lines never reach the rules): a secret-like name, a token field or query
# parameter, a bearer, URL credentials. Counters SGLang prints ("#token: 45", "token usage", "max_total_num_tokens=")
# are not secrets and stay readable.
def _maybe_secret(line):
    """True when a redaction rule could match (case variants spelled out: no lower() copy of every line)."""
    return ("pi_key" in line or "PI_KEY" in line or "_token" in line or "_TOKEN" in line or "ecret" in line
            or "ECRET" in line or "assw" in line or "ASSW" in line or "earer " in line or "EARER " in line
            or "token=" in line or "token:" in line and ("token: '" in line or 'token: "' in line
                                                         or "token:'" in line or 'token:"' in line)
            or "://" in line and "@" in line)


# a quoted value may hold its own quote escaped: Python's repr of a key with both ' and " is 'a\'b"c' (the value
# ended at the escaped quote before, and the rest of the key was printed)
_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_VALUE = r"(" + _QUOTED + r"|[^\s,)'\"]+)"


def _keep_quotes(m):
    value = m.group(3)
    if _is_empty(value):
        return m.group(0)
    if value[:1] in "'\"":
        return m.group(1) + m.group(2) + value[:1] + REDACTED + value[:1]
    return m.group(1) + m.group(2) + REDACTED


_SECRET_RULES = (
    # name='value' / name="value" / name=value / name: value of a repr, a config dump or an env listing
    (re.compile(r"(?i)\b(\w*(?:api_key|secret|password)|\w+_token)(=|: ?)" + _VALUE), _keep_quotes),
    # a bare token field only with a quoted value (token='hf_...'), never a counter
    (re.compile(r"(?i)\b(token)(=|: ?)(" + _QUOTED + ")"), _keep_quotes),
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
    line = line.rstrip("\r\n")
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
    return redact(line)


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
    ("has", ("sigquit",), "_on_sigquit"),
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


class LogParser(object):
    """Streaming SGLang log parser: ``feed()`` lines, then ``result()``."""

    def __init__(self):
        self.phase = "args"
        self.ready = False
        self.ready_lineno = None
        self.lines = 0
        self.facts = {}
        self._fact_rank0 = {}
        self.facts_by_rank = {}
        self._load_begins = {}
        self.failures = []       # bounded list of candidate dicts (best kept)
        self._tb = None
        self._last_tb = None
        self._last_rank = None
        self._prev = ""          # previous message (for stray-wrapped lines)
        self.fatal_after_ready = False
        self.died = False
        self.stop_requested = False     # 0.5.9's "SIGTERM received ... Draining requests and shutting down..."
        self.stopped = False            # then "Gracefully exiting...": a stop, however systemd records its end
        self.exit_code = None
        self.spec = False
        self.import_evidence = None
        self.port = None
        self.dist_init_addr = None
        self.cuda_graph_max_bs = None
        self._progress = {}
        for words, name in PROGRESS_RULES:
            self._progress.setdefault(words[:1], []).append((words, getattr(self, name)))
        self._events = tuple((how, words, getattr(self, name)) for how, words, name in EVENT_RULES)

    # -- helpers -------------------------------------------------------------------------------
    def _advance(self, phase):
        if _PHASE_INDEX[phase] > _PHASE_INDEX[self.phase]:
            self.phase = phase

    def _fact(self, rank, key, value):
        per = self.facts_by_rank.setdefault(rank or "main", {})
        if key not in per:
            per[key] = value
        # several ranks print the same fact: `facts` holds rank 0's (the main process's, TP0, DP0 TP0, ...) even when
        # another rank printed first; the others stay in facts_by_rank
        first = key not in self.facts
        if first or (_is_rank0(rank) and not self._fact_rank0.get(key)):
            self.facts[key] = value
            self._fact_rank0[key] = _is_rank0(rank)

    def _add_failure(self, kind, message, rank, frames=(), tb_lines=None, phase=None, inferred=False,
                     provisional=False):
        cand = {
            "kind": kind,
            "message": (message or "")[:MESSAGE_MAX],
            "rank": rank,
            "phase": phase or self.phase,
            "traceback": list(tb_lines) if tb_lines else [],
            "frames": [f for _p, f in frames][-12:] if frames else [],
            "lineno": self.lines,
            "after_ready": self.ready,
        }
        if kind == "other" and cand["phase"] == "warmup" and any(f["kind"] == "warmup_failed" for f in self.failures):
            cand["kind"] = "warmup_failed"          # the warm-up's own exception, after its "Initialization failed"
        if inferred:
            cand["inferred"] = True
        if provisional:
            cand["provisional"] = True
        self.failures.append(cand)
        if len(self.failures) > 16:
            # keep the best and the earliest few: drop the least specific latest one
            worst = min(range(len(self.failures)),
                        key=lambda i: (_SPECIFICITY[self.failures[i]["kind"]], -self.failures[i]["lineno"]))
            del self.failures[worst]

    # -- traceback handling --------------------------------------------------------------------
    def _close_tb(self):
        tb = self._tb
        if tb is None or tb.closed:
            return
        tb.closed = True
        self._tb = None
        self._last_tb = tb
        text = "\n".join(tb.exc)
        kind, message = self._classify(text, tb.frames, tb.phase)
        inferred = False
        evidence = None
        if kind is None:
            if not tb.exc:
                # truncated mid-traceback: infer from the deepest frame that says something, else from the phase
                inferred = True
                kind, message, evidence = _infer_cut(tb, self)
            else:
                kind, message = "other", tb.exc[-1]
        phase = tb.phase
        if kind in ("kv_pool_oom",):
            phase = "memory_pool" if _PHASE_INDEX[phase] < _PHASE_INDEX["memory_pool"] else phase
        if _tb_has(tb.frames, _DRAFT_FRAMES) and _PHASE_INDEX[phase] < _PHASE_INDEX["draft"]:
            phase = "draft"
        self._add_failure(kind, message, tb.rank, tb.frames, tb.text, phase, inferred)
        if evidence is not None:
            self.failures[-1]["evidence"] = evidence

    def _classify(self, text, frames, phase):
        """Return (kind, decisive message) for an exception text + frames, or (None, None)."""
        if not text:
            return None, None
        m = _RE_KV_OOM.search(text)
        if m:
            if m.group(1):
                self.facts["mem_fraction_static"] = float(m.group(1).rstrip("."))   # from the error: authoritative
            return "kv_pool_oom", m.group(0)
        m = _RE_KV_OOM_LATER.search(text)
        if m:
            self.facts["mem_fraction_static"] = float(m.group(1))     # read from the error: authoritative
            return "kv_pool_oom", _line_with(text, "Loaded weights leave")
        if "Not enough GPU memory for hybrid" in text or "Memory pool size is too small" in text:
            return "kv_pool_oom", _line_with(text, "memory")
        if "state cache is too small to serve any requests" in text:
            # 0.5.2x: the hybrid (mamba/linear-attention) state pool leaves no request slot
            return "kv_pool_oom", _line_with(text, "too small to serve")
        if "KV" in text and ("leaves no room for the full KV pool" in text or "no memory for the KV cache" in text
                             or "no memory left for the KV cache" in text):
            # later releases' wordings of the same budget failure (0.5.2x pool_configurator: the SWA pool cap)
            return "kv_pool_oom", _line_with(text, "KV")
        for mk in _OOM_MARKERS:
            if mk in text:
                msg = _line_with(text, mk)
                if phase == "draft" or _tb_has(frames, _DRAFT_FRAMES):
                    return "cuda_oom", msg
                if "Capture cuda graph failed" in text or _tb_has(frames, _GRAPH_FRAMES) or phase == "cuda_graph":
                    return "cuda_graph_oom", msg
                if _tb_has(frames, _LOAD_FRAMES) or phase == "load_weights":
                    return "weight_load_oom", msg
                return "cuda_oom", msg
        if "address already in use" in text or "Errno 98" in text:
            return "port_in_use", _line_with(text, "address already in use")
        for mk in ("gloo/transport/tcp", "ProcessGroupGloo", "Gloo connectFullMesh failed"):
            if mk in text:     # the ranks lost each other; a graph-capture failure around it is only the wrapper
                return "nccl_error", _line_with(text, mk)
        for mk in _IMPORT_MARKERS:
            if mk in text:
                return "import_error", _line_with(text, mk)
        for mk in _MODEL_MARKERS:
            if mk in text:
                return "model_not_found", _line_with(text, mk)
        for mk in _HUB_ACCESS:
            if mk in text and ("Access to model" != mk or "is restricted" in text):
                return "model_not_found", _line_with(text, mk)
        if _RE_ARCH.search(text):
            return "unsupported_model", _line_with(text, "not supported") or _line_with(text, "SGlang")
        if "is not divisible by" in text or "must be divisible by" in text and "moe" in text.lower():
            return "tp_mismatch", _line_with(text, "divisible")
        if text.startswith("AssertionError") and text.strip() == "AssertionError" and (
                _tb_has(frames, ("__init__",)) and _tb_path_has(frames, ("/models/",))):
            return "tp_mismatch", "AssertionError in model init (a head count is not divisible by tp_size)"
        if "must be divisible by" in text or "cannot contain a colon" in text or "invalid choice" in text:
            return "bad_argument", text.splitlines()[-1]
        for mk in _NCCL_MARKERS:
            if mk in text:
                return "nccl_error", _line_with(text, mk)
        if "Capture cuda graph failed" in text:
            return "other", _line_with(text, "Capture cuda graph failed")
        return None, None

    # -- main entry ----------------------------------------------------------------------------
    def feed_text(self, text):
        for line in io.StringIO(text, newline=None):
            self.feed(line)
        return self

    def feed(self, raw):
        self.lines += 1
        line = _strip(raw)
        if not line or line.isspace():
            # a blank line: nothing is ever joined across it; it ends a traceback cut before its exception line
            # (a non-contiguous paste), and after an exception line only a chained traceback may follow it
            self._prev = ""
            tb = self._tb
            if tb is not None:
                if tb.exc:
                    tb.after_blank = True
                else:
                    self._close_tb()
            return
        rank = None
        m = _SGL.match(line) if line[:1] == "[" else None
        if m:
            rank = m.group(2).strip() or None
            msg = m.group(3)
            self._last_rank = rank
            prefixed = True
        else:
            msg = line
            prefixed = False
        tb = self._tb
        if tb is not None:
            if prefixed:
                self._close_tb()
                tb = None
            elif self._tb_line(tb, msg):
                self._prev = msg
                return
            else:                          # another program's output: the traceback ended before it
                self._close_tb()
                tb = None
        elif not prefixed and msg.lstrip().startswith("File \"") and _RE_FRAME.match(msg):
            # a headless fragment (pasted from mid-traceback, no "Traceback" header): a traceback all the same
            self._tb = _Traceback(self._last_rank, self.phase, self.lines)
            self._tb_line(self._tb, msg)
            self._prev = msg
            return
        # uvicorn "[ts] ERROR:    ..." lines
        if prefixed and msg[:1] in "IEWDC":
            um = _UVICORN_LEVEL.match(msg)
            if um:
                msg = um.group(2)
        self._line(msg, rank, prefixed)
        self._prev = msg

    def _tb_line(self, tb, msg):
        """Take one line of an open traceback; False when the line is not part of it (the caller closes it)."""
        if msg.startswith("Traceback (most recent call last)") or msg.endswith("Traceback (most recent call last):"):
            tb.text.append(msg[:300])
            tb.after_blank = tb.after_frame = False
            return True
        if msg.startswith("During handling of the above exception") or msg.startswith("The above exception was"):
            tb.text.append(msg[:300])
            tb.after_blank = False
            return True
        if tb.after_blank:
            return False                   # after the exception and a blank line: only a chained traceback belongs
        fm = _RE_FRAME.match(msg)
        if fm:
            tb.text.append(msg[:300])
            tb.frames.append((fm.group(1), fm.group(2)))
            tb.after_frame = True
            return True
        if msg[:1] in (" ", "\t", "^", "~") or (tb.after_frame and (
                not _RE_EXC_ANY.match(msg) or msg in _SOURCE_WORDS)):
            tb.text.append(msg[:300])      # a frame's source line (flush left in some pastes) or its ^^^ markers
            tb.after_frame = False
            return True
        tb.after_frame = False
        em = _RE_EXC.match(msg)
        if not tb.exc and not em and not _RE_EXC_ANY.match(msg):
            return False                   # a cut traceback, then another program's output
        tb.text.append(msg[:300])
        if em or not tb.exc:
            if len(tb.exc) < 12:
                tb.exc.append(msg[:MESSAGE_MAX])
        elif len(tb.exc) < 12:
            # continuation of a multi-line exception message
            tb.exc.append(msg[:MESSAGE_MAX])
        return True

    def _line(self, msg, rank, prefixed):
        """Read one message through the rule tables (PROGRESS_RULES, then EVENT_RULES): the first rule whose
        words match handles it, unless its handler returns False (then the next rule is tried)."""
        for words, handler in self._progress.get(msg[:1], ()):
            if msg.startswith(words):
                handler(msg, rank, prefixed)
                return
        for how, words, handler in self._events:
            if (msg.startswith(words) if how == "starts" else any(w in msg for w in words)) \
                    and handler(msg, rank, prefixed) is not False:
                return
        self._continuation(msg, rank, prefixed)

    # ---- start-up progress and numbers (PROGRESS_RULES) ----
    def _on_load_weight(self, msg, rank, prefixed):
        if msg.startswith("Load weight begin"):
            key = rank or "main"
            n = self._load_begins.get(key, 0) + 1
            self._load_begins[key] = n
            if n >= 2:
                self._advance("draft")
            else:
                self._advance("load_weights")
                mm = _RE_LOAD_BEGIN.search(msg)
                if mm:
                    self._fact(rank, "avail_mem_before_load_gb", float(mm.group(1)))
        elif msg.startswith("Load weight end"):
            self._advance("memory_pool")
            mm = _RE_LOAD_END.search(msg)
            if mm and self._load_begins.get(rank or "main", 0) <= 1:
                after = float(mm.group(1))
                self._fact(rank, "avail_mem_after_load_gb", after)
                if mm.group(2) is not None:
                    self._fact(rank, "weights_gb", float(mm.group(2)))
                else:                   # 0.4.0-0.4.3: the weights are what the load took from the free memory
                    before = (self.facts_by_rank.get(rank or "main") or {}).get("avail_mem_before_load_gb")
                    if before is not None:
                        self._fact(rank, "weights_gb", round(before - after, 2))

    def _on_dist_init(self, msg, rank, prefixed):
        self._advance("dist_init")

    def _on_kv_cache(self, msg, rank, prefixed):
        self._advance("memory_pool")
        # the fields are read one by one: a release that adds one (a dtype before the count) changes nothing
        tm = _RE_KV_TOKENS.search(msg)
        sm = _RE_KV_SIZES.search(msg)
        if (tm or sm) and self._load_begins.get(rank or "main", 0) <= 1:
            if tm:
                self._fact(rank, "kv_tokens", int(tm.group(1)))
            if sm and sm.group(1) is not None:
                self._fact(rank, "k_size_gb", float(sm.group(1)))
                self._fact(rank, "v_size_gb", float(sm.group(2)))
            elif sm:
                self._fact(rank, "k_size_gb", float(sm.group(3)))
                self._fact(rank, "kv_size_gb", float(sm.group(3)))

    def _on_mamba_cache(self, msg, rank, prefixed):
        self._advance("memory_pool")
        mm = _RE_MAMBA.search(msg)
        if mm and self._load_begins.get(rank or "main", 0) <= 1:
            total = sum(float(g) for g in mm.group(2, 3, 4, 5) if g is not None)
            self._fact(rank, "mamba_cache_gb", round(total, 3))
            if mm.group(1) is not None:
                self._fact(rank, "max_mamba_cache_size", int(mm.group(1)))

    def _on_memory_pool_end(self, msg, rank, prefixed):
        self._advance("memory_pool")

    def _on_capture(self, msg, rank, prefixed):
        self._advance("draft" if "draft" in msg else "cuda_graph")
        if " end." in msg:
            mm = _RE_GRAPH_END.search(msg)
            if mm and "draft" not in msg and self._load_begins.get(rank or "main", 0) <= 1:
                self._fact(rank, "cuda_graph_mem_gb", float(mm.group(1)))
        if msg.startswith("Capture cuda graph failed"):
            # "Capture cuda graph failed: <inner>" logged as a line (the traceback follows separately)
            kind, message = self._classify(msg, (), "cuda_graph")
            self._add_failure(kind or "other", message or msg, rank, phase="cuda_graph")

    def _on_scheduler_limits(self, msg, rank, prefixed):
        self._advance("http")
        mm = _RE_SCHED.search(msg)
        if mm:
            self._fact(rank, "max_total_num_tokens", int(mm.group(1)))
            self._fact(rank, "max_running_requests", int(mm.group(4)))
            self._fact(rank, "context_len", int(mm.group(5)))

    def _on_server_args(self, msg, rank, prefixed):
        mm = _RE_MFS.search(msg)
        if mm:
            self._fact(None, "mem_fraction_static", float(mm.group(1)))
        mm = _RE_TP.search(msg)
        if mm:
            self._fact(None, "tp_size", int(mm.group(1)))
        mm = _RE_PORT.search(msg)
        if mm:
            self.port = int(mm.group(1))
        mm = _RE_DIST_ADDR.search(msg)
        if mm:
            self.dist_init_addr = mm.group(1)
        mm = _RE_GRAPH_BS.search(msg)
        if mm:
            self.cuda_graph_max_bs = int(mm.group(1))
        if any(w in msg for w in _SPEC_WORDS):
            self.spec = True
        mm = _RE_VERSION.search(msg)
        if mm:
            self._fact(None, "sglang_version", mm.group(1))
        mm = _RE_DEVICE.search(msg)
        if mm:
            self._fact(None, "device", mm.group(1))

    def _on_ready(self, msg, rank, prefixed):
        self._advance("ready")
        self.ready = True
        self.ready_lineno = self.lines

    def _on_http(self, msg, rank, prefixed):
        self._advance("http")

    def _on_uvicorn(self, msg, rank, prefixed):
        self._advance("warmup")

    def _on_traffic(self, msg, rank, prefixed):
        if not self.ready:
            self._advance("warmup")

    def _on_nothing(self, msg, rank, prefixed):
        return None

    # ---- failures (EVENT_RULES) ----
    def _on_traceback(self, msg, rank, prefixed):
        self._close_tb()
        self._tb = _Traceback(rank or self._last_rank, self.phase, self.lines)
        head = msg.split("Traceback (most recent call last)")[0]
        self._tb.text.append(msg[:300])
        if "warmup error" in head:
            if _PHASE_INDEX[self.phase] < _PHASE_INDEX["warmup"]:
                self._tb.phase = "warmup"
            if "Initialization failed" in head:
                self._on_init_failed(head, rank, prefixed)

    def _on_sigterm(self, msg, rank, prefixed):
        self.stop_requested = True

    def _on_graceful_exit(self, msg, rank, prefixed):
        # SGLang 0.5.9 then ends its own process tree with SIGKILL: exit status 137, which systemd records as
        # Result=signal, status 9 - the same end as a failed start; this line says it was asked to stop
        self.stopped = True

    def _on_sigquit(self, msg, rank, prefixed):
        self.died = True
        if self.ready:
            self.fatal_after_ready = True

    def _on_scheduler_dead(self, msg, rank, prefixed):
        self.died = True
        if self.ready:
            self.fatal_after_ready = True
        mm = _RE_DEAD.search(msg)
        code = mm.group(2) if mm else None
        if code is not None:
            self.exit_code = int(code)
        self._add_failure("other", msg, rank)

    def _on_exit_code(self, msg, rank, prefixed):
        mm = _RE_EXITCODE.match(msg)
        if mm:
            self.exit_code = int(mm.group(1))

    def _on_init_failed(self, msg, rank, prefixed):
        self.died = True
        if "warmup" in msg:
            # http_server.py's "Initialization failed. warmup error: <traceback>": the server loaded and listened,
            # its own warm-up request failed; the traceback's exception that follows is the message
            self._advance("warmup")
            self._add_failure("warmup_failed", msg, rank, phase="warmup", provisional=True)
            return
        self._add_failure("other", msg, rank)

    def _on_import_warning(self, msg, rank, prefixed):
        self.import_evidence = msg

    def _on_profiled(self, msg, rank, prefixed):
        pm = _RE_PROFILED.search(msg)
        if not pm:
            return False
        self._fact(rank, "max_total_tokens_requested", int(pm.group(1)))
        profiled = int(pm.group(2))
        if self.phase != "draft":       # a draft model's own profile says nothing about the target's pool
            self._fact(rank, "profiled_max_total_num_tokens", profiled)
            if profiled <= 0:
                # the pool's error follows (0.5.9's "Not enough memory ... Current value"): that line is the message
                # when it comes; this one stands for it in a log cut here
                self._add_failure("kv_pool_oom", msg, rank or self._last_rank, phase="memory_pool", provisional=True)
                self.died = True
        return None

    def _on_shards(self, msg, rank, prefixed):
        self._advance("load_weights")          # the shard progress bar: the weights are loading

    def _on_hub_access(self, msg, rank, prefixed):
        for mk in _HUB_ACCESS:
            if mk in msg and (mk != "Access to model" or "is restricted" in msg):
                self._add_failure("model_not_found", msg, rank or self._last_rank)
                return None
        return False

    def _continuation(self, msg, rank, prefixed):
        """A stray-wrapped continuation of a key line (a terminal or a paste broke it): read joined to the line
        before it."""
        if not prefixed and self._prev and ("Not enough memory" in self._prev or "KV Cache is allocated" in self._prev
                                            or "Load weight end" in self._prev or "max_total_num_tokens" in self._prev):
            joined = self._prev + " " + msg.strip()
            joined2 = self._prev + msg.strip()
            for j in (joined2, joined):
                if _RE_KV_OOM.search(j) and _RE_KV_OOM.search(j).group(1):
                    self._kv_oom_line(j, rank)
                    return
            for j in (joined, joined2):
                if _RE_LOAD_END.search(j) or _RE_KV.search(j) or _RE_SCHED.search(j):
                    self._line(j, rank, True)
                    return

    def _kv_oom_line(self, msg, rank):
        mm = _RE_KV_OOM.search(msg)
        if mm and mm.group(1):
            self._fact(rank, "mem_fraction_static", float(mm.group(1)))
            # a value read from the error line is authoritative
            self.facts["mem_fraction_static"] = float(mm.group(1))
        self.died = True
        last = self.failures[-1] if self.failures else None
        if last is not None and last["kind"] == "kv_pool_oom" and "Current value" not in last["message"]:
            # the same error, completed by a wrapped continuation line
            last["message"] = (mm.group(0) if mm else msg)[:MESSAGE_MAX]
            return
        self._add_failure("kv_pool_oom", mm.group(0) if mm else msg, rank or self._last_rank,
                          phase="memory_pool" if _PHASE_INDEX[self.phase] < _PHASE_INDEX["memory_pool"] else self.phase)

    def _maybe_error_line(self, msg, rank, prefixed):
        if "Not enough memory" in msg:
            if _RE_KV_OOM.search(msg):
                self._kv_oom_line(msg, rank)
                return
        em = _RE_EXC.match(msg)
        if "address already in use" in msg or "Errno 98" in msg:
            bm = _RE_BIND.search(msg)
            if bm:
                self.port = int(bm.group(2))
            self._add_failure("port_in_use", msg, rank, phase="http")
            return
        am = _RE_ARGPARSE.search(msg)
        if am:
            self._add_failure("bad_argument", msg, rank, phase="args")
            self.died = True
            return
        if em and not prefixed:
            # a bare exception line (pasted alone, or after a lost "Traceback" header)
            kind, message = self._classify(msg, (), self.phase)
            if kind:
                self._add_failure(kind, message, rank or self._last_rank)
                self.died = True
            elif em.group(1).endswith(("Error", "Exception")):
                self._add_failure("other", msg, rank or self._last_rank)
            return
        if prefixed:
            kind, message = self._classify(msg, (), self.phase)
            if kind in ("cuda_oom", "cuda_graph_oom", "weight_load_oom", "nccl_error", "unsupported_model",
                        "model_not_found", "kv_pool_oom"):
                self._add_failure(kind, message, rank)
            elif "The memory capacity is unbalanced" in msg:
                self._add_failure("other", msg, rank, phase="dist_init")
            elif ("Prefill out of memory" in msg or "Decode out of memory" in msg
                  or "alloc_req_slots runs out of memory" in msg):
                self._add_failure("other", msg, rank)
        elif "Killed" in msg and len(msg) < 80:
            self.died = True
            self.exit_code = self.exit_code if self.exit_code is not None else -9

    # -- the answer ----------------------------------------------------------------------------
    def result(self):
        self._close_tb()
        failure = None
        pre_ready = [f for f in self.failures if not f["after_ready"]]
        post_ready = [f for f in self.failures if f["after_ready"]]
        candidates = pre_ready if pre_ready else (post_ready if self.fatal_after_ready else [])
        if candidates:
            best = max(candidates, key=lambda f: (_SPECIFICITY[f["kind"]], not f.get("provisional"), -f["lineno"]))
            loaded = self.facts.get("weights_gb") is not None
            if self.import_evidence and not loaded and (
                    best["kind"] == "unsupported_model" or (best.get("inferred") and best["kind"] == "other")):
                # a model module failed to import, then the lookup failed or the traceback was cut: the import is the
                # cause (a benign import warning never overrides a failure after the weights loaded)
                best = dict(best, kind="import_error", message=self.import_evidence[:MESSAGE_MAX])
                if best.get("inferred"):
                    best["evidence"] = "the log's model-module import failure"
            failure = best
        if failure is not None:
            outcome = "failed"
        elif self.ready:
            outcome = "ready"
        elif self.died and self.phase == "memory_pool" and self.facts.get("avail_mem_after_load_gb") is not None \
                and self.facts.get("kv_tokens") is None:
            # it died right after the weights loaded, before the KV cache was allocated: SGLang sizes its memory pool
            # there, and that is where 0.5.9 raises the pool error - inferred, with the numbers it rests on
            outcome = "failed"
            failure = {"kind": "kv_pool_oom", "inferred": True, "why": "the process died without a logged cause",
                       "rank": None, "phase": "memory_pool",
                       "traceback": [], "frames": [], "lineno": self.lines, "after_ready": False,
                       "message": "the server process died (sigquit/kill) while sizing its memory pool, without a "
                                  "logged cause",
                       "evidence": "the log ends after 'Load weight end' (%s GiB free before loading, %s GiB after) "
                                   "and before the KV cache was allocated" % (
                                       _fmt(self.facts.get("avail_mem_before_load_gb") or 0),
                                       _fmt(self.facts["avail_mem_after_load_gb"]))}
        elif self.died:
            outcome = "failed"
            failure = {"kind": "other", "message": "the server process died (sigquit/kill) without a logged cause",
                       "rank": None, "phase": self.phase, "traceback": [], "frames": [], "lineno": self.lines,
                       "after_ready": False}
        else:
            outcome = "starting"
        phase = self.phase
        out_failure = None
        if failure is not None:
            implied = _KIND_PHASE.get(failure["kind"])
            if implied and _PHASE_INDEX[implied] > _PHASE_INDEX[phase]:
                phase = implied
            if _PHASE_INDEX[failure["phase"]] > _PHASE_INDEX[phase]:
                phase = failure["phase"]
            out_failure = {
                "kind": failure["kind"],
                "message": failure["message"],
                "rank": failure["rank"],
                "phase": failure["phase"] if _PHASE_INDEX[failure["phase"]] >= _PHASE_INDEX.get(
                    _KIND_PHASE.get(failure["kind"], "args"), 0) else _KIND_PHASE[failure["kind"]],
                "traceback": "\n".join(failure["traceback"][-TRACEBACK_TAIL:]),
                "hint": hint_for(failure, self.facts, self),
            }
            if failure.get("inferred"):
                out_failure["inferred"] = True
                out_failure["evidence"] = failure.get("evidence") or "the traceback was cut before its exception line"
                out_failure["hint"] = "Inferred (%s; evidence: %s). %s" % (
                    failure.get("why") or "the traceback was cut before its exception line", out_failure["evidence"],
                    out_failure["hint"])
            if self.exit_code is not None:
                out_failure["exit_code"] = self.exit_code
        return {
            "outcome": outcome,
            "failure": out_failure,
            "phase": phase,
            "facts": dict(self.facts),
            "facts_by_rank": dict((k, dict(v)) for k, v in self.facts_by_rank.items()),
            "lines": self.lines,
            "stopped": self.stopped,
        }


def _line_with(text, needle):
    for ln in text.splitlines():
        if needle in ln:
            return ln.strip()[:MESSAGE_MAX]
    return text.strip().splitlines()[-1][:MESSAGE_MAX] if text.strip() else ""


def _fmt(x):
    return ("%.2f" % x).rstrip("0").rstrip(".")


def _fmt_small(x):
    """Two decimals, or two significant digits below 0.01 (a fraction of 0.0001 is not 0)."""
    return _fmt(x) if x == 0 or abs(x) >= 0.01 else "%.2g" % x


def hint_for(failure, facts, parser=None):
    """What to do about a failure, with the log's numbers where it has them."""
    kind = failure["kind"]
    msg = failure.get("message") or ""
    mfs = facts.get("mem_fraction_static")
    m0 = facts.get("avail_mem_before_load_gb")
    m1 = facts.get("avail_mem_after_load_gb")
    w = facts.get("weights_gb")
    spec = bool(parser and parser.spec)
    if kind == "kv_pool_oom":
        parts = []
        if mfs is not None and m0 is not None and (m1 is not None or w is not None):
            if m1 is None:
                m1 = m0 - w
            weights = m0 - m1 if w is None else w
            rest = m1 - m0 * (1 - mfs)
            parts.append(
                "The static budget is mem_fraction_static x free memory = %s x %s = %s GiB%s; the weights "
                "took %s GiB, leaving %s GiB for the KV cache%s."
                % (_fmt_small(mfs), _fmt(m0), _fmt_small(mfs * m0),
                   " of the machine's memory (--device cpu)" if facts.get("device") == "cpu" else " per GPU",
                   _fmt_small(weights), _fmt_small(rest),
                   " and the hybrid (mamba/GDN) state pools" if "mamba_cache_gb" in facts or spec else ""))
            profiled = facts.get("profiled_max_total_num_tokens")
            if profiled is not None and profiled <= 0:
                parts.append("SGLang's own profile of that room came to %d tokens: the pool is short by %d tokens "
                             "before even one fits." % (profiled, 1 - profiled))
            if facts.get("max_total_tokens_requested") is not None:
                parts.append("The cap --max-total-tokens %d does not help: SGLang takes the smaller of the cap and "
                             "what memory holds." % facts["max_total_tokens_requested"])
            need = weights / m0 if m0 else None
            if need is not None and rest <= 0:
                parts.append("Any mem_fraction_static at or below %s cannot hold the weights." % _fmt(need))
        elif mfs is not None:
            parts.append("mem_fraction_static was %s." % _fmt_small(mfs))
        parts.append(
            "Raise --mem-fraction-static (lowering it makes this worse), or shrink what sits in the budget: "
            "more GPUs (tp_size), a quantized checkpoint, and for hybrid GDN models with speculative decoding "
            "fewer --max-running-requests, fewer --speculative-num-draft-tokens or --mamba-ssm-dtype bfloat16. "
            "--context-length and --disable-cuda-graph do not enter this budget. "
            "Run playbooks/plan.yml with these numbers to see each fix's token count.")
        return " ".join(parts)
    if kind == "weight_load_oom":
        extra = ""
        if m0 is not None:
            extra = " Free memory before loading was %s GiB per GPU." % _fmt(m0)
        return ("The weights did not fit on the GPU while loading." + extra + " Use more GPUs (raise tp_size), a "
                "quantized checkpoint, or free the GPU (check nvidia-smi for other processes).")
    if kind == "cuda_graph_oom":
        bs = parser.cuda_graph_max_bs if parser else None
        now_mfs = " (now %s)" % _fmt(mfs) if mfs is not None else ""
        now_bs = " (now %s)" % bs if bs else ""
        return ("CUDA-graph capture ran out of memory in the (1 - mem_fraction_static) headroom. Lower "
                "--mem-fraction-static%s or --cuda-graph-max-bs%s; --disable-cuda-graph is the last resort."
                % (now_mfs, now_bs))
    if kind == "cuda_oom":
        tm = _RE_TRIED.search(msg)
        fm = _RE_FREE.search(msg)
        nums = ""
        if tm:
            nums += " It tried to allocate %s GiB" % _fmt(_gb(tm.group(1), tm.group(2)))
            if fm:
                nums += " with %s GiB free" % _fmt(_gb(fm.group(1), fm.group(2)))
            nums += "."
        where = "the draft model (weights, KV and graphs come out of the headroom)" if failure.get(
            "phase") == "draft" else "activations, graphs or workspaces"
        return ("CUDA ran out of memory for %s.%s Lower --mem-fraction-static to leave more headroom%s, or lower "
                "--chunked-prefill-size / --cuda-graph-max-bs." % (where, nums,
                                                                   " (now %s)" % _fmt(mfs) if mfs else ""))
    if kind == "port_in_use":
        port = parser.port if parser and parser.port else None
        return ("The HTTP port%s is already taken. Find its owner with `ss -ltnp 'sport = :%s'`, stop it or set "
                "another port." % (" %d" % port if port else "", port if port else "PORT"))
    if kind == "import_error":
        mm = _RE_NO_MODULE.search(msg)
        what = "module '%s' is missing" % mm.group(1) if mm else "a compiled package failed to load"
        return ("The Python environment is broken: %s. Rebuild it with the sglang_venv role (pinned sglang 0.5.9, "
                "torch 2.9.1, sgl-kernel 0.3.21, flashinfer 0.6.3) and check that flash-attn/sgl-kernel wheels "
                "match torch, CUDA and the Python ABI." % what)
    if kind == "nccl_error" and any(mk in msg for mk in _STORE_LOST_MARKERS) and \
            any(mk in msg for mk in _STORE_SOCKET):
        return ("This rank had reached rank 0's TCPStore at --dist-init-addr%s and lost the connection before the "
                "ranks had met: the process holding that port stopped, was restarted or died - often a rank 0 of an "
                "earlier launch, still running when this rank joined it, then stopped. Read rank 0's log of the same "
                "minute for its own failure, then stop every rank and start them together (deploy.yml does; "
                "status.yml prints the group's restart command); restarting one rank alone meets whatever rank 0 is "
                "running then." % (" (%s)" % parser.dist_init_addr if parser is not None and parser.dist_init_addr
                                   else ""))
    if kind == "nccl_error" and "gloo/transport/tcp" in msg and any(mk in msg for mk in _GLOO_PEER_LOST):
        peer = _RE_GLOO_PEER.search(msg)
        return ("Another rank of this server went away: Gloo's connection to %s closed. SGLang 0.5.9's scheduler "
                "sends every loop's requests to the other ranks over Gloo, so when one rank dies or is stopped the "
                "others stop at their next broadcast - this rank's failure is the echo, not the cause. Find that rank's "
                "own failure - earlier in this log for a rank of this node; on another node in its log (status.yml "
                "names every rank down, with its last launch's failure) - then restart the ranks together (deploy.yml; "
                "status.yml prints the command for a multi-node group)." % (
                    "the rank at %s" % peer.group(1) if peer else "a peer rank"))
    if kind == "nccl_error" and any(mk in msg for mk in _RENDEZVOUS_MARKERS):
        return ("The ranks never met at --dist-init-addr (torch's TCPStore on rank 0): a rank did not start, died "
                "before joining, cannot reach rank 0's address and port (firewall, route, wrong address), or the port "
                "is taken on rank 0 (also by a process of an earlier launch). Read the other ranks' logs for the "
                "first error, check a TCP connect from every rank to that port, and start all ranks together "
                "(deploy.yml does).")
    if kind == "nccl_error":
        return ("NCCL / torch.distributed failed. Check that every GPU of the TP group is visible in the container "
                "(nvidia-smi), try NCCL_P2P_DISABLE=1 or --disable-custom-all-reduce on PCIe-only cards, and "
                "NCCL_DEBUG=INFO for the cause. If another rank logged an error first, fix that one.")
    if kind == "model_not_found":
        code = _RE_HTTP_STATUS.search(msg)
        if code and code.group(1) in ("401", "403"):
            return ("The Hub refused the model (HTTP %s): the repo is gated or the token is missing/invalid. Accept "
                    "the licence on the Hub and provide the token to hf_model (never on the command line)."
                    % code.group(1))
        return ("The model path or repo id does not resolve. Point --model-path at the downloaded snapshot "
                "(hf_model role facts) or fix the repo id/revision.")
    if kind == "unsupported_model":
        return ("SGLang 0.5.9 has no implementation for this architecture. Check the architectures in config.json, "
                "upgrade SGLang, or pass --trust-remote-code if the model ships its own code.")
    if kind == "tp_mismatch":
        tp = facts.get("tp_size")
        return ("tp_size%s must divide the model's attention heads, KV heads (or be a multiple) and expert sizes. "
                "Choose a tp_size that divides them (see config.json)." % (" (%d)" % tp if tp else ""))
    if kind == "bad_argument":
        return "A server argument was rejected: %s Fix it in sglang_server_args." % msg
    mm = _RE_INPUT_TOO_LONG.search(msg)
    if kind == "warmup_failed" and not mm:
        return ("SGLang loaded the model and listened, then its own warm-up request failed, so it never became ready: "
                "read the message and the traceback tail. A warm-up that times out is a server too slow for its first "
                "request (a large prefill, CUDA graphs still compiling); --skip-server-warmup starts without it, and "
                "the first real request meets the same problem.")
    if mm:
        pool = facts.get("max_total_num_tokens")
        return ("A request of %s tokens%s is longer than this launch takes (%s tokens): SGLang 0.5.9 allows an input "
                "of at most the smaller of context_length and the KV pool (max_total_num_tokens%s) less a few reserved "
                "tokens. Raise --max-total-tokens (or leave it unset so the pool is sized from memory) or "
                "--context-length; a pool smaller than the warm-up request never becomes ready."
                % (mm.group(1), " (the server's own warm-up)" if failure.get("phase") == "warmup" else "",
                   mm.group(2), "=%d" % pool if pool is not None else ""))
    if "active drivers" in msg and "There should only be one" in msg:
        return ("Triton found no driver for this device: a Triton kernel ran where no GPU is (with --device cpu, "
                "--page-size above 1 allocates through one at the first request, the warm-up). Use --page-size 1 on "
                "the CPU engine, or run on a GPU.")
    if "unbalanced" in msg:
        return ("Free memory differs between the TP GPUs: another process holds memory on one of them. "
                "Free it (nvidia-smi) or restart the container.")
    if "scheduler is dead" in msg or "died during initialization" in msg:
        return ("A scheduler process died without a Python error; exit code -9 usually means the OS OOM killer "
                "(host RAM): check `dmesg -T | grep -i oom` and the container's memory limit.")
    if "out of memory" in msg:
        return ("The KV pool was exhausted at run time: lower --max-running-requests or --chunked-prefill-size, "
                "or give the pool more memory.")
    return "See the message and the traceback tail; the log does not say more than this."


def parse_log(text):
    """Parse a whole SGLang start-up log text and return the contract dict."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise TypeError("parse_log(text): text must be a str, not %s" % type(text).__name__)
    parser = LogParser()
    parser.feed_text(text)
    return parser.result()


_TS = re.compile(r"^\s*(?:\S.*?: )?\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def parse_log_since(text, since):
    """Parse only what was logged at or after ``since`` ("YYYY-MM-DD HH:MM:SS", SGLang's clock).

    Lines without a timestamp belong to the last timestamped line before them.  Returns the
    contract plus ``stale`` (true when nothing at all was logged since the marker)."""
    if not re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", since or ""):
        raise ValueError("since=%r: expected 'YYYY-MM-DD HH:MM:SS' (the clock SGLang logs with)" % (since,))
    parser = LogParser()
    taking = False
    for line in io.StringIO(text or "", newline=None):
        m = _TS.match(_strip(line))
        if m:
            taking = m.group(1) >= since
        if taking:
            parser.feed(line)
    res = parser.result()
    res["stale"] = parser.lines == 0
    return res


_MARKER = re.compile(r"^# gpuserve launch ([0-9a-f]+) at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def last_launch(path):
    """Where the last launch in a log file starts: {"offset", "id", "at", "by"} - after the last launch marker this
    collection writes (by="marker"), or at a later ``server_args=`` line when SGLang started again without one (a
    systemd restart after a crash: by="server_args"), else the start of the file (by="start"). Streams the file."""
    found = {"offset": 0, "id": None, "at": None, "by": "start"}
    starts = 0
    pos = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.startswith(b"# gpuserve launch "):
                m = _MARKER.match(raw.decode("utf-8", "replace"))
                if m:
                    found = {"offset": pos + len(raw), "id": m.group(1), "at": m.group(2), "by": "marker"}
                    starts = 0
            elif b"server_args=ServerArgs(" in raw:
                starts += 1
                if starts > 1:
                    found = dict(found, offset=pos, by="server_args")
            pos += len(raw)
    return found


def parse_file(path, offset=0, encoding="utf-8", until=None):
    """Stream a log file from byte ``offset`` (to byte ``until``: one launch of several); memory does not depend on
    the file's length."""
    parser = LogParser()
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        truncated = bool(offset) and size < offset
        fh.seek(0 if truncated else offset)
        pos = 0 if truncated else offset
        for raw in fh:
            if until is not None and not truncated and pos >= until:
                break
            pos += len(raw)
            parser.feed(raw.decode(encoding, "replace"))
    res = parser.result()
    res["stale"] = parser.lines == 0
    res["log_truncated"] = truncated
    res["end_offset"] = size
    return res
