# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan as a picture (``chart_svg``): one stacked bar per GPU - weights, the state pools (speculative verify,
mamba), the KV cache, then the headroom - on one scale in GiB, the static budget as a line across the bars, what is
over budget marked under its bar, and the outcome and the fixes (the words of ``explain``) beneath.

The geometry is plain arithmetic a test can redo (``layout``): the scale is ``BAR_WIDTH`` pixels for the largest of
the free memory and the stacked static parts, and every edge is rounded to a whole pixel and drawn with crisp edges,
so a renderer paints each part exactly between its two edges.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from xml.sax.saxutils import escape

# (key of per_gpu, label, colour): the stacking order, left to right
PARTS = (
    ("weights_gb", "weights", "#3b6fb6"),
    ("spec_reserve_gb", "spec verify", "#e08a2c"),
    ("mamba_gb", "mamba state", "#8a5cc2"),
    ("kv_gb", "KV cache", "#3c9a4f"),
)
HEADROOM = ("headroom_gb", "headroom", "#c8c8c8")
OVER = "#d62728"
WIDTH, LEFT, BAR_WIDTH, BAR_HEIGHT, GAP, TOP = 1000, 190, 600, 34, 26, 78
LINE = 17          # text line height under the bars
MAX_CHARS = 150    # a fix's words beyond this are cut (the full words are in explain)
LABEL_CHARS = 24   # a GPU's name beside its bar: 24 characters of 12 px text (at most 7 px each) fit in LEFT - 16


def widest_gb(result):
    """The largest of a GPU's free memory and its stacked static parts: BAR_WIDTH pixels."""
    return max(max(g["avail_mem_before_load_gb"], sum(max(0.0, g.get(key) or 0.0) for key, dummy, dummy2 in PARTS))
               for g in result["per_gpu"])


def _scale(result):
    widest = widest_gb(result)
    return BAR_WIDTH / widest if widest > 0 else 0.0


def _axis(widest, px, y):
    """A GiB axis under the bars: ticks at a round step, at most ten of them."""
    step = next((s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500) if widest / s <= 10), 1000)
    out = ['<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-width="1"/>' % (
        LEFT, y, LEFT + BAR_WIDTH, y)]
    tick = 0
    while tick <= widest + 1e-9:
        x = LEFT + int(round(tick * px))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555" stroke-width="1"/>' % (x, y, x, y + 4))
        out.append(_text(x, y + 16, "%d" % tick, size=11, anchor="middle", fill="#555"))
        tick += step
    out.append(_text(LEFT + BAR_WIDTH + 8, y + 16, "GiB per GPU", size=11, fill="#555"))
    return out


def layout(result):
    """Per GPU: its bar's top y and the parts drawn, each (label, colour, x0, x1, GiB) in whole pixels; the budget
    line's x; the over-budget mark (x0, x1, GiB) or None. Parts of 0 GiB or less are not drawn; the headroom runs from
    the budget line to the free memory, behind the static parts (what they take past the line is over budget)."""
    px = _scale(result)
    budget_gb = result["mem_fraction_static"] * result["per_gpu"][0]["avail_mem_before_load_gb"]
    bars = []
    for i, g in enumerate(result["per_gpu"]):
        top = TOP + i * (BAR_HEIGHT + GAP)
        m0, budget = g["avail_mem_before_load_gb"], result["mem_fraction_static"] * g["avail_mem_before_load_gb"]
        parts, at = [], 0.0
        for key, label, colour in PARTS:
            gib = g.get(key) or 0.0
            if gib > 0:
                parts.append((label, colour, LEFT + int(round(at * px)), LEFT + int(round((at + gib) * px)), gib))
                at += gib
        head = (HEADROOM[1], HEADROOM[2], LEFT + int(round(budget * px)), LEFT + int(round(m0 * px)),
                g["headroom_gb"])
        over = None
        if at > budget + 0.005:   # by how much, in the planner's words: the KV pool's shortfall when it has one
            short = -g["kv_gb"] if (g.get("kv_gb") or 0.0) < 0 else at - budget
            over = (LEFT + int(round(budget * px)), LEFT + int(round(at * px)), short)
        bars.append({"index": g["index"], "name": g["name"], "top": top, "parts": parts, "headroom": head,
                     "over": over})
    return {"scale": px, "budget_x": LEFT + int(round(budget_gb * px)), "budget_gb": budget_gb, "bars": bars}


def _text(x, y, words, size=13, anchor="start", fill="#222", weight="normal"):
    words = words if len(words) <= MAX_CHARS else words[:MAX_CHARS - 1] + "\u2026"
    return ('<text x="%d" y="%d" font-size="%d" text-anchor="%s" fill="%s" font-weight="%s">%s</text>'
            % (x, y, size, anchor, fill, weight, escape(words)))


