"""Run where the router is (lab): poll its /workers every 0.2 s until <worker> is unhealthy (or absent) - or,
with --healthy, healthy again - and print the seconds since <since> (epoch seconds) as JSON; exit 1 after
<timeout> s. The router's key is read from its key file.

    python3 router_watch.py <router url> <key file> <worker url> <since> <timeout> [--healthy]
"""
import json
import sys
import time
import urllib.request

router, key_file, worker, since, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
want_healthy = "--healthy" in sys.argv
with open(key_file) as fh:
    key = fh.read().strip()
deadline = time.time() + timeout
while time.time() < deadline:
    req = urllib.request.Request(router.rstrip("/") + "/workers", headers={"Authorization": "Bearer " + key})
    try:
        workers = json.loads(urllib.request.urlopen(req, timeout=5).read().decode())["workers"]
    except OSError:
        workers = None
    if workers is not None:
        healthy = any(w["url"] == worker and w["is_healthy"] for w in workers)
        if healthy == want_healthy:
            print(json.dumps({"after_s": round(time.time() - since, 2), "healthy": healthy}))
            sys.exit(0)
    time.sleep(0.2)
print(json.dumps({"after_s": None, "healthy": not want_healthy}))
sys.exit(1)
