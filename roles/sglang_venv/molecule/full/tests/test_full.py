"""The full profile: every pin of the 0.5.9 lock is installed at its version (uv pip check is clean)."""
testinfra_hosts = ["ansible://ct100"]


def test_every_pin_of_the_lock_is_installed_and_consistent(host):
    out = host.run("runuser -u sglang -- /opt/sglang/tools/uv/bin/uv pip check --python /opt/sglang/venv/bin/python")
    assert out.rc == 0, out.stdout + out.stderr
    frozen = host.run("runuser -u sglang -- /opt/sglang/tools/uv/bin/uv pip freeze --python /opt/sglang/venv/bin/python")
    pins = dict(line.split("==", 1) for line in frozen.stdout.splitlines() if "==" in line)
    assert pins["torch"] == "2.9.1" and pins["sgl-kernel"] == "0.3.21" and pins["flashinfer-python"] == "0.6.3"
