"""#48 item 1 (part): the plan next to reality and the node's GPUs as Prometheus text files (exposition format 0.0.4)
the node exporter's textfile collector serves. Checked here against the format's grammar (each family a HELP, a TYPE,
then samples whose name matches the metric-name pattern and whose label values are escaped), and against the numbers
of the record and of recorded nvidia-smi outputs."""
import os
import re
import stat

from unit_helpers import fixture_text, load_module_util

SERVER = load_module_util("server")
HOST = load_module_util("host")
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
VALUE = r'"((?:[^"\\\n]|\\\\|\\"|\\n)*)"'
SAMPLE = re.compile(r'^(%s)\{((?:[a-zA-Z_][a-zA-Z0-9_]*=%s,?)*)\} (-?[0-9]+(?:\.[0-9]+(?:e[+-]?[0-9]+)?)?)$' % (NAME, VALUE))
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)=%s,?' % VALUE)
RECORD = {"predicted_max_total_num_tokens": 8192, "actual_max_total_num_tokens": 8000, "ratio": 0.9766,
          "tolerance": 0.1, "within_tolerance": True}


def parse(text):
    """{name: (help, type, {server: value})} - raising on anything the exposition format does not allow."""
    assert text.endswith("\n")
    families, current = {}, None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, help_text = line[7:].split(" ", 1)
            assert re.match("^%s$" % NAME, name) and name not in families, line
            families[name] = [help_text, None, {}]
            current = name
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert name == current and kind == "gauge" and families[name][1] is None, line
            families[name][1] = kind
        else:
            m = SAMPLE.match(line)
            assert m and m.group(1) == current and families[current][1] == "gauge", line
            labels = tuple((k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                           for k, v in LABEL.findall(m.group(2)))
            key = labels[0][1] if len(labels) == 1 and labels[0][0] == "server" else labels
            families[current][2][key] = float(m.group(len(m.groups())))
    return families


def test_the_plan_and_sglangs_tokens_are_one_gauge_each_with_the_servers_name():
    fam = parse(SERVER.plan_metrics("qwen", RECORD, 0.85, now=1764757200))
    assert {n: v[2]["qwen"] for n, v in fam.items()} == {
        "gpuserve_sglang_planned_max_total_num_tokens": 8192, "gpuserve_sglang_max_total_num_tokens": 8000,
        "gpuserve_sglang_plan_ratio": 0.9766, "gpuserve_sglang_plan_tolerance": 0.1,
        "gpuserve_sglang_plan_within_tolerance": 1, "gpuserve_sglang_mem_fraction_static": 0.85,
        "gpuserve_sglang_plan_written_timestamp_seconds": 1764757200}
    assert [n for n, _h, _k in SERVER.PLAN_METRICS] == list(fam)      # documented order, every family


def test_without_a_plan_only_what_is_known_is_said_and_a_hostile_name_is_escaped():
    name = 'a "b" \\ c\nd'
    fam = parse(SERVER.plan_metrics(name, None, None, now=5))
    assert list(fam) == ["gpuserve_sglang_plan_written_timestamp_seconds"]
    assert fam["gpuserve_sglang_plan_written_timestamp_seconds"][2] == {name: 5}
    out_of_tolerance = parse(SERVER.plan_metrics("x", dict(RECORD, within_tolerance=False), 0.5, now=5))
    assert out_of_tolerance["gpuserve_sglang_plan_within_tolerance"][2] == {"x": 0}


def test_the_file_is_replaced_atomically_readable_by_the_exporter_and_never_through_a_link(tmp_path):
    path = tmp_path / "gpuserve_sglang_qwen.prom"
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    os.symlink(str(target), str(path))                  # a link planted where the file goes is replaced, not followed
    SERVER.write_plan_metrics(str(path), "qwen", RECORD, 0.85)
    assert not os.path.islink(str(path)) and target.read_text() == "untouched\n"
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644
    assert parse(path.read_text())["gpuserve_sglang_planned_max_total_num_tokens"][2] == {"qwen": 8192}
    assert sorted(os.listdir(str(tmp_path))) == ["elsewhere", "gpuserve_sglang_qwen.prom"]   # no temporary left
    assert HOST.label_value('x"\\\n') == 'x\\"\\\\\\n'


NV = load_module_util("host.nvidia")
GPUS = load_module_util("host.gpus")


def _nvidia(name):
    return fixture_text("nvidia", name)


def test_two_a6000_give_the_state_the_gpus_and_their_memory_in_bytes():
    facts = NV.gpu_facts(_nvidia("a6000x2.smi.csv"), "", 0, proc_version=_nvidia("a6000x2.proc-version"))
    fam = parse(GPUS.gpu_metrics("pve1", facts))
    states = {dict(k)["state"]: v for k, v in fam["gpuserve_nvidia_state"][2].items()}
    assert states["ok"] == 1 and sum(states.values()) == 1 and set(states) == set(NV.STATES)
    assert fam["gpuserve_nvidia_gpus"][2] == {(("node", "pve1"),): 2}
    totals = {dict(k)["gpu"]: v for k, v in fam["gpuserve_nvidia_gpu_memory_total_bytes"][2].items()}
    assert totals == {str(g["index"]): g["memory_total_mib"] * 1048576 for g in facts["gpus"]}
    assert fam["gpuserve_nvidia_gpus_lost"][2] == {(("node", "pve1"),): 0}
    assert "gpuserve_nvidia_gpu_lost" not in fam
    assert fam["gpuserve_nvidia_driver_mismatch"][2] == {(("node", "pve1"),): 0}


def test_a_lost_gpu_and_a_driver_mismatch_are_samples_an_alert_can_fire_on():
    info = ["Model: \t\t NVIDIA RTX A6000\nGPU UUID: \t GPU-a\nBus Location: \t 0000:41:00.0\nDevice Minor: \t 0\n",
            "Model: \t\t NVIDIA RTX A6000\nGPU UUID: \t GPU-b\nBus Location: \t 0000:c1:00.0\nDevice Minor: \t 1\n"]
    lost = parse(GPUS.gpu_metrics("pve1", NV.gpu_facts(_nvidia("gpu-lost.smi.out"), "", 15, gpu_information=info)))
    assert lost["gpuserve_nvidia_gpus_lost"][2] == {(("node", "pve1"),): 1}
    assert list(lost["gpuserve_nvidia_gpu_lost"][2]) == [(("node", "pve1"), ("pci_bus_id", "0000:c1:00.0"))]
    assert {dict(k)["state"]: v for k, v in lost["gpuserve_nvidia_state"][2].items()}["gpu_lost"] == 1
    mismatch = parse(GPUS.gpu_metrics("pve1", NV.gpu_facts(_nvidia("mismatch.smi.out"), "", 18,
                                                           proc_version=_nvidia("h200x1.proc-version"))))
    assert mismatch["gpuserve_nvidia_driver_mismatch"][2] == {(("node", "pve1"),): 1}
    none = parse(GPUS.gpu_metrics("pve1", NV.gpu_facts("", "", None)))     # no driver: no GPU, no mismatch sample
    assert none["gpuserve_nvidia_gpus"][2] == {(("node", "pve1"),): 0} and "gpuserve_nvidia_driver_mismatch" not in none


def _rec(name, **kw):
    r = {"name": name, "node": "pve1", "group": None, "rank": None, "url": "http://127.0.0.1:30000", "metrics": True,
         "server": "llama", "address": None, "port": 30000, "dist_port": 5000, "tp_size": 1, "pp_size": 1,
         "gpus": None}
    r.update(kw)
    return r


def test_scrape_targets_by_job_from_the_inventory_records():
    """#48 item 2: one file_sd list per job. A server with metrics at its URL's host:port, a group's rank 0 only (no
    /metrics on the others), none without metrics; every container's node exporter at its address (default: its URL's
    host), a group's ranks labelled; routers and nodes at theirs. IPv6 keeps its brackets."""
    cts = [_rec("ct129", url="http://10.0.3.129:30001/"),
           _rec("ct100", url="http://10.0.3.100:30000", group="g", server="qwen"),
           _rec("ct101", url="http://10.0.3.101:30000", group="g", server="qwen", address="192.0.2.7"),
           _rec("ct140", url="http://[fd00::8]:30000", metrics=False)]
    layout = SERVER.group_layout([c for c in cts if c["group"]])
    out = SERVER.scrape_targets(cts, layout, routers=[{"name": "router", "host": "127.0.0.1", "port": 29000}],
                                nodes=[{"name": "pve1", "address": "10.0.0.2"}], exporter_port=9100)
    assert [(g["targets"], g["labels"]) for g in out["gpuserve-sglang"]] == [
        (["10.0.3.129:30001"], {"ct": "ct129", "server": "llama", "node": "pve1"}),
        (["10.0.3.100:30000"], {"ct": "ct100", "server": "qwen", "node": "pve1"})]
    assert [(g["targets"], g["labels"].get("group"), g["labels"].get("rank")) for g in out["gpuserve-ct"]] == [
        (["10.0.3.129:9100"], None, None), (["10.0.3.100:9100"], "g", "0"), (["192.0.2.7:9100"], "g", "1"),
        (["[fd00::8]:9100"], None, None)]
    assert out["gpuserve-router"] == [{"targets": ["127.0.0.1:29000"], "labels": {"router": "router"}}]
    assert out["gpuserve-node"] == [{"targets": ["10.0.0.2:9100"], "labels": {"node": "pve1"}}]
