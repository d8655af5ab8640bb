"""A local Hugging Face Hub for tests: olah (PyPI) serving model repos the tests create, on loopback, behind a
small front that logs every request, honours Range (olah answers 200 with the whole body), can throttle
downloads (so a test can kill one mid-file) and can demand a token (olah offline serves everything).

    hub = LocalHub(workdir, olah_cli)           # olah_cli: .venv-hub/bin/olah-cli (tests/ci/bootstrap.sh)
    sha = hub.add_repo("tiny-org/tiny-model", {"config.json": b"...", "model.safetensors": b"..."}, lfs=["*.safetensors"])
    hub.start(); ...; hub.stop()
"""
import fnmatch
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import http.client
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_llama  # noqa: E402  pylint: disable=wrong-import-position

REAL_REPO = "gpuserve-lab/tiny-llama"


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A loopback port free now, below the kernel's ephemeral range: a port bind(0) hands out is an ephemeral one,
    which an outgoing connection (a rank reaching its store, any client) may take as its source port before the
    server binds it - a test once failed with rank 0's own HTTP port "already taken" that way."""
    import random  # pylint: disable=import-outside-toplevel
    top = min(_ephemeral_low(), 65536) - 1
    for dummy in range(200):
        port = random.randint(max(1024, top - 12000), top)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()                         # every try taken: the kernel's own choice
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def git(cwd, *args):
    """git with a fixed identity and date: the same files give the same commit sha on every machine, so the lab
    inventory can pin the revision (tests/unit/test_lab_inventory.py checks it)."""
    env = dict(os.environ, GIT_AUTHOR_DATE="2026-01-01T00:00:00+0000", GIT_COMMITTER_DATE="2026-01-01T00:00:00+0000")
    subprocess.run(["git", "-c", "user.email=lab@gpuserve.invalid", "-c", "user.name=lab", "-c", "commit.gpgsign=false"]
                   + list(args), cwd=cwd, check=True, capture_output=True, env=env)


