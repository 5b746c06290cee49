"""The report as one self-contained HTML file: Vega-Lite charts (their specs written here as data), drawn by
Vega, Vega-Lite and vega-embed inlined from vl-convert's bundle (about 0.9 MB, against plotly.js's 4.6), so the
file opens offline and needs nothing but a browser. Each chart's data is inlined in its spec.
"""
from __future__ import annotations

import html
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.readers.report import GroupReport, Report

STATUS_COLORS = {"OK": "#2e7d32", "WARN": "#f9a825", "ERR": "#c62828", "STOP": "#6a1b9a", "STALL": "#d84315",
                 "REWIND": "#1565c0", "-": "#9e9e9e"}
DELIVERY_COLORS = {"Acknowledged": "#2e7d32", "Available": "#f9a825", "Archived": "#9e9e9e"}
EVENT_COLORS = {"rebalanced": "#1565c0", "member_joined": "#2e7d32", "member_left": "#ef6c00", "emptied": "#757575",
                "deleted": "#c62828", "converted": "#6a1b9a"}
WIDTH = 560
OVERVIEW_WIDTH = 380  # two overview charts side by side
TOP_GROUPS = 20  # bars in the overview's lag chart
VEGA_LITE = "https://vega.github.io/schema/vega-lite/v6.json"  # names the spec's version; never fetched


def render(report: Report) -> str:
    """The page: overview (totals, groups ranked, lag of the worst, offsets about to expire), then a section per
    group of report.detailed."""
    charts: dict[str, dict] = {}
    overview = _overview(report, charts)
    sections = "".join(_section(g, report, charts, i) for i, g in enumerate(report.detailed))
    return _page(report, overview, sections, charts)


def _chart(values: list[dict], title: str, **spec: Any) -> dict[str, Any]:
    """A Vega-Lite spec over inline `values`."""
    return {"$schema": VEGA_LITE, "title": title, "data": {"values": values}, **spec}


def _color(field: str, colors: dict[str, str], title: str | None = None, values: list[dict] | None = None
           ) -> dict[str, Any]:
    """The same color for a value on every chart; the legend lists the values present in `values`."""
    present = [k for k in colors if values is None or any(v.get(field) == k for v in values)]
    return {"field": field, "type": "nominal", "title": title or field,
            "scale": {"domain": present, "range": [colors[k] for k in present]}}


TIME = {"field": "time", "type": "temporal", "title": None, "scale": {"type": "utc"},
        "axis": {"format": "%b %d %H:%M", "formatType": "utc", "labelAngle": 0, "tickCount": 6}}


def _tip(*fields: str) -> list[dict[str, str]]:
    """Tooltip fields written as name:type (Q, N, O, T)."""
    kinds = {"Q": "quantitative", "N": "nominal", "O": "ordinal", "T": "temporal"}
    return [{"field": f.split(":")[0], "type": kinds[f.split(":")[1]]} for f in fields]


def _bars(values: list[dict], title: str, x: str, x_title: str, y: str, **encoding: Any) -> dict[str, Any]:
    """Horizontal bars, one per `y` in the order given."""
    return _chart(values, title, mark={"type": "bar"}, width=OVERVIEW_WIDTH, height={"step": 16}, encoding={
        "x": {"field": x, "type": "quantitative", "title": x_title},
        "y": {"field": y, "type": "nominal", "sort": [v[y] for v in values], "title": None}, **encoding})


