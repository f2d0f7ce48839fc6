#include "runtime/observe/status_page.hpp"

namespace syncfac::observe {

namespace {

// The page's script draws into ids: summary, tasks, curves (an SVG per
// curve: class "curve", one <polyline> whose points are the curve's), events.
const char* page_head = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>syncfac run status</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.4em}
table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
.up,.back{color:#17692b}.lost{color:#b00020;font-weight:bold}
.charts{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;background:#fff;border:1px solid #ddd;padding:.4em}
figcaption{font-size:.85em;color:#555}
svg polyline{fill:none;stroke-width:1.6}
</style></head><body>
<h1>syncfac: )HTML";

const char* page_body = R"HTML(</h1>
<div id="summary"></div>
<h2>Tasks</h2><table id="tasks"><thead><tr><th>task</th><th>state</th>
<th>for</th><th>detail</th></tr></thead><tbody></tbody></table>
<h2>Curves</h2><div class="charts" id="curves"></div>
<h2>Faults and restarts</h2><table id="events"><thead><tr><th>step</th>
<th>time</th><th>what</th></tr></thead><tbody></tbody></table>
<script id="initial" type="application/json">)HTML";

const char* page_tail = R"HTML(</script>
<script>
"use strict";
const W = 420, H = 180, PAD = 34;
function el(tag, attrs, text) {
  const ns = ["svg", "polyline", "line", "text", "circle"].includes(tag)
    ? "http://www.w3.org/2000/svg" : null;
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(x) {
  if (x === null || x === undefined) return "-";
  return Number.isInteger(x) ? String(x) : Number(x).toPrecision(4);
}
function chart(name, points, color) {
  const fig = el("figure", {"data-curve": name});
  fig.appendChild(el("figcaption", {}, name + " (" + points.length + " points)"));
  const svg = el("svg", {width: W, height: H, class: "curve",
                         viewBox: "0 0 " + W + " " + H});
  const pts = points.filter(p => p[2] !== null);
  if (pts.length > 0) {
    const xs = pts.map(p => p[0]), ys = pts.map(p => p[2]);
    let x0 = Math.min(...xs), x1 = Math.max(...xs);
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y1 = y0 + 1; y0 = y0 - 1; }
    const sx = x => PAD + (x - x0) / (x1 - x0) * (W - PAD - 8);
    const sy = y => H - 20 - (y - y0) / (y1 - y0) * (H - 30);
    svg.appendChild(el("line", {x1: PAD, y1: H - 20, x2: W - 8, y2: H - 20,
                                stroke: "#999"}));
    svg.appendChild(el("line", {x1: PAD, y1: 10, x2: PAD, y2: H - 20,
                                stroke: "#999"}));
    svg.appendChild(el("text", {x: 2, y: 14, "font-size": 10}, fmt(y1)));
    svg.appendChild(el("text", {x: 2, y: H - 22, "font-size": 10}, fmt(y0)));
    svg.appendChild(el("text", {x: PAD, y: H - 6, "font-size": 10}, "step " + x0));
    svg.appendChild(el("text", {x: W - 70, y: H - 6, "font-size": 10}, "step " + x1));
    svg.appendChild(el("polyline", {stroke: color, "data-points": pts.length,
      points: pts.map(p => sx(p[0]).toFixed(1) + "," + sy(p[2]).toFixed(1)).join(" ")}));
    // Few points (test evaluations): mark each.
    if (pts.length <= 60)
      for (const p of pts)
        svg.appendChild(el("circle", {cx: sx(p[0]).toFixed(1),
          cy: sy(p[2]).toFixed(1), r: 2.5, fill: color}));
  }
  fig.appendChild(svg);
  return fig;
}
function render(s) {
  const pct = s.total_steps > 0 ? (100 * s.global_step / s.total_steps).toFixed(1) : "-";
  const last = s.last || {};
  document.getElementById("summary").innerHTML = "";
  const t = el("table", {id: "figures"});
  // The training line's figures come with their table (s.figures): each
  // one the last line has is a row, named by its key, with its help and
  // unit on hover.
  const rows = [["global step", s.global_step + " of " + s.total_steps + " (" + pct + " %)"],
    ["steps/s", fmt(s.steps_per_s)]];
  for (const f of s.figures)
    if (f.key in last)
      rows.push([f.key.replace(/_/g, " "), fmt(last[f.key]),
                 f.help + (f.unit ? " (" + f.unit + ")" : ""), f.key]);
  rows.push(["test loss", fmt(s.test_loss)], ["test accuracy", fmt(s.test_accuracy)],
    ["checkpoints", s.checkpoints.written + (s.checkpoints.age_s >= 0
      ? " (newest " + s.checkpoints.age_s.toFixed(0) + " s ago)" : "")],
    ["running for", (s.now_unix - s.started_unix).toFixed(0) + " s"]);
  for (const r of rows) {
    const tr = el("tr", r[3] ? {"data-figure": r[3]} : {});
    tr.appendChild(el("th", r[2] ? {title: r[2]} : {}, r[0]));
    tr.appendChild(el("td", {}, r[1])); t.appendChild(tr);
  }
  document.getElementById("summary").appendChild(t);
  const tb = document.querySelector("#tasks tbody"); tb.innerHTML = "";
  for (const k of s.tasks) {
    const tr = el("tr", {class: "task", "data-task": k.task, "data-state": k.state});
    tr.appendChild(el("td", {}, k.task));
    tr.appendChild(el("td", {class: k.state}, k.state));
    tr.appendChild(el("td", {}, k.since_s.toFixed(0) + " s"));
    tr.appendChild(el("td", {}, k.detail));
    tb.appendChild(tr);
  }
  const c = document.getElementById("curves"); c.innerHTML = "";
  c.appendChild(chart("loss", s.curves.loss, "#1f77b4"));
  c.appendChild(chart("train_accuracy", s.curves.train_accuracy, "#2ca02c"));
  c.appendChild(chart("test_loss", s.curves.test_loss, "#ff7f0e"));
  c.appendChild(chart("test_accuracy", s.curves.test_accuracy, "#9467bd"));
  const eb = document.querySelector("#events tbody"); eb.innerHTML = "";
  for (const e of s.events.slice().reverse()) {
    const tr = el("tr", {class: "event"});
    tr.appendChild(el("td", {}, e.step));
    tr.appendChild(el("td", {}, new Date(e.unix_time * 1000).toISOString()));
    tr.appendChild(el("td", {}, e.what));
    eb.appendChild(tr);
  }
}
render(JSON.parse(document.getElementById("initial").textContent));
setInterval(() => {
  fetch("/status.json", {cache: "no-store"}).then(r => r.json()).then(render)
    .catch(() => {});
}, 3000);
</script></body></html>
)HTML";

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

} // namespace

std::string status_page(const std::string& title,
                        const std::string& status_json) {
  // Inside <script>, only "</" could end the element early.
  std::string embedded;
  for (size_t i = 0; i < status_json.size(); ++i) {
    if (status_json[i] == '<' && i + 1 < status_json.size()
        && status_json[i + 1] == '/')
      embedded += "<\\";
    else
      embedded += status_json[i];
  }
  return page_head + escape_html(title) + page_body + embedded + page_tail;
}

} // namespace syncfac::observe
