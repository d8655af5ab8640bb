"""Run inside a replica's container (lab): read the replica's in-flight requests from its /get_load (the key from
its --config file, never an argument), then SIGKILL the unit's main process, and print
{"in_flight": n, "killed_at": epoch seconds, "pid": pid} as JSON. The containers share the host's clock, so
another container can time what follows from killed_at.

    python3 kill_replica.py <unit> <url> <config.yaml>
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

unit, url, config = sys.argv[1:4]
with open(config) as fh:
    # the value is a JSON string (module_utils/server/argv.py config_text), which YAML reads as the same text
    key = next(json.loads(line.split(":", 1)[1]) for line in fh if line.startswith("api-key:"))
req = urllib.request.Request(url.rstrip("/") + "/get_load", headers={"Authorization": "Bearer " + key})
in_flight = sum(x["num_reqs"] for x in json.loads(urllib.request.urlopen(req, timeout=5).read().decode()))
pid = int(subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True, text=True,
                         check=True).stdout.strip())
killed_at = time.time()
os.kill(pid, signal.SIGKILL)
print(json.dumps({"in_flight": in_flight, "killed_at": killed_at, "pid": pid}))