def _overview(report: Report, charts: dict[str, dict]) -> str:
    ranked = [g.row for g in report.groups if g.row["lag"] is not None][:TOP_GROUPS]
    if ranked:
        values = [{"group": r["group_id"], "lag": max(r["lag"], 0), "status": r["status"] or "-",
                   "lag_seconds": r["lag_seconds"], "records_lost": r["records_lost"]} for r in ranked]
        charts["chart-overview-lag"] = _bars(values, "Lag by group (offsets)", "lag", "lag (offsets)", "group",
                                             color=_color("status", STATUS_COLORS, "Burrow", values),
                                             tooltip=_tip("group:N", "lag:Q", "lag_seconds:Q", "status:N",
                                                          "records_lost:Q"))
    if report.expiring:
        soonest: dict[str, dict] = {}  # per group and topic: its first deadline, and how many partitions
        for e in report.expiring:
            into = soonest.setdefault(f"{e['group_id']} {e['topic']}", {
                "offsets": f"{e['group_id']} {e['topic']}", "hours_left": e["hours_left"],
                "expires_at": e["expires_at"], "partitions": 0})
            into["partitions"] += 1
        charts["chart-overview-expiring"] = _bars(list(soonest.values()), "Offsets about to expire",
                                                  "hours_left", "hours until retention deletes them", "offsets",
                                                  color={"value": "#ef6c00"},
                                                  tooltip=_tip("offsets:N", "partitions:Q", "expires_at:N",
                                                               "hours_left:Q"))
    t = report.totals
    cards = [("groups", f"{t['groups']:,}"), ("partitions measured", f"{t['partitions']:,}"),
             ("total lag", f"{t['lag']:,}"), ("records lost", f"{t['records_lost']:,}"),
             ("expiring in 7 days", f"{t['expiring']:,}")]
    status = "".join(f'<span class="badge" style="background:{STATUS_COLORS[s]}">{s} {n}</span>'
                     for s, n in t["by_status"].items() if n)
    rows = "".join(_overview_row(g, report) for g in report.groups)
    return f"""
<section id="overview">
  <div class="cards">{''.join(f'<div class="card"><div class="figure">{v}</div><div class="label">{k}</div></div>'
                             for k, v in cards)}</div>
  <p class="statuses">Burrow's verdict: {status or '<span class="muted">not judged by this run</span>'}</p>
  <div class="row">
    <div class="chart" id="chart-overview-lag">{'' if ranked else '<p class="muted">No lag measured: give --end-offsets to rebuild.</p>'}</div>
    <div class="chart" id="chart-overview-expiring">{'' if report.expiring else '<p class="muted">No offset expires within 7 days.</p>'}</div>
  </div>
  <h2>Groups, worst first</h2>
  <table class="groups"><thead><tr><th>group</th><th>type</th><th>state</th><th class="n">members</th>
    <th class="n">lag</th><th class="n">lag (s)</th><th>status</th><th class="n">records lost</th></tr></thead>
    <tbody>{rows}</tbody></table>
</section>"""


def _overview_row(g: GroupReport, report: Report) -> str:
    r = g.row
    gid = html.escape(r["group_id"])
    name = f'<a href="#{_anchor(r["group_id"])}">{gid}</a>' if g in report.detailed else gid
    kind = r["group_type"] + ("" if r["protocol_type"] in (None, "consumer", r["group_type"]) else f" ({r['protocol_type']})")
    lost = f'<span class="lost">{r["records_lost"]:,}</span>' if r["records_lost"] else "0"
    return (f"<tr><td>{name}</td><td>{html.escape(kind)}</td><td>{html.escape(r['state'])}</td>"
            f"<td class='n'>{r['members']}</td><td class='n'>{_number(r['lag'])}</td>"
            f"<td class='n'>{_duration(r['lag_seconds'])}</td><td>{_badge(r['status'])}</td><td class='n'>{lost}</td></tr>")


