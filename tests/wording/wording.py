"""The wording of every start-up line the log parser reads, per SGLang release, read from each release's source.

    python3 tests/wording/wording.py extract [--cache DIR]   # download the releases, print the table (JSON)
    python3 tests/wording/wording.py check [--cache DIR]     # re-extract and diff against the committed table
    python3 tests/wording/wording.py write [--cache DIR]     # re-extract and write table.json

Not part of every CI run (it downloads nine wheels): `check` is run on demand, and whenever a release is added.
The committed table (table.json) is what tests/unit/test_wording.py turns into fixtures: one log line per
release and wording, every placeholder filled, each read by parse_log.

How a wording is found: every string literal and f-string in sglang/srt/**/*.py (by ast: implicit concatenation
already joined), kept when it contains one of the anchors of a line kind below. An f-string's expressions are
written as {expr} (their source), so the table shows exactly which value stands where.
"""
import argparse
import ast
import json
import os
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(HERE, "table.json")
# 0.3.6 for the older wordings (the "Unsupported architectures ... Supported list" error); 0.5.0 was never
# published (the 0.5 line starts at 0.5.1); 0.5.23 is the newest the index serves today
RELEASES = ("0.3.6", "0.4.0", "0.4.3", "0.4.6", "0.4.9", "0.5.1", "0.5.3", "0.5.6", "0.5.9", "0.5.23")

# line kind -> anchors (all must be in the literal; a list of tuples: any of them); the parser reads each kind
KINDS = {
    "load_weight_begin": ("Load weight begin",),
    "load_weight_end": ("Load weight end",),
    "kv_pool": ("KV Cache is allocated",),
    "mamba_pool": ("Mamba Cache is allocated",),
    "scheduler_summary": ("max_total_num_tokens=", "max_running_requests="),
    "profiled_budget": ("is larger than the profiled value",),
    "kv_pool_oom": [("Not enough memory",), ("leave no GPU memory for the KV cache",),
                    ("state cache is too small to serve",), ("Not enough GPU memory for hybrid",)],
    "unsupported_arch": [("not supported",), ("Unsupported architectures",)],
    "tp_not_divisible": ("is not divisible by",),
    "cuda_graph_begin": ("Capture", "cuda graph begin"),
    "cuda_graph_end": ("Capture", "cuda graph end"),
    "ready": ("fired up and ready to roll",),
}
# anchors that pull in unrelated literals: the kind also needs one of these (the TP/attention-TP divisibility
# asserts, not quantization block sizes; the unsupported-architecture error, not feature refusals)
REQUIRE_ONE = {"unsupported_arch": ("Model architectures", "has no SGlang implementation", "Supported list"),
               "tp_not_divisible": ("{} is not divisible by {}", "by TP=", "attn_tp_size=", "attention TP size")}
EXCLUDE = {"scheduler_summary": ("MLX stub",)}


def _render(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(v.value)
            else:
                expr = ast.unparse(v.value)
                spec = _render(v.format_spec) if v.format_spec is not None else ""
                out.append("{%s%s}" % (expr, (":" + spec) if spec else ""))
        return "".join(out)
    return None


def _anchor_sets(anchors):
    return anchors if isinstance(anchors, list) else [anchors]


def _raised(tree):
    """id(literal node) -> the exception it is raised with (raise X(...) around it, or an assert's message)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = ast.unparse(node.exc.func).rsplit(".", 1)[-1]
            for sub in ast.walk(node.exc):
                out.setdefault(id(sub), name)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            for sub in ast.walk(node.msg):
                out.setdefault(id(sub), "AssertionError")
    return out


def extract_wheel(path):
    """{kind: sorted list of [wording, exception it is raised with or None]} of one wheel."""
    found = dict((k, set()) for k in KINDS)
    # a literal of its own, not the constant pieces of an f-string (those are read as part of the f-string)
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not (name.startswith("sglang/srt/") and name.endswith(".py")):
                continue
            try:
                tree = ast.parse(z.read(name).decode("utf-8", "replace"))
            except SyntaxError:
                continue
            raised = _raised(tree)
            inside = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.JoinedStr):
                    inside.update(id(v) for v in node.values)
            for node in ast.walk(tree):
                if id(node) in inside:
                    continue
                if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    text = _render(node)
                    if not text:
                        continue
                    for kind, anchors in KINDS.items():
                        if any(all(a in text for a in one) for one in _anchor_sets(anchors)) and (
                                kind not in REQUIRE_ONE or any(w in text for w in REQUIRE_ONE[kind])) and not any(
                                    w in text for w in EXCLUDE.get(kind, ())):
                            found[kind].add((" ".join(text.split()), raised.get(id(node))))
    return dict((k, sorted([list(x) for x in v], key=lambda x: (x[0], x[1] or ""))) for k, v in found.items())


def wheel(cache, version):
    for name in os.listdir(cache) if os.path.isdir(cache) else ():
        if name.startswith("sglang-%s-" % version) and name.endswith(".whl"):
            return os.path.join(cache, name)
    os.makedirs(cache, exist_ok=True)
    subprocess.run([os.path.join(ROOT, ".venv", "bin", "pip"), "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "sglang==%s" % version, "-d", cache], check=True)
    return wheel(cache, version)


def extract(cache):
    """{kind: {version: [wordings]}}"""
    table = dict((k, {}) for k in KINDS)
    for v in RELEASES:
        for kind, words in extract_wheel(wheel(cache, v)).items():
            table[kind][v] = words
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["extract", "check", "write"])
    ap.add_argument("--cache", default=os.path.join(ROOT, "build", "wording"))
    a = ap.parse_args()
    table = extract(a.cache)
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if a.action == "extract":
        sys.stdout.write(text)
        return 0
    if a.action == "write":
        with open(TABLE, "w") as f:
            f.write(text)
        print("wrote %s" % TABLE)
        return 0
    with open(TABLE) as f:
        committed = json.load(f)
    if committed == table:
        print("wording table: %d kinds x %d releases, as in the wheels" % (len(table), len(RELEASES)))
        return 0
    for kind in sorted(set(table) | set(committed)):
        for v in RELEASES:
            a_, b_ = committed.get(kind, {}).get(v), table.get(kind, {}).get(v)
            if a_ != b_:
                print("DIFFERS %s %s: committed %r, wheel %r" % (kind, v, a_, b_))
    return 1


if __name__ == "__main__":
    sys.exit(main())
