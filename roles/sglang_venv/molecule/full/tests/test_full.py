"""The full profile: every pin of the 0.5.9 lock is installed at its version (uv pip check is clean), and the
build holds the CUDA libraries (gigabytes, not the light profile's megabytes)."""
testinfra_hosts = ["ansible://ct100"]

UV = "cd / && runuser -u sglang -- /opt/sglang/tools/uv/bin/uv"  # cd /: uv reads uv.toml from the working directory


def test_every_pin_of_the_lock_is_installed_and_consistent(host):
    out = host.run(UV + " pip check --python /opt/sglang/venv/bin/python")
    assert out.rc == 0, out.stdout + out.stderr
    frozen = host.run(UV + " pip freeze --python /opt/sglang/venv/bin/python")
    pins = dict(line.split("==", 1) for line in frozen.stdout.splitlines() if "==" in line)
    assert pins["torch"] == "2.9.1" and pins["sgl-kernel"] == "0.3.21" and pins["flashinfer-python"] == "0.6.3"
    assert pins["nvidia-cublas-cu12"] and pins["sglang"] == "0.5.9"


def test_the_build_holds_the_cuda_set(host):
    mib = int(host.check_output("du -sm /opt/sglang/venv/").split()[0])
    assert mib > 5000, "%d MiB: the CUDA libraries are missing" % mib