def _section(g: GroupReport, report: Report, charts: dict[str, dict], i: int) -> str:
    r = g.row
    ids = {name: f"chart-{i}-{name}" for name in ("lag", "seconds", "events", "status", "shares")}
    replayed = [p for p in g.lag if p["source"] == "replayed"]
    measured = [p for p in g.lag if p["source"] != "replayed"]
    if g.lag:
        for name, field, title, axis, interpolate in (
                ("lag", "lag", "Lag over time (offsets)", "lag (offsets)", "step-after"),
                ("seconds", "lag_seconds", "Lag in time (age of the oldest unread record)", "lag (seconds)",
                 "monotone")):
            x = TIME
            y = {"field": field, "type": "quantitative", "title": axis}
            topic = {"field": "topic", "type": "nominal"}
            charts[ids[name]] = {"$schema": VEGA_LITE, "title": title, "width": WIDTH, "height": 160, "layer": [
                {"data": {"values": replayed}, "mark": {"type": "line", "interpolate": interpolate},
                 "encoding": {"x": x, "y": y, "color": topic, "tooltip": _tip("time:T", "topic:N", f"{field}:Q")}},
                {"data": {"values": measured}, "mark": {"type": "point", "filled": True, "size": 60},
                 "encoding": {"x": x, "y": y, "color": topic,
                              "shape": {"field": "source", "type": "nominal", "title": "measured"},
                              "tooltip": _tip("time:T", "topic:N", "lag:Q", "lag_seconds:Q", "source:N")}}]}
    if g.events:
        values = [{"time": _iso(e["event_timestamp"]), "event": e["event"], "members": e["member_count"],
                   "generation": e["generation"], "state": e["state"]} for e in g.events]
        span = [t for t in [*(p["time"] for p in g.lag), *(v["time"] for v in values), _iso(report.as_of)]
                if t != "-"]
        x = {**TIME, "scale": {"type": "utc", "domain": [min(span), max(span)]}}  # as wide as the lag's
        y = {"field": "members", "type": "quantitative", "title": "members"}
        rebalances = sum(e["event"] == "rebalanced" for e in g.events)
        charts[ids["events"]] = {"$schema": VEGA_LITE, "title": f"Rebalances: {rebalances}", "width": WIDTH,
                                 "height": 140, "data": {"values": values}, "layer": [
            {"mark": {"type": "line", "interpolate": "step-after", "color": "#90a4ae"}, "encoding": {"x": x, "y": y}},
            {"mark": {"type": "point", "filled": True, "size": 70},
             "encoding": {"x": x, "y": y, "color": _color("event", EVENT_COLORS, values=values),
                          "tooltip": _tip("time:T", "event:N", "generation:Q", "members:Q", "state:N")}}]}
    if g.status:
        values = [{"topic": s["topic"], "partition": s["partition"], "status": s["status"], "rule": s["rule"],
                   "lag": s["lag"], "commits": s["window_commits"]} for s in g.status]
        charts[ids["status"]] = _chart(values, "Burrow's status per partition",
                                       mark={"type": "rect", "stroke": "white", "strokeWidth": 2},
                                       width={"step": 34}, height={"step": 30}, encoding={
            "x": {"field": "partition", "type": "ordinal"}, "y": {"field": "topic", "type": "nominal", "title": None},
            "color": _color("status", STATUS_COLORS, values=values),
            "tooltip": _tip("topic:N", "partition:O", "status:N", "rule:N", "lag:Q", "commits:Q")})
    if g.shares:
        values = [{"partition": s["partition"], "state": state, "records": s[state]}
                  for s in g.shares for state in DELIVERY_COLORS]
        charts[ids["shares"]] = _chart(values, "Share partitions: records in flight", mark={"type": "bar"},
                                       width=WIDTH, height={"step": 16}, encoding={
            "x": {"field": "records", "type": "quantitative", "stack": "zero"},
            "y": {"field": "partition", "type": "nominal", "title": None},
            "color": _color("state", DELIVERY_COLORS), "tooltip": _tip("partition:N", "state:N", "records:Q")})
    blocks = [f'<div class="chart" id="{ids[n]}"></div>' for n in ("lag", "seconds", "events", "status", "shares")
              if ids[n] in charts]
    if not blocks:
        blocks = ['<p class="muted">Nothing measured over time for this group.</p>']
    lost = ""
    if g.lost:
        items = ", ".join(f"{html.escape(x['topic'])}-{x['partition']}: {x['records_lost']:,}" for x in g.lost[:8])
        lost = (f'<p class="warning">Records lost: retention deleted {sum(x["records_lost"] for x in g.lost):,} '
                f"records before the group read them ({items}). Its lag counts them; its lag in seconds does not."
                "</p>")
    return f"""
<section class="group" id="{_anchor(r['group_id'])}">
  <h2>{html.escape(r['group_id'])} {_badge(r['status'])}</h2>
  <p class="facts">{html.escape(r['group_type'])} group, {html.escape(r['state'])}, {r['members']} member(s);
     lag {_number(r['lag'])} offsets, {_duration(r['lag_seconds'])} behind</p>
  {lost}
  <div class="row">{''.join(blocks)}</div>
  {_shares_table(g)}{_expiring_table(g.expiring)}
</section>"""


