"""The Grafana dashboard of what gpuserve.sglang deploys, built from code with grafana-foundation-sdk (pinned in
tests/ci/locks/dev.lock; its builders are generated from Grafana's own schema), written to
roles/sglang_monitoring/files/gpuserve-sglang-dashboard.json:

    .venv/bin/python tests/grafana/build_dashboard.py            # rewrite the JSON (make dashboard)
    .venv/bin/python tests/grafana/build_dashboard.py --check    # exit 1 when the JSON differs from this code

Per server (variable server, from the gpuserve-sglang job's targets): planned vs actual KV tokens (the plan's textfile
next to SGLang's own sglang:max_total_num_tokens), the KV pool's usage, requests running and queued, generation
throughput, latency (end-to-end and time to first token); per node (variable node): GPU memory and the driver's state,
lost GPUs, a driver mismatch. SGLang's families are matched as sglang[:_]<name>, as the alert rules match them
(roles/sglang_monitoring/files/gpuserve-sglang.rules.yml says why). The tests: tests/unit/test_dashboard.py (this code
gives the committed JSON; the JSON reads back through the SDK's models; every series is served) and the real lab
scenario (every query runs on the real Prometheus scraping the real SGLang 0.5.9)."""
import argparse
import json
import os
import sys

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, dashboard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "roles", "sglang_monitoring", "files", "gpuserve-sglang-dashboard.json")
UID = "gpuserve-sglang"
DS = dashboard.DataSourceRef(type_val="prometheus", uid="${datasource}")
SERVER = 'job="gpuserve-sglang", server=~"$server"'


def sglang(name, labels=SERVER):
    """SGLang's family ``name`` in either spelling Prometheus stores it."""
    return '{__name__=~"sglang[:_]%s", %s}' % (name, labels)


def query(expr, legend, ref):
    return prom_b.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def series(title, description, unit, targets, width=12, height=8):
    panel = (ts_b.Panel().title(title).description(description).unit(unit).datasource(DS).span(width).height(height)
             .legend(common_b.VizLegendOptions().display_mode(common.LegendDisplayMode.TABLE)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True).calcs(["lastNotNull", "max"]))
             .line_width(2).fill_opacity(10))
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(expr, legend, chr(ord("A") + i)))
    return panel


def status(title, description, targets, mappings, width=6, height=5):
    panel = (stat_b.Panel().title(title).description(description).datasource(DS).span(width).height(height)
             .color_mode(common.BigValueColorMode.BACKGROUND).graph_mode(common.BigValueGraphMode.NONE)
             .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
             .mappings(mappings))
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(query(expr, legend, chr(ord("A") + i)))
    return panel


def value_map(pairs):
    """Grafana's value mapping: {value: (text, colour)}."""
    return [dashboard.ValueMap(options=dict((str(v), dashboard.ValueMappingResult(text=t, color=c, index=i))
                                            for i, (v, (t, c)) in enumerate(sorted(pairs.items()))))]


def variables():
    return [
        dash_b.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        dash_b.QueryVariable("server").label("server").datasource(DS).multi(True).include_all(True)
        .query('label_values(up{job="gpuserve-sglang"}, server)')
        .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dashboard.VariableSort.ALPHABETICAL_ASC),
        dash_b.QueryVariable("node").label("node").datasource(DS).multi(True).include_all(True)
        .query("label_values(gpuserve_nvidia_gpus, node)")
        .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dashboard.VariableSort.ALPHABETICAL_ASC),
    ]


