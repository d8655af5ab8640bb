"""Run inside a container: open each path read-write and print {path: "open" | errno name} as JSON.

The lab's GPU nodes have no driver behind them: ENXIO means the device cgroup allowed the open (the
passthrough works), EPERM that it denied it, ENOENT that the node is not in the container.
"""
import errno
import json
import os
import sys

out = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        out[path] = "open"
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
print(json.dumps(out))