def _shares_table(g: GroupReport) -> str:
    if not g.shares:
        return ""
    rows = "".join(f"<tr><td>{html.escape(s['partition'])}</td><td class='n'>{_number(s['start_offset'])}</td>"
                   f"<td class='n'>{_number(s['log_end_offset'])}</td><td class='n'>{_number(s['lag'])}</td>"
                   f"<td class='n'>{s['Acknowledged']}</td><td class='n'>{s['Available']}</td>"
                   f"<td class='n'>{s['Archived']}</td></tr>" for s in g.shares)
    return ("<h3>Share partitions</h3><table><thead><tr><th>partition</th><th class='n'>start offset</th>"
            "<th class='n'>log end</th><th class='n'>lag</th><th class='n'>acknowledged</th><th class='n'>available"
            f"</th><th class='n'>archived</th></tr></thead><tbody>{rows}</tbody></table>")


def _expiring_table(expiring: list[dict]) -> str:
    if not expiring:
        return ""
    rows = "".join(f"<tr><td>{html.escape(e['topic'])}-{e['partition']}</td><td class='n'>{e['committed_offset']}</td>"
                   f"<td>{e['expires_at']}</td><td class='n'>{e['hours_left']}</td></tr>" for e in expiring)
    return ("<h3>Offsets about to expire</h3><table><thead><tr><th>partition</th><th class='n'>offset</th>"
            f"<th>expires at</th><th class='n'>hours left</th></tr></thead><tbody>{rows}</tbody></table>")


def _page(report: Report, overview: str, sections: str, charts: dict[str, dict]) -> str:
    run = report.run
    cluster = run.get("cluster") or run.get("source") or report.output
    nav = "".join(f'<a href="#{_anchor(g.row["group_id"])}">{html.escape(g.row["group_id"])} {_dot(g.row["status"])}'
                  "</a>" for g in report.detailed)
    since = f", since {_iso(report.since)}" if report.since else ""
    if run.get("history_from") is not None:
        since += f" (history kept from {_iso(_aware(run['history_from']))})"
    note = "" if report.history_written else (
        '<p class="warning">The newest run kept no history (--no-history): lag over time and rebalances are '
        "not shown, and Burrow's status is not judged.</p>")
    title = f"offsetlake: {cluster} as of {_iso(report.as_of)}"
    specs = json.dumps(charts, separators=(",", ":")).replace("</", "<\\/")
    bundle = javascript_bundle().replace("</script", "<\\/script")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body>
<header><div><h1>{html.escape(str(cluster))}</h1>
<p>Consumer groups as of <b>{_iso(report.as_of)}</b>{since} &middot; run {html.escape(str(run.get('run_id', '-')))}
finished {_iso(_aware(run.get('finished_at')), seconds=True)} &middot; tables {html.escape(report.output)}</p></div>
<div class="made">offsetlake report &middot; {_iso(datetime.now(timezone.utc).replace(microsecond=0))}</div></header>
<nav><a href="#overview">Overview</a>{nav}</nav>
<main>{note}{overview}{sections}</main>
<script type="module">{bundle}</script>
<script type="module">
const specs = {specs};
const views = Object.entries(specs).map(([id, spec]) =>
  vegaEmbed("#" + id, spec, {{actions: false, renderer: "svg"}}));