def server_panels():
    by_server = "max by (server) (%s)"
    quantile = ("histogram_quantile(%s, sum by (le, server) (rate(%s[$__rate_interval])))")
    return [
        status("Servers up", "Prometheus' scrape of each server's /metrics (SGLang's --enable-metrics): 0 is down - "
               "playbooks/status.yml names why.",
               [('up{%s}' % SERVER, "{{server}}")], value_map({0: ("down", "red"), 1: ("up", "green")}), width=24,
               height=4),
        series("KV tokens: planned vs actual", "The plan's max_total_num_tokens (the sglang_server module's textfile, "
               "written at each launch) next to the pool SGLang sized. Apart by more than the tolerance: alert "
               "SGLangPlanOffTolerance.", "none",
               [('max by (server) (gpuserve_sglang_planned_max_total_num_tokens{server=~"$server"})', "{{server}} plan"),
                (by_server % sglang("max_total_num_tokens"), "{{server}} SGLang")]),
        series("KV pool usage", "sglang:token_usage - the share of the KV pool in use. Near 1 for minutes: alert "
               "SGLangKVPoolNearFull.", "percentunit",
               [(by_server % sglang("token_usage"), "{{server}}")]),
        series("Requests running and queued", "sglang:num_running_reqs and sglang:num_queue_reqs. A queue that grows: "
               "alert SGLangQueueGrowing.", "none",
               [(by_server % sglang("num_running_reqs"), "{{server}} running"),
                (by_server % sglang("num_queue_reqs"), "{{server}} queued")]),
        series("Generation throughput", "sglang:gen_throughput - tokens generated per second.", "none",
               [(by_server % sglang("gen_throughput"), "{{server}}")]),
        series("Latency", "End-to-end request latency (p50, p95) and time to first token (p95), from SGLang's "
               "histograms.", "s",
               [(quantile % ("0.5", sglang("e2e_request_latency_seconds_bucket")), "{{server}} e2e p50"),
                (quantile % ("0.95", sglang("e2e_request_latency_seconds_bucket")), "{{server}} e2e p95"),
                (quantile % ("0.95", sglang("time_to_first_token_seconds_bucket")), "{{server}} TTFT p95")],
               width=24),
    ]


def node_panels():
    return [
        series("GPU memory", "Each GPU's memory in use and in all (nvidia_gpu_facts' textfile on the Proxmox node).",
               "bytes",
               [('gpuserve_nvidia_gpu_memory_used_bytes{node=~"$node"}', "{{node}} GPU {{gpu}} used"),
                ('gpuserve_nvidia_gpu_memory_total_bytes{node=~"$node"}', "{{node}} GPU {{gpu}} total")],
               width=24),
        status("Driver state", "The NVIDIA driver's state on the node, as nvidia_gpu_facts names it.",
               [('gpuserve_nvidia_state{node=~"$node"} == 1', "{{node}} {{state}}")],
               value_map({1: ("current", "blue")}), width=8),
        status("GPUs lost", "GPUs fallen off the bus: alert GPULost. The node needs a reboot or a reseat.",
               [('gpuserve_nvidia_gpus_lost{node=~"$node"}', "{{node}}")],
               value_map({0: ("none", "green")}), width=8),
        status("Driver mismatch", "1 when the userspace driver differs from the kernel module: no CUDA program runs. "
               "Alert NvidiaDriverMismatch.",
               [('gpuserve_nvidia_driver_mismatch{node=~"$node"}', "{{node}}")],
               value_map({0: ("no", "green"), 1: ("mismatch", "red")}), width=8),
    ]


def build():
    board = (dash_b.Dashboard("gpuserve.sglang: SGLang servers and their GPUs").uid(UID)
             .description("What gpuserve.sglang deploys, the plan next to reality (roles/sglang_monitoring).")
             .tags(["gpuserve", "sglang", "llm"]).refresh("30s").time("now-6h", "now").timezone("browser")
             .tooltip(dashboard.DashboardCursorSync.CROSSHAIR).readonly())
    for variable in variables():
        board = board.with_variable(variable)
    board = board.with_row(dash_b.Row("Servers"))
    for panel in server_panels():
        board = board.with_panel(panel)
    board = board.with_row(dash_b.Row("Nodes"))
    for panel in node_panels():
        board = board.with_panel(panel)
    return board.build()


def render():
    return json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed JSON differs from this code")
    args = parser.parse_args()
    text = render()
    if args.check:
        with open(OUT) as fh:
            same = fh.read() == text
        print("%s: %s" % (OUT, "as built" if same else "differs from tests/grafana/build_dashboard.py: run it"))
        return 0 if same else 1
    with open(OUT, "w") as fh:
        fh.write(text)
    print("wrote %s" % OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
