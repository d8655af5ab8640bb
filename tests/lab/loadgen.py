"""A bounded load generator for the lab (stdlib only): N POST /generate requests spread evenly over T seconds by a
few threads against one endpoint, then it stops by itself and prints one JSON report.

    python3 loadgen.py --url http://127.0.0.1:30080 --key-file F --requests 400 --seconds 40 [--threads 4]
                       [--out report.json]

Only loopback and private (lab) addresses are accepted, so it can never be pointed at anything else. Each request
has a distinct prompt (so cache-aware routing spreads them) and a 30 s timeout. The report: requests sent, ok,
failed (with the first errors), latency p50/p99/max in ms, and the wall time. The key is read from a file, never
an argument.
"""
import argparse
import ipaddress
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit


def allowed(url):
    host = urlsplit(url).hostname or ""
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback or ipaddress.ip_address(a).is_private for a in addrs)


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--key-file")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out")
    a = ap.parse_args()
    if not allowed(a.url):
        raise SystemExit("loadgen: %s is not a loopback or private address; refusing" % a.url)
    if not 0 < a.requests <= 100000 or not 0 < a.seconds <= 3600:
        raise SystemExit("loadgen: --requests 1..100000 and --seconds up to 3600")
    key = None
    if a.key_file:
        with open(a.key_file) as fh:
            key = fh.read().strip()
    url = a.url.rstrip("/") + "/generate"
    lock = threading.Lock()
    lat, errors, counts = [], [], {"ok": 0, "failed": 0}
    t0 = time.time()
    interval = a.seconds / a.requests

    def one(i):
        body = json.dumps({"text": "request %d at %.3f: tell me something" % (i, time.time()),
                           "sampling_params": {"max_new_tokens": 4}}).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        start = time.time()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers, method="POST"),
                                        timeout=30) as r:
                ok = r.status == 200 and "meta_info" in json.loads(r.read().decode())
                err = None if ok else "HTTP %s" % r.status
        except urllib.error.HTTPError as e:
            ok, err = False, "HTTP %s" % e.code
        except (OSError, ValueError) as e:
            ok, err = False, "%s: %s" % (type(e).__name__, e)
        with lock:
            if ok:
                counts["ok"] += 1
                lat.append((time.time() - start) * 1000.0)
            else:
                counts["failed"] += 1
                if len(errors) < 10:
                    errors.append({"request": i, "at_s": round(start - t0, 2), "error": err})

    def worker(k):
        for i in range(k, a.requests, a.threads):
            delay = t0 + i * interval - time.time()
            if delay > 0:
                time.sleep(delay)
            one(i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(max(1, a.threads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = {"url": url, "requests": a.requests, "ok": counts["ok"], "failed": counts["failed"], "errors": errors,
              "p50_ms": round(percentile(lat, 50) or 0, 1), "p99_ms": round(percentile(lat, 99) or 0, 1),
              "max_ms": round(max(lat) if lat else 0, 1), "seconds": round(time.time() - t0, 2)}
    text = json.dumps(report, sort_keys=True)
    if a.out:
        with open(a.out + ".tmp", "w") as fh:
            fh.write(text + "\n")
        os.rename(a.out + ".tmp", a.out)
    print(text)


if __name__ == "__main__":
    main()
