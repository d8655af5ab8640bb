"""#48 item 1 (part): the plan next to reality as a Prometheus text file (exposition format 0.0.4) the node exporter's
textfile collector serves. Checked here against the format's grammar (each family a HELP, a TYPE, then samples whose
name matches the metric-name pattern and whose label values are escaped), and against the numbers of the record."""
import os
import re
import stat

from unit_helpers import load_module_util

SERVER = load_module_util("server")
METRICS = load_module_util("server.metrics")
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r'^(%s)\{server="((?:[^"\\\n]|\\\\|\\"|\\n)*)"\} (-?[0-9]+(?:\.[0-9]+(?:e[+-]?[0-9]+)?)?)$' % NAME)
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
            server = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
            families[current][2][server] = float(m.group(3))
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
    assert METRICS.label_value('x"\\\n') == 'x\\"\\\\\\n'