def _bar(gpu_bar):
    out = []
    label, colour, x0, x1, gib = gpu_bar["headroom"]
    if x1 > x0:   # behind the static parts: what shows is the headroom they leave
        out.append('<rect class="part headroom" x="%d" y="%d" width="%d" height="%d" fill="%s" data-gib="%.2f"/>'
                   % (x0, gpu_bar["top"], x1 - x0, BAR_HEIGHT, colour, gib))
    for label, colour, x0, x1, gib in gpu_bar["parts"]:
        if x1 > x0:
            out.append('<rect class="part %s" x="%d" y="%d" width="%d" height="%d" fill="%s" data-gib="%.2f">'
                       '<title>%s %.2f GiB</title></rect>' % (
                           label.replace(" ", "-"), x0, gpu_bar["top"], x1 - x0, BAR_HEIGHT, colour, gib, label, gib))
    # two lines right-aligned before the bar, the name cut to what fits between the left edge and the bar (#60:
    # "GPU 0 CPU (lab, --device cpu)" on one line ran past the left edge)
    name = gpu_bar["name"] if len(gpu_bar["name"]) <= LABEL_CHARS else gpu_bar["name"][:LABEL_CHARS - 1] + "\u2026"
    out.append(_text(LEFT - 10, gpu_bar["top"] + 14, "GPU %s" % gpu_bar["index"], size=12, anchor="end"))
    out.append(_text(LEFT - 10, gpu_bar["top"] + 29, name, size=12, anchor="end"))
    if gpu_bar["over"]:
        x0, x1, gib = gpu_bar["over"]
        out.append('<rect class="over" x="%d" y="%d" width="%d" height="5" fill="%s"/>' % (
            x0, gpu_bar["top"] + BAR_HEIGHT + 3, max(1, x1 - x0), OVER))
        out.append(_text(x1 + 6, gpu_bar["top"] + BAR_HEIGHT + 12, "over budget by %.2f GiB" % gib, size=12, fill=OVER))
    return out


def _legend(result, y):
    g, out, x = result["per_gpu"][0], [], 16
    for key, label, colour in PARTS + (HEADROOM,):
        gib = g.get(key) or 0.0
        if key in ("spec_reserve_gb", "mamba_gb") and not gib:
            continue
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (x, y - 11, colour))
        words = "%s %.2f GiB" % (label, gib) if gib >= 0 else "%s none (%.2f GiB short)" % (label, -gib)
        out.append(_text(x + 17, y, words, size=12))
        x += 17 + int(7.4 * len(words)) + 16
    return out


def _title(result, pool):
    """What the picture is, in one line that fits the picture (the release is said on the line below): a plan, or -
    for a launch that died and whose logged numbers replay to a fit - that launch as SGLang saw it, said first (never
    drawn as "fits" under a launch that died)."""
    what = "%s, tp_size=%s, mem_fraction_static=%.4g" % (result.get("architecture"), result.get("tp_size"),
                                                         float(result["mem_fraction_static"]))
    if result.get("replay"):
        return "Launch died: %s - %s: %s as SGLang saw it" % (result.get("launch_failure"), what, pool)
    if result.get("launch_failure"):
        return "Launch died: %s - %s; the replay of its numbers: %s, %s" % (result["launch_failure"], what,
                                                                            result["outcome"], pool)
    return "%s: %s, %s" % (what, result["outcome"], pool)


def chart_svg(result):
    """The plan of ``plan()`` (its ``per_gpu``, ``mem_fraction_static``, ``explain``) as an SVG document."""
    lay = layout(result)
    words = [line for line in result.get("explain") or []
             if line.startswith(("Launch:", "Replay:", "Outcome:", "  fix ", "  does not help:", "note:"))]
    bottom = TOP + len(lay["bars"]) * (BAR_HEIGHT + GAP)
    height = bottom + 56 + LINE * len(words) + 16
    b, tokens = result["per_gpu"][0], result.get("max_total_num_tokens")
    pool = ("%s KV tokens" % tokens) if tokens is not None and tokens > 0 else "no KV pool"
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu '
           'Sans, Arial, sans-serif" shape-rendering="crispEdges">' % (WIDTH, height, WIDTH, height),
           '<rect class="background" x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (WIDTH, height),
           _text(16, 26, _title(result, pool), size=14, weight="bold"),
           _text(16, 48, "SGLang %s, per GPU: %.2f GiB free after CUDA/NCCL init (%s); static budget %.2f x %.2f = "
                 "%.2f GiB; headroom %.2f GiB (needs %.2f)" % (
                     result.get("release", "0.5.9"), b["avail_mem_before_load_gb"], result.get("sources", {}).get("avail_mem_before_load_gb", ""),
                     result["mem_fraction_static"], b["avail_mem_before_load_gb"], lay["budget_gb"],
                     b["headroom_gb"], b.get("headroom_need_gb") or 0.0), size=12)]
    # the budget line first: the bars cover it, so it shows between them, never across a part
    out.append('<line class="budget" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#111" stroke-width="2" '
               'stroke-dasharray="5,3"/>' % (lay["budget_x"], TOP - 12, lay["budget_x"], bottom - GAP + 13))
    out.append(_text(lay["budget_x"], TOP - 16, "static budget %.2f GiB" % lay["budget_gb"], size=11,
                     anchor="middle"))
    for gpu_bar in lay["bars"]:
        out.extend(_bar(gpu_bar))
    out.extend(_axis(widest_gb(result), lay["scale"], bottom - GAP + 16))
    out.extend(_legend(result, bottom + 30))
    for i, line in enumerate(words):
        fill = OVER if line.startswith(("Outcome: kv_pool_oom", "Outcome: headroom_oom", "Launch:")) else (
            "#777" if line.startswith("  does not help:") else "#222")
        out.append(_text(16, bottom + 58 + i * LINE, line.strip(), size=12, fill=fill))
    out.append("</svg>")
    return "\n".join(out) + "\n"
