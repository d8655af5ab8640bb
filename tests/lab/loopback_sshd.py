"""A real OpenSSH server on loopback for tests that cross a host boundary with ssh (hf_snapshot's source_host):
its own host key, one authorized client key, its log in a file. Logins go to a system account of its own with a
real shell (root's may be nologin, as on the CI machines). Needs openssh-server and rsync (tests/ci/bootstrap.sh
installs them) and root (sshd's privilege separation, useradd)."""
import os
import subprocess
import time

from local_hub import free_port

SSHD = "/usr/sbin/sshd"
USER = "gpuserve-rsync"


def ensure_user(name=USER):
    """A system account that can log in with a key only: a shell, and '*' (no password, not locked: with UsePAM
    no, sshd refuses an account whose password field starts with '!')."""
    if subprocess.run(["getent", "passwd", name], capture_output=True, check=False).returncode != 0:
        subprocess.run(["useradd", "--system", "--shell", "/bin/sh", "--no-create-home", "--home-dir", "/nonexistent",
                        name], check=True)
    subprocess.run(["usermod", "--password", "*", "--shell", "/bin/sh", name], check=True)
    return name


class LoopbackSshd(object):
    """workdir must be readable by the account (sshd reads authorized_keys as the user): not pytest's tmp tree."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        self.port = free_port()
        self.key = os.path.join(self.workdir, "client_key")
        self.host_key = os.path.join(self.workdir, "host_key")
        self.known_hosts = os.path.join(self.workdir, "known_hosts")
        self.log = os.path.join(self.workdir, "sshd.log")
        self.proc = None
        self.user = USER

    def start(self):
        ensure_user(self.user)
        for path in (self.key, self.host_key):
            if not os.path.exists(path):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
        with open(self.key + ".pub") as f, open(os.path.join(self.workdir, "authorized_keys"), "w") as out:
            out.write(f.read())
        with open(self.host_key + ".pub") as f, open(self.known_hosts, "w") as out:
            out.write("[127.0.0.1]:%d %s" % (self.port, f.read()))
        conf = os.path.join(self.workdir, "sshd_config")
        with open(conf, "w") as f:
            f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n"
                    "PidFile %s\nLogLevel VERBOSE\n"
                    % (self.port, self.host_key, os.path.join(self.workdir, "authorized_keys"),
                       os.path.join(self.workdir, "sshd.pid")))
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
        self.logf = open(self.log, "w")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", conf], stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while "Server listening" not in open(self.log).read():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("sshd did not start: %s" % open(self.log).read()[-2000:])
            time.sleep(0.1)
        return self

    def logins(self):
        return open(self.log).read().count("Accepted publickey")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if getattr(self, "logf", None):
            self.logf.close()
