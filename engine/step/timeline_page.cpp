// The timeline page (engine/step/timeline.h): HTML, style and script in one file, no network.
// timeline_html() puts the title at @TITLE@ and the trace's lanes (JSON) at @DATA@:
//   blocks   [{id, name, tokens, length, appends: [[t, tokens, text, length after], ...]}]   by first append
//   programs [{lane, name, events: [[t, name, text], ...], tools: [[t, dur, tool, how it ended], ...]}]
//   steps    [[t, dur, decode, prefill, probe], ...]
//   memory   [[t, what, mode, "block ids"], ...]
//   requests [[begin, end, kind, id, block, reason, generated], ...]
// with times in microseconds since the first event. The DOM it builds is what
// tests/python/test_timeline.py reads in headless Chromium: section.lane.block[data-block]
// [data-tokens][data-length] with its text in .text (what a clear took away shown struck through,
// still there), section.lane.roles[data-events][data-tools] (its tool runs: rect.tool with the
// tool's name in their title), section.lane.steps[data-steps].

namespace chorus {

extern const char* const kTimelinePage;

const char* const kTimelinePage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>chorus timeline: @TITLE@</title>
<style>
  body { font: 13px/1.4 system-ui, sans-serif; margin: 0; background: #f3f4f6; color: #111827; }
  header.top { padding: 10px 16px; background: #1f2937; color: #f9fafb; }
  header.top h1 { font-size: 16px; margin: 0 0 2px; font-weight: 600; }
  #controls { display: flex; gap: 12px; align-items: center; padding: 8px 16px; background: #e5e7eb;
              position: sticky; top: 0; z-index: 2; border-bottom: 1px solid #d1d5db; }
  #time { flex: 1; }
  #now { font-variant-numeric: tabular-nums; min-width: 9em; text-align: right; }
  .lane { display: grid; grid-template-columns: 230px 1fr; border-bottom: 1px solid #e5e7eb; background: #fff; }
  .lane > .label { padding: 6px 10px; border-right: 1px solid #e5e7eb; }
  .lane > .label b { display: block; word-break: break-all; }
  .lane > .label .sub { color: #6b7280; font-variant-numeric: tabular-nums; }
  .lane > .body { padding: 4px 8px; min-width: 0; }
  .lane.roles { background: #fffbeb; }
  .lane.steps { background: #eff6ff; }
  svg.track { width: 100%; display: block; }
  .text { white-space: pre-wrap; font: 12px/1.35 ui-monospace, monospace; max-height: 10em; overflow: auto;
          background: #f9fafb; padding: 4px 6px; border-radius: 3px; margin-top: 3px;
          border-top: 1px solid #e5e7eb; }
  .text .fresh { background: #fde68a; }
  .text .cleared { color: #9ca3af; text-decoration: line-through; border-right: 2px solid #dc2626; }
  .events { font: 12px/1.35 ui-monospace, monospace; max-height: 8em; overflow: auto; margin-top: 3px; }
  .events .ev.future { display: none; }
  .legend span { display: inline-block; margin-right: 10px; }
  .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 3px; vertical-align: -1px; }
  .empty { padding: 16px; color: #6b7280; }
</style>
</head>
<body>
<header class="top"><h1>chorus timeline: @TITLE@</h1><div id="summary"></div></header>
<div id="controls">
  <button id="play" type="button">&#9654; play</button>
  <input id="time" type="range" min="0" max="1000" value="1000" aria-label="time">
  <span id="now"></span>
</div>
<main id="lanes"></main>
<script id="trace-data" type="application/json">@DATA@</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("trace-data").textContent);
const T = Math.max(D.duration_us, 1), W = 1000;
const COLORS = { decode: "#2563eb", prefill: "#16a34a", probe: "#ea580c", memory: "#dc2626", event: "#b45309",
                 tool: "#7c3aed" };
const xOf = t => (t / T) * W;
const msText = t => (t / 1000).toFixed(1) + " ms";
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function track(height) {
  return svgEl("svg", { class: "track", viewBox: `0 0 ${W} ${height}`, preserveAspectRatio: "none",
                        style: `height:${height}px` });
}
function cursor(svg, height) {
  const line = svgEl("line", { y1: 0, y2: height, stroke: "#111827", "stroke-width": 1.5,
                               "vector-effect": "non-scaling-stroke", class: "cursor" });
  svg.append(line);
  return line;
}
function lane(kind, title) {
  const section = el("section", { class: "lane " + kind });
  const label = el("div", { class: "label" });
  const sub = el("span", { class: "sub" });
  label.append(el("b", {}, title), sub);
  const body = el("div", { class: "body" });
  section.append(label, body);
  document.getElementById("lanes").append(section);
  return { section, sub, body };
}

// One lane per block: a tick per append (taller for more tokens), and the text so far.
const blockViews = D.blocks.map(b => {
  const L = lane("block", b.name);
  L.section.dataset.block = b.id;
  L.section.dataset.tokens = b.tokens;
  L.section.dataset.appends = b.appends.length;
  L.section.dataset.length = b.length;
  const H = 26, svg = track(H);
  const most = Math.max(1, ...b.appends.map(a => a[1]));
  for (const [t, n] of b.appends) {
    const h = 5 + (H - 5) * Math.log1p(n) / Math.log1p(most);
    const r = svgEl("rect", { x: xOf(t), y: H - h, width: 2, height: h, fill: n > 1 ? COLORS.prefill : COLORS.decode });
    r.append(svgEl("title"));
    r.lastChild.textContent = `${msText(t)}: ${n} token${n === 1 ? "" : "s"}`;
    svg.append(r);
  }
  const text = el("div", { class: "text" });
  L.body.append(svg, text);
  return { b, L, text, line: cursor(svg, H) };
});

// One lane per program: its roles' events as marks, and the list of them with their text.
const roleViews = D.programs.map(p => {
  const L = lane("roles", p.name + " events");
  L.section.dataset.program = p.lane;
  L.section.dataset.events = p.events.length;
  L.section.dataset.tools = p.tools.length;
  const H = 18, svg = track(H);
  for (const [t, dur, tool, ended] of p.tools) {  // a tool's run in the sandbox: a bar as long as it ran
    const r = svgEl("rect", { x: xOf(t), y: 5, width: Math.max(2, xOf(t + dur) - xOf(t)), height: H - 10,
                               fill: COLORS.tool, class: "tool" });
    r.append(svgEl("title"));
    r.lastChild.textContent = `${msText(t)} tool ${tool}, ${msText(dur)}: ${ended}`;
    svg.append(r);
  }
  for (const [t, name, text] of p.events) {
    const m = svgEl("rect", { x: xOf(t) - 1, y: 2, width: 3, height: H - 4, fill: COLORS.event });
    m.append(svgEl("title"));
    m.lastChild.textContent = `${msText(t)} ${name}: ${text}`;
    svg.append(m);
  }
  const list = el("div", { class: "events" });
  const rows = p.events.map(([t, name, text]) => {
    const row = el("div", { class: "ev" }, `${msText(t).padStart(10)}  ${name}${text ? ": " + text.replace(/\s+/g, " ").slice(0, 120) : ""}`);
    row.dataset.t = t;
    list.append(row);
    return row;
  });
  L.body.append(svg, list);
  return { L, rows, line: cursor(svg, H), count: p.events.length };
});

// The engine's steps beneath: a bar per step, its decode, prefill and probe tokens stacked
// (height: tokens, on a log scale), and a red mark per pause or restore.
const stepView = (() => {
  const L = lane("steps", "engine steps");
  L.section.dataset.steps = D.steps.length;
  const H = 48, svg = track(H);
  const most = Math.max(1, ...D.steps.map(s => s[2] + s[3] + s[4]));
  const scale = n => (H - 4) * Math.log1p(n) / Math.log1p(most);
  for (const [t, dur, decode, prefill, probe] of D.steps) {
    let y = H, total = decode + prefill + probe;
    const w = Math.max(1, xOf(dur));
    for (const [n, color] of [[decode, COLORS.decode], [prefill, COLORS.prefill], [probe, COLORS.probe]]) {
      if (!n) continue;
      const h = scale(total) * n / total;
      y -= h;
      svg.append(svgEl("rect", { x: xOf(t), y, width: w, height: h, fill: color, class: "step" }));
    }
  }
  for (const [t, what, mode, blocks] of D.memory) {
    const m = svgEl("rect", { x: xOf(t) - 1, y: 0, width: 3, height: 8, fill: COLORS.memory, class: "memory" });
    m.append(svgEl("title"));
    m.lastChild.textContent = `${msText(t)} ${what}${mode ? " (" + mode + ")" : ""}: blocks ${blocks}`;
    svg.append(m);
  }
  const legend = el("div", { class: "legend" });
  for (const k of ["decode", "prefill", "probe", "memory"]) {
    const s = el("span");
    s.append(el("i", { style: "background:" + COLORS[k] }), document.createTextNode(k === "memory" ? "pause/restore" : k + " tokens"));
    legend.append(s);
  }
  L.body.append(svg, legend);
  const tokens = D.steps.reduce((a, s) => a + s[2] + s[3] + s[4], 0);
  L.sub.textContent = `${D.steps.length} steps, ${tokens} tokens`;
  return { L, line: cursor(svg, H) };
})();

if (!D.blocks.length && !D.steps.length)
  document.getElementById("lanes").append(el("div", { class: "empty" }, "This trace holds no steps and no blocks."));

const totalTokens = D.blocks.reduce((a, b) => a + b.tokens, 0);
document.getElementById("summary").textContent =
  `${msText(T)}, ${D.steps.length} steps, ${D.blocks.length} blocks with ${totalTokens} tokens, ` +
  `${D.programs.reduce((a, p) => a + p.events.length, 0)} role events, ${D.requests.length} requests` +
  (D.dropped ? ` (${D.dropped} older events were dropped by the recorder)` : "");

// The page at time `now`: each block's text as it stood then, the newest piece highlighted, and
// what clears took away before it struck through (an append that leaves no more than it brought
// found the block empty).
function show(now) {
  const fresh = T * 0.02;
  for (const v of blockViews) {
    let cleared = "", old = "", recent = "", shown = 0, holds = 0;
    for (const [t, n, text, length] of v.b.appends) {
      if (t > now) break;
      if (length <= n && (old || recent)) { cleared += old + recent; old = recent = ""; }
      shown += n;
      holds = length;
      if (t >= now - fresh) recent += text; else old += text;
    }
    const parts = [];
    if (cleared) parts.push(el("span", { class: "cleared", title: "cleared" }, cleared));
    parts.push(document.createTextNode(old), el("span", { class: "fresh" }, recent));
    v.text.replaceChildren(...parts);
    v.text.scrollTop = v.text.scrollHeight;
    v.L.sub.textContent = `${shown} of ${v.b.tokens} tokens` + (holds < shown ? `, holding ${holds}` : "");
    v.L.section.dataset.shown = shown;
  }
  for (const v of roleViews) {
    let seen = 0;
    for (const row of v.rows) {
      const future = Number(row.dataset.t) > now;
      row.classList.toggle("future", future);
      if (!future) ++seen;
    }
    v.L.sub.textContent = `${seen} of ${v.count}`;
  }
  for (const v of [...blockViews, ...roleViews, stepView])
    for (const k of ["x1", "x2"]) v.line.setAttribute(k, xOf(now));
  document.getElementById("now").textContent = `${msText(now)} of ${msText(T)}`;
}

const slider = document.getElementById("time");
slider.addEventListener("input", () => show((slider.value / 1000) * T));
let playing = null;
document.getElementById("play").addEventListener("click", () => {
  if (playing) { cancelAnimationFrame(playing); playing = null; return; }
  const start = performance.now(), from = slider.value >= 1000 ? 0 : Number(slider.value);
  const seconds = 10;  // the whole trace in ten seconds
  const frame = () => {
    const v = Math.min(1000, from + ((performance.now() - start) / (seconds * 1000)) * 1000);
    slider.value = v;
    show((v / 1000) * T);
    playing = v < 1000 ? requestAnimationFrame(frame) : null;
  };
  playing = requestAnimationFrame(frame);
});
show(T);
document.body.dataset.ready = "1";
</script>
</body>
</html>
)PAGE";

}  // namespace chorus
