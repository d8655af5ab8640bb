"""deploy.yml on the lab: GPU 0 reaches CT 100 (ENXIO, not EPERM) and SGLang (stand-in) answers there."""
testinfra_hosts = ["ansible://pvehost"]


def ct(host, *argv):
    return host.check_output("pct exec 100 --" + " %s" * len(argv), *argv)


def test_gpu0_passthrough_is_in_the_config_and_opens_inside(host):
    conf = host.file("/etc/pve/lxc/100.conf").content_string
    assert "dev0: /dev/nvidia0,mode=0666" in conf and "/dev/nvidia1" not in conf
    out = ct(host, "python3", "-c",
             "import errno, os\ntry:\n    os.open('/dev/nvidia0', os.O_RDWR)\nexcept OSError as e:\n    print(errno.errorcode[e.errno])")
    assert out == "ENXIO"


def test_sglang_unit_is_active_and_healthy(host):
    assert ct(host, "systemctl", "is-active", "sglang-llama.service") == "active"
    probe = ("import json, urllib.request\n"
             "r = urllib.request.urlopen('http://127.0.0.1:30000/health_generate', timeout=10)\n"
             "print(r.status)\n")
    assert ct(host, "python3", "-c", probe) == "200"
