"""Stand-in for ansible-test's pip bootstrap script (get-pip-<ver>.py).

ansible-test downloads that script from a host this CI cannot reach. This substitute does the same
job from what is reachable: ensurepip (bundled with CPython), then `pip install` of the packages
ansible-test asked for (e.g. pip==24.2) from PyPI. ansible-test runs pip with a trimmed environment,
so the machine's pip settings (CA bundle, indexes) are copied into the new venv's own pip.conf.
Installed to ~/.ansible/test/cache/ by tests/ci/bootstrap.sh.
"""
import ensurepip
import os
import subprocess
import sys

conf = []
for src in ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", os.path.expanduser("~/.config/pip/pip.conf"),
            os.path.expanduser("~/.pip/pip.conf")):
    if os.path.isfile(src):
        with open(src) as fh:
            conf.append(fh.read())
if conf:
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as fh:
        # merge [global] sections: later keys win, as pip does
        fh.write("[global]\n")
        for text in conf:
            for line in text.splitlines():
                if line.strip() and not line.strip().startswith("["):
                    fh.write(line + "\n")
ensurepip.bootstrap()
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
env = dict(os.environ)
env.pop("PIP_CONFIG_FILE", None)
env.pop("PIP_ISOLATED_MODE", None)
extra = []
for bundle in ("/etc/ssl/certs/ca-certificates.crt",):
    if os.path.isfile(bundle):
        env["PIP_CERT"] = bundle
        extra = ["--cert", bundle]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "-q"] + extra + args, env=env))