Promise.all(views).then(done => {{ document.body.dataset.charts = String(done.length); }},
                        error => {{ console.error(error); document.body.dataset.charts = "failed"; }});
</script>
</body></html>
"""


def javascript_bundle() -> str:
    """vl-convert's bundle of Vega, Vega-Lite and vega-embed (which sets window.vegaEmbed). Making it takes
    seconds, so it is kept in the user's cache folder, one file per vl-convert version."""
    import vl_convert

    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offsetlake"
    cached = folder / f"vega-bundle-{vl_convert.__version__}.js"
    try:
        return cached.read_text()
    except OSError:
        pass
    bundle = vl_convert.javascript_bundle()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(bundle)
        temporary.replace(cached)  # whole or not at all, should two reports make it at once
    except OSError:
        pass  # no cache: the next report makes it again
    return bundle


def _aware(moment: datetime | None) -> datetime | None:
    return moment if moment is None or moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _iso(moment: Any, seconds: bool = False) -> str:
    """ISO-8601 UTC; `seconds`: without its fraction."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        return moment
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    moment = moment.replace(microsecond=0) if seconds else moment
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _anchor(group_id: str) -> str:
    return "group-" + "".join(c if c.isalnum() or c in "-_" else f"_{ord(c):x}" for c in group_id)


def _badge(status: str | None) -> str:
    if status is None:
        return '<span class="badge none">-</span>'
    return f'<span class="badge" style="background:{STATUS_COLORS.get(status, "#9e9e9e")}">{status}</span>'


def _dot(status: str | None) -> str:
    return f'<span class="dot" style="background:{STATUS_COLORS.get(status or "-", "#9e9e9e")}"></span>'


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _duration(seconds: float | None) -> str:
    """A lag in seconds for people: 45 s, 12 min, 3.5 h, 2.1 d."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


STYLE = """
:root { --ink:#1f2933; --muted:#66788a; --line:#e4e7eb; --bg:#f5f7fa; --accent:#1565c0; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color:var(--ink);
       background:var(--bg); }
header { display:flex; justify-content:space-between; align-items:flex-end; padding:18px 28px; background:#102a43;
         color:#f0f4f8; }
header h1 { margin:0 0 4px; font-size:22px; } header p { margin:0; color:#bcccdc; } header b { color:#fff; }
.made { color:#829ab1; font-size:12px; }
nav { position:sticky; top:0; z-index:2; display:flex; flex-wrap:wrap; gap:4px 14px; padding:8px 28px;
      background:#fff; border-bottom:1px solid var(--line); }
nav a { color:var(--accent); text-decoration:none; white-space:nowrap; }
main { padding:18px 28px 40px; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:16px 20px; margin-bottom:18px;
          scroll-margin-top:80px; }
h2 { font-size:18px; margin:4px 0 10px; } h3 { font-size:14px; margin:16px 0 6px; color:var(--muted); }
.cards { display:flex; flex-wrap:wrap; gap:12px; margin-bottom:10px; }
.card { flex:1 1 140px; background:var(--bg); border-radius:6px; padding:10px 14px; }
.figure { font-size:24px; font-weight:600; } .label { color:var(--muted); }
.row { display:flex; flex-wrap:wrap; gap:18px 36px; align-items:flex-start; }
.chart { min-height:40px; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); }
th { color:var(--muted); font-weight:600; } td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
table.groups tbody tr:hover { background:#f0f4f8; }
.badge { display:inline-block; min-width:34px; padding:1px 7px; border-radius:10px; color:#fff; font-size:12px;
         font-weight:600; text-align:center; } .badge.none { background:#cbd2d9; }
.statuses .badge { margin-right:6px; }
.dot { display:inline-block; width:8px; height:8px; border-radius:4px; margin-left:3px; }
.muted { color:var(--muted); } .facts { color:var(--muted); margin-top:-4px; }
.lost { color:#c62828; font-weight:600; }
.warning { background:#fff4e5; border-left:4px solid #ef6c00; padding:8px 12px; border-radius:4px; }
"""
