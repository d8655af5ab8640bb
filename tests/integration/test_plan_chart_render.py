"""The plan as a picture, rendered for real: sglang_memory_plan (chart: true) through Ansible gives the SVG, headless
Chromium (Debian's, installed by tests/ci/bootstrap.sh) paints it to a PNG, and the pixels are read back here (a PNG
decoder of the standard library's zlib): the picture's size is the SVG's, each GPU's bar shows its parts in the
stacking order with widths proportional to the plan's GiB (to the pixel, computed here from the numbers), the budget
line stands at mem_fraction_static x the free memory, and a launch that cannot fit is marked over budget."""
import os
import shutil
import struct
import subprocess
import tempfile
import zlib

import pytest

from ansible_helpers import ROOT, run_module

M = "gpuserve.sglang.sglang_memory_plan"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the layout's fixed frame (plugins/module_utils/plan/picture.py): where bars start, their full width, where they sit
LEFT, BAR_WIDTH, TOP, BAR_HEIGHT, GAP = 190, 600, 78, 34, 26
COLOURS = {"weights": (0x3b, 0x6f, 0xb6), "spec verify": (0xe0, 0x8a, 0x2c), "mamba state": (0x8a, 0x5c, 0xc2),
           "KV cache": (0x3c, 0x9a, 0x4f), "headroom": (0xc8, 0xc8, 0xc8)}
SEED = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "context_length": 262144}


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _c, _f, interlace = ihdr
    assert depth == 8 and colour in (2, 6) and interlace == 0, ihdr
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def render(svg):
    """The SVG painted by headless Chromium at its own size: (its width, its height, the PNG's pixels)."""
    assert CHROMIUM, "chromium is not installed (tests/ci/bootstrap.sh installs Debian's chromium)"
    width = int(svg.split('width="', 1)[1].split('"', 1)[0])
    height = int(svg.split('height="', 1)[1].split('"', 1)[0])
    work = tempfile.mkdtemp(prefix="gpuserve-chart-")
    try:
        src, png = os.path.join(work, "plan.svg"), os.path.join(work, "plan.png")
        with open(src, "w") as fh:
            fh.write(svg)
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--user-data-dir=" + os.path.join(work, "profile"), "--hide-scrollbars",
                        "--force-device-scale-factor=1", "--window-size=%d,%d" % (width, height),
                        "--screenshot=" + png, "file://" + src],
                       check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return (width, height) + read_png(png)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def runs(row, x0, x1):
    """The colour runs of row[x0:x1]: [(colour, first x, length)]."""
    out = []
    for x in range(x0, x1):
        if out and out[-1][0] == row[x]:
            out[-1][2] += 1
        else:
            out.append([row[x], x, 1])
    return [tuple(r) for r in out]


def expected_edges(result, g):
    """The parts of GPU g's bar as the plan's numbers put them, in pixels: [(label, x0, x1)], headroom last."""
    widest = max(max(p["avail_mem_before_load_gb"], sum(max(0.0, p[k]) for k in (
        "weights_gb", "spec_reserve_gb", "mamba_gb", "kv_gb"))) for p in result["per_gpu"])
    px, at, out = BAR_WIDTH / widest, 0.0, []
    for key, label in (("weights_gb", "weights"), ("spec_reserve_gb", "spec verify"), ("mamba_gb", "mamba state"),
                       ("kv_gb", "KV cache")):
        if g[key] > 0:
            out.append((label, LEFT + round(at * px), LEFT + round((at + g[key]) * px)))
            at += g[key]
    end = LEFT + round(g["avail_mem_before_load_gb"] * px)
    if out[-1][2] < end:   # the headroom they leave, to the free memory
        out.append(("headroom", out[-1][2], end))
    return out, px


def plan_with_chart(args, config_name="qwen3.6-27b.config.json", fail_on=()):
    import json
    with open(os.path.join(ROOT, "playbooks", "vars", config_name)) as fh:
        config = json.load(fh)
    return run_module(M, {"model_config": config, "gpu_profile": "rtx-a6000", "gpu_count": 2, "args": args,
                          "fail_on": list(fail_on), "chart": True})