class LocalHub(object):
    def __init__(self, workdir, olah_cli, bind="127.0.0.1", port=None):
        self.workdir = str(workdir)
        self.olah_cli = os.path.abspath(olah_cli)
        self.mirrors = os.path.join(self.workdir, "mirrors")
        self.olah_port = free_port()
        self.bind = bind
        self.port = port or free_port()
        self.requests = []          # (method, path, range header, authorization present)
        self.throttle_bps = 0       # bytes per second for file bodies (0: as fast as possible)
        self.required_token = None  # when set, every request needs "Authorization: Bearer <it>"
        self.gated = set()          # repo ids answering 403 even with the token
        self.denied_files = set()   # file names whose downloads answer 403 (the file list still answers)
        self.drop_file = {}         # file name -> how many more GETs of it break mid-body (a connection reset)
        self.proc = None
        self.server = None

    @property
    def endpoint(self):
        return "http://%s:%d" % (self.bind, self.port)

    def add_repo(self, repo_id, files, lfs=("*.safetensors",)):
        """A git repo with these files; LFS ones as pointer + object (the layout git-lfs writes). Returns the commit."""
        d = os.path.join(self.mirrors, "models", repo_id)
        os.makedirs(d, exist_ok=True)
        if not os.path.isdir(os.path.join(d, ".git")):
            git(d, "init", "-q", "-b", "main")
        attrs = "".join("%s filter=lfs diff=lfs merge=lfs -text\n" % p for p in lfs)
        with open(os.path.join(d, ".gitattributes"), "w") as f:
            f.write(attrs)
        for name, data in files.items():
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if any(fnmatch.fnmatch(name, p) for p in lfs):
                oid = hashlib.sha256(data).hexdigest()
                obj = os.path.join(d, ".git", "lfs", "objects", oid[:2], oid[2:4])
                os.makedirs(obj, exist_ok=True)
                with open(os.path.join(obj, oid), "wb") as f:
                    f.write(data)
                data = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (oid, len(data))).encode()
            with open(path, "wb") as f:
                f.write(data)
        git(d, "add", "-A")
        git(d, "commit", "-q", "-m", "files")
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=d, check=True, capture_output=True, text=True).stdout.strip()

    def start(self):
        cache = os.path.join(self.workdir, "olah-cache")
        os.makedirs(cache, exist_ok=True)
        conf = os.path.join(self.workdir, "olah.toml")
        with open(conf, "w") as f:
            f.write('[basic]\nhost = "127.0.0.1"\nport = %d\nrepos-path = "%s"\nmirror-netloc = "127.0.0.1:%d"\n'
                    'mirror-lfs-netloc = "127.0.0.1:%d"\nmirrors-path = ["%s"]\n[accessibility]\noffline = true\n'
                    % (self.olah_port, cache, self.olah_port, self.olah_port, self.mirrors))
        self.log = open(os.path.join(self.workdir, "olah.log"), "w")
        self.proc = subprocess.Popen([self.olah_cli, "-c", conf], cwd=self.workdir, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/api/models/none/none/revision/main" % self.olah_port, timeout=2)
            except urllib.error.HTTPError:
                break  # it answers
            except (urllib.error.URLError, OSError):
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("olah did not start; see %s/olah.log" % self.workdir)
                time.sleep(0.3)
        self.server = ThreadingHTTPServer((self.bind, self.port), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if getattr(self, "log", None):
            self.log.close()

    def reset(self):
        """Back to an open, fast hub with an empty request log (between tests)."""
        self.requests[:] = []
        self.throttle_bps = 0
        self.required_token = None
        self.gated.clear()
        self.denied_files.clear()
        self.drop_file.clear()

    def file_requests(self, name):
        return [r for r in self.requests if "/resolve/" in r[1] and r[1].endswith("/" + name)]

    def _handler(self):
        hub = self

        class Front(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def _refused(self, method):
                auth = self.headers.get("Authorization")
                hub.requests.append((method, self.path, self.headers.get("Range"), auth is not None))
                if hub.required_token and auth != "Bearer " + hub.required_token:
                    self._send(401, b'{"error":"Invalid credentials in Authorization header"}', head=method == "HEAD")
                    return True
                if any(("/%s/" % g) in self.path for g in hub.gated) or (
                        "/resolve/" in self.path and self.path.rsplit("/", 1)[1] in hub.denied_files):
                    self._send(403, b'{"error":"Access to model is restricted"}', head=method == "HEAD")
                    return True
                return False

            def do_HEAD(self):
                """huggingface_hub asks HEAD /<repo>/resolve/<rev>/<file> for the commit, etag and size first: olah's
                answer, its redirects pointed back at this front."""
                if self._refused("HEAD"):
                    return
                conn = http.client.HTTPConnection("127.0.0.1", hub.olah_port, timeout=60)
                conn.request("HEAD", self.path, headers={"Accept-Encoding": "identity"})
                up = conn.getresponse()
                up.read()
                conn.close()
                self.send_response(404 if up.status == 401 else up.status)
                for k, v in up.getheaders():
                    if k.lower() in ("transfer-encoding", "connection", "date", "server", "content-encoding"):
                        continue
                    if k.lower() == "location":
                        v = v.replace("http://127.0.0.1:%d" % hub.olah_port, hub.endpoint)
                    self.send_header(k, v)
                self.end_headers()

            def do_GET(self):
                if self._refused("GET"):
                    return
                try:
                    up = urllib.request.urlopen("http://127.0.0.1:%d%s" % (hub.olah_port, self.path), timeout=60)
                    status, body, ctype = up.status, up.read(), up.headers.get("Content-Type", "application/octet-stream")
                except urllib.error.HTTPError as e:
                    status, body, ctype = e.code, e.read(), "application/json"
                if status == 401 and b"not found" in body.lower():
                    status = 404  # olah says 401 for a missing repo or revision; the Hub says 404 for a missing revision
                rng = self.headers.get("Range")
                if status == 200 and rng and "/resolve/" in self.path and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                    if start >= len(body):
                        return self._send(416, b"")
                    total = len(body)
                    body = body[start:]
                    return self._send(206, body, ctype, {"Content-Range": "bytes %d-%d/%d" % (start, total - 1, total)})
                return self._send(status, body, ctype)

            def _send(self, status, body, ctype="application/json", extra=None, head=False):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if head:
                    return
                step = 64 * 1024
                name = self.path.rsplit("/", 1)[-1] if "/resolve/" in self.path else None
                if name and hub.drop_file.get(name, 0) > 0 and len(body) > step:
                    hub.drop_file[name] -= 1
                    self.wfile.write(body[:step])      # a link that breaks mid-file: some bytes, then a reset
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                try:
                    for i in range(0, len(body), step):
                        self.wfile.write(body[i:i + step])
                        if hub.throttle_bps and "/resolve/" in self.path:
                            time.sleep(step / float(hub.throttle_bps))
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Front


def lab_model_files(root):
    """The lab's model repo: the Llama 3.1 8B config the stand-in and the planner read, tokenizer files, 2 x 2 MiB
    of weights, and the stand-in's scenario (ready)."""
    files = tiny_model_files(weights_mib=2, seed=b"lab")
    with open(os.path.join(root, "tests", "fixtures", "model_configs", "llama-3.1-8b.json"), "rb") as f:
        files["config.json"] = f.read()
    files["standin_scenario"] = b"ready_tp1_dense\n"
    return files


def serve(argv=None):
    """Run a LocalHub until killed, with the lab's model repo; its endpoint and commit go to <workdir>/hub.json."""
    import argparse
    import signal
    ap = argparse.ArgumentParser(description="the lab's local Hugging Face Hub (olah + front)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--olah", required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--repo", default="gpuserve-lab/Llama-3.1-8B-Instruct")
    ap.add_argument("--real-repo", default=REAL_REPO, help="the real tiny model (tests/lab/tiny_llama.py) the real "
                    "SGLang 0.5.9 serves in the lab's CPU-engine profile")
    a = ap.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(a.workdir, exist_ok=True)
    hub = LocalHub(a.workdir, a.olah, bind=a.bind, port=a.port)
    sha = hub.add_repo(a.repo, lab_model_files(root))
    real_sha = hub.add_repo(a.real_repo, tiny_llama.files())
    hub.start()
    with open(os.path.join(a.workdir, "hub.json"), "w") as f:
        json.dump({"endpoint": hub.endpoint, "repo_id": a.repo, "revision": sha, "pid": os.getpid(),
                   "real_repo_id": a.real_repo, "real_revision": real_sha}, f)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *x: stop.set())
    signal.signal(signal.SIGINT, lambda *x: stop.set())
    stop.wait()
    hub.stop()


def safetensors_bytes(tensor, payload):
    """A valid safetensors file holding one BF16 tensor with these bytes (the planner reads the header)."""
    header = json.dumps({tensor: {"dtype": "BF16", "shape": [len(payload) // 2], "data_offsets": [0, len(payload)]}})
    header += " " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header.encode() + payload


def tiny_model_files(weights_mib=3, seed=b"gpuserve"):
    """config.json, tokenizer files and deterministic safetensors-named weights (a few MiB)."""
    block = hashlib.sha256(seed).digest() * 32768  # 1 MiB
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16",
              "max_position_embeddings": 4096}
    return {
        "config.json": json.dumps(config, indent=1).encode(),
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}',
        "tokenizer_config.json": b'{"model_max_length": 4096}',
        "model-00001-of-00002.safetensors": safetensors_bytes("model.layers.0.weight", block * weights_mib),
        "model-00002-of-00002.safetensors": safetensors_bytes("model.layers.1.weight", bytes(reversed(block)) * weights_mib),
        "model.safetensors.index.json": b'{"weight_map": {}}',
    }


if __name__ == "__main__":
    serve(sys.argv[2:] if sys.argv[1:2] == ["serve"] else sys.argv[1:])
