"""#48 item 4: the Grafana dashboard (roles/sglang_monitoring/files/gpuserve-sglang-dashboard.json) is what its code
(tests/grafana/build_dashboard.py, grafana-foundation-sdk) builds, reads back through the SDK's models (generated
from Grafana's dashboard schema) unchanged, lays its panels out on Grafana's 24-column grid without overlap, and
reads only series that are served (SGLang's as the real 0.5.9 serves them, ours as our writers render them). Every
query runs on the real Prometheus of the `real` lab scenario (test_real.py)."""
import json
import os
import re
import sys

import pytest

from test_alert_series import our_families, served_sglang_families
from unit_helpers import CONTROLLER, ROOT

pytestmark = CONTROLLER   # grafana-foundation-sdk: the controller's venv (Python >= 3.11), not the targets'
BOARD = os.path.join(ROOT, "roles", "sglang_monitoring", "files", "gpuserve-sglang-dashboard.json")


@pytest.fixture(scope="module")
def builder():
    sys.path.insert(0, os.path.join(ROOT, "tests", "grafana"))
    import build_dashboard  # pylint: disable=import-outside-toplevel
    return build_dashboard


@pytest.fixture(scope="module")
def board():
    with open(BOARD) as fh:
        return json.load(fh)


def exprs(board):
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_the_committed_json_is_what_the_code_builds(builder):
    with open(BOARD) as fh:
        assert fh.read() == builder.render(), "run: .venv/bin/python tests/grafana/build_dashboard.py (make dashboard)"


def test_it_reads_back_through_the_sdks_models_unchanged(board):
    from grafana_foundation_sdk.cog.encoder import JSONEncoder  # pylint: disable=import-outside-toplevel
    from grafana_foundation_sdk.models.dashboard import Dashboard  # pylint: disable=import-outside-toplevel
    again = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    assert again == board


def test_the_panels_tile_the_grid(board):
    taken = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, "%s overlaps another panel" % p["title"]
        taken |= cells
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p.get("targets", []):
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_the_panels_the_issue_asks_for_are_there(board):
    titles = [p["title"] for p in board["panels"]]
    for title in ("KV tokens: planned vs actual", "KV pool usage", "Requests running and queued",
                  "Generation throughput", "Latency", "GPU memory", "Driver state", "GPUs lost"):
        assert title in titles
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "server", "node"]


def test_every_series_the_dashboard_reads_is_served(board):
    text = " ".join(exprs(board) + [v.get("query", "") for v in board["templating"]["list"]])
    sglang = {"sglang:" + n for n in re.findall(r"sglang\[:_\]([a-z0-9_]+)", text)}
    ours = set(re.findall(r"\b(gpuserve_[a-z0-9_]+)\{", text)) | set(re.findall(r"\b(gpuserve_[a-z0-9_]+), ", text))
    assert len(sglang) >= 7 and len(ours) >= 6, (sglang, ours)
    assert sglang <= served_sglang_families(), "read but not served: %s" % sorted(sglang - served_sglang_families())
    assert ours <= our_families(), "read but not served: %s" % sorted(ours - our_families())