def check_bars(result, rows):
    for i, g in enumerate(result["per_gpu"]):
        y = TOP + i * (BAR_HEIGHT + GAP) + BAR_HEIGHT // 2
        edges, px = expected_edges(result, g)
        seen = runs(rows[y], LEFT, edges[-1][2])
        assert [c for c, _x, _n in seen] == [COLOURS[label] for label, _a, _b in edges], (i, seen, edges)
        for (label, x0, x1), (_c, sx, n) in zip(edges, seen):
            assert sx == x0 and n == x1 - x0, (label, x0, x1, sx, n)
        # proportions: each part's pixels are its GiB on one scale (to the pixel's rounding)
        keys = {"weights": "weights_gb", "spec verify": "spec_reserve_gb", "mamba state": "mamba_gb",
                "KV cache": "kv_gb"}
        for (label, x0, x1), (_c, _sx, n) in zip(edges, seen):
            if label in keys:
                assert abs(n - g[keys[label]] * px) <= 1.0, (label, n, g[keys[label]] * px)
        assert rows[y][edges[-1][2]] == (255, 255, 255)   # nothing past the free memory
    return px


@pytest.fixture(scope="module")
def oom():
    r = plan_with_chart(SEED, fail_on=["kv_pool_oom"])
    assert r["failed"] is True and r["outcome"] == "kv_pool_oom"   # refused, and the picture says why
    return r


def test_the_motivating_failure_drawn_over_budget(oom):
    width, height, pw, ph, rows = render(oom["chart_svg"])
    assert (pw, ph) == (width, height) == (1000, height) and height > TOP + 2 * (BAR_HEIGHT + GAP)
    px = check_bars(oom, rows)
    g = oom["per_gpu"][0]
    # weights, spec verify, mamba state - no KV cache: the pool is 2.74 GiB short
    assert g["kv_gb"] < 0 and g["spec_reserve_gb"] > 0 and g["mamba_gb"] > 0
    budget_x = LEFT + round(oom["mem_fraction_static"] * g["avail_mem_before_load_gb"] * px)
    static_end = LEFT + round((g["weights_gb"] + g["spec_reserve_gb"] + g["mamba_gb"]) * px)
    # the budget line: dark above the first bar (the bars cover it), where 0.85 x the free memory puts it
    dark = [x for x in range(LEFT, LEFT + BAR_WIDTH) if any(max(rows[y][x]) < 80 for y in range(TOP - 10, TOP))]
    assert dark and abs(dark[0] - budget_x) <= 1 and dark[-1] - dark[0] <= 2, dark
    # the over-budget mark under each bar, red from the budget line to where the static parts end
    for i in range(2):
        y = TOP + i * (BAR_HEIGHT + GAP) + BAR_HEIGHT + 5
        red = [x for x in range(LEFT, LEFT + BAR_WIDTH) if rows[y][x] == (0xd6, 0x27, 0x28)]
        assert red and abs(red[0] - budget_x) <= 1 and abs(red[-1] + 1 - static_end) <= 1, (red[:1], red[-1:])
    assert "over budget by %.2f GiB" % -g["kv_gb"] in oom["chart_svg"]
    assert "fix max_running_requests=32 -&gt; context_truncated" in oom["chart_svg"]


def test_a_launch_that_fits_drawn_with_its_kv_pool_and_headroom():
    r = plan_with_chart({"tp_size": 2, "mem_fraction_static": 0.85, "context_length": 32768})
    assert r.get("failed") is not True and r["outcome"] == "fits"
    width, height, pw, ph, rows = render(r["chart_svg"])
    assert (pw, ph) == (width, height)
    check_bars(r, rows)
    labels = [label for label, _a, _b in expected_edges(r, r["per_gpu"][0])[0]]
    assert labels == ["weights", "mamba state", "KV cache", "headroom"]
    for i in range(2):   # nothing over budget: no red under the bars
        y = TOP + i * (BAR_HEIGHT + GAP) + BAR_HEIGHT + 5
        assert (0xd6, 0x27, 0x28) not in rows[y][LEFT:LEFT + BAR_WIDTH]
