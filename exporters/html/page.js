// torchlens-explore self-contained page: draws precomputed layouts as SVG. Every name from the trace
// is set with textContent (never parsed as markup).
"use strict";
(async function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) { if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f); else e.setAttribute(k, v); }
    for (const c of kids) if (c != null) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  function sv(tag, attrs) { const e = document.createElementNS(SVGNS, tag); for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v); return e; }

  document.body.append(el("div", {id: "app"},
    el("header", {}, el("h1", {id: "title"}), el("span", {class: "counts", id: "counts"})),
    el("div", {id: "banner"}),
    el("aside", {id: "left"},
      el("div", {}, el("label", {for: "search"}, "Search ops and modules"), el("input", {id: "search", type: "search", placeholder: "label, kind, module path, class", autocomplete: "off"})),
      el("div", {id: "hits"}),
      el("div", {}, el("label", {for: "overlay"}, "Overlay (colour scale · module roll-up)"), el("select", {id: "overlay"}),
        el("div", {class: "row"}, el("select", {id: "scale", title: "colour scale"}), el("select", {id: "rollup", title: "module roll-up"}))),
      el("div", {id: "legend"})),
    el("div", {id: "main"}, el("div", {id: "crumbs"}),
      el("div", {id: "tools"}, el("button", {id: "fit", title: "zoom to fit"}, "Fit"), el("button", {id: "reset", title: "default view"}, "Default view")),
      (() => { const s = sv("svg", {id: "canvas"}); return s; })(), el("div", {id: "status"})),
    el("aside", {id: "right"}, el("p", {class: "hint"}, "Click a box to inspect it; double-click a module to expand it; click a frame header to collapse it.")),
    el("div", {id: "err"})));

  let D;
  try {
    const raw = atob($("tlx-data").textContent.trim());
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    D = JSON.parse(await new Response(stream).text());
  } catch (e) {
    $("err").style.display = "block";
    $("err").textContent = "This browser cannot unpack the page data (needs DecompressionStream: Chromium 80+, Firefox 113+, Safari 16.4+): " + e;
    return;
  }
  const O = D.ops, N = O.label.length, opIdx = new Map(O.label.map((l, i) => [l, i]));
  const children = Array.from({length: N}, () => []);
  O.parents.forEach((ps, i) => ps.forEach(([p]) => children[p].push(i)));
  const hay = O.label.map((l, i) => (l + "\t" + O.kind[i] + "\t" + O.module[i] + "\t" + O.func[i]).toLowerCase());
  const modNames = Object.keys(D.modules);
  const modHay = modNames.map((a) => (a + " " + D.modules[a][0]).toLowerCase());
  const viewByKey = new Map(D.views.map((v, i) => [v.expanded.join("\n"), i]));
  const fmt = (v) => {
    if (v == null) return "n/a"; if (typeof v === "string") return v;
    const a = Math.abs(v);
    for (const [d, s] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) if (a >= d) return (v / d).toPrecision(3).replace(/\.?0+$/, "") + s;
    return Number.isInteger(v) ? String(v) : v.toPrecision(3);
  };
  function parentOf(a) { let p = a; while (p.includes(".")) { p = p.slice(0, p.lastIndexOf(".")); if (p in D.modules) return p; } return a === "" ? null : ""; }
  function chain(a) { const out = []; for (let x = a; x != null; x = parentOf(x)) out.push(x); return out; }
  const within = (a, outer) => outer === "" || a === outer || a.startsWith(outer + ".");

  $("title").textContent = D.title;
  $("counts").textContent = `${D.model_class} · ${D.counts.ops} ops · ${D.counts.edges} edges · ${D.counts.modules} modules · ${fmt(D.counts.params)} parameters`;
  const banner = $("banner"); banner.className = D.ladder;
  banner.append(el("b", {}, D.ladder), " " + D.banner.replace(D.ladder + ": ", ""));

  // overlay controls
  const ovSel = $("overlay"), scSel = $("scale"), ruSel = $("rollup");
  ovSel.append(el("option", {value: "-1"}, "none (colour by op family)"));
  D.overlays.forEach((o, i) => ovSel.append(el("option", {value: String(i)}, o.title)));
  for (const s of ["linear", "log"]) scSel.append(el("option", {value: s}, s));
  for (const s of ["sum", "max"]) ruSel.append(el("option", {value: s}, s));
  const PAL = ["#fff7bc", "#fee391", "#fec44f", "#fe9929", "#ec7014", "#cc4c02", "#8c2d04"];
  const CLAIM = {OBSERVED: "#c8e6c9", CORROBORATED: "#bbdefb", HYPOTHESIS: "#fff59d", REFUTED: "#ffcdd2"};
  const hex = (c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
  function palAt(t) {
    t = Math.min(1, Math.max(0, t)) * (PAL.length - 1); const i = Math.min(Math.floor(t), PAL.length - 2), f = t - i;
    const a = hex(PAL[i]), b = hex(PAL[i + 1]);
    return "#" + a.map((x, j) => Math.round(x + (b[j] - x) * f).toString(16).padStart(2, "0")).join("");
  }
  const ink = (c) => { const [r, g, b] = hex(c); return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#000" : "#fff"; };

  // state
  let cur = -1, sel = null, T = {k: 1, x: 0, y: 0}, nodeOfOp = new Map(), nodeEls = new Map(), nodeVal = new Map();
  let heads = [];  // the open frames' header texts, kept at the window's left edge while their frame reaches past it
  const svg = $("canvas");
  const defs = sv("defs");
  D.edge_colors.forEach((c, i) => {
    const m = sv("marker", {id: "arr" + i, viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "6", markerHeight: "6", markerUnits: "userSpaceOnUse", orient: "auto"});
    m.append(sv("path", {d: "M0,0 L10,5 L0,10 z", fill: c})); defs.append(m);
  });
  const vp = sv("g", {id: "viewport"});
  svg.append(defs, vp);

  function nodeValue(n, ov, how) {
    if (n[1] === "op") return ov.values[opIdx.get(n[0])];
    if (n[1] === "module" && n[7] in ov.modules) return ov.modules[n[7]];
    const vals = [];
    const rs = n[1] === "io" && !n[9].length ? [[opIdx.get(n[0]), opIdx.get(n[0])]] : n[9];
    for (const [a, b] of rs) for (let i = a; i <= b; i++) { const v = ov.values[i]; if (v != null) vals.push(v); }
    if (!vals.length) return null;
    if (ov.categorical) return vals.every((v) => v === vals[0]) ? vals[0] : "mixed";
    if (how !== "sum") return Math.max(...vals);
    const total = vals.reduce((s, v) => s + v, 0);  // a folded run "xN": per repetition (exporters.overlays)
    return n[1] === "folded" && n[8] > 1 ? total / n[8] : total;
  }

  function paint() {
    const oi = +ovSel.value, view = D.views[cur], legend = $("legend");
    legend.replaceChildren(); nodeVal.clear();
    if (oi < 0) {
      for (const n of view.nodes) { const g = nodeEls.get(n[0]); g.firstChild.setAttribute("fill", n[10]); g.lastChild.setAttribute("fill", "#000"); }
      return;
    }
    const ov = D.overlays[oi], how = ruSel.value, log = scSel.value === "log";
    for (const n of view.nodes) nodeVal.set(n[0], nodeValue(n, ov, how));
    if (ov.categorical) {
      for (const n of view.nodes) { const v = nodeVal.get(n[0]), c = CLAIM[v] || "#eeeeee"; const g = nodeEls.get(n[0]); g.firstChild.setAttribute("fill", c); g.lastChild.setAttribute("fill", "#000"); }
      legend.append(el("b", {}, ov.title));
      for (const [k, c] of Object.entries(CLAIM)) legend.append(el("div", {class: "cat"}, el("span", {class: "sw", style: "background:" + c}), k));
      return;
    }
    const nums = [...nodeVal.values()].filter((v) => typeof v === "number" && isFinite(v) && (!log || v > 0));
    let lo = nums.length ? Math.min(...nums) : 0, hi = nums.length ? Math.max(...nums) : 0;
    const pos = (v) => {
      if (typeof v !== "number" || !isFinite(v) || (log && v <= 0)) return null;
      const [a, b, x] = log ? [Math.log10(lo), Math.log10(hi), Math.log10(v)] : [lo, hi, v];
      return b === a ? 0.5 : (x - a) / (b - a);
    };
    for (const n of view.nodes) {
      const t = pos(nodeVal.get(n[0])), c = t == null ? "#eeeeee" : palAt(t), g = nodeEls.get(n[0]);
      g.firstChild.setAttribute("fill", c); g.lastChild.setAttribute("fill", ink(c));
    }
    const folded = how === "sum" && view.nodes.some((n) => n[1] === "folded" && n[8] > 1);
    legend.append(el("b", {}, ov.title), el("div", {class: "hint"}, `boxes in this view · modules: ${how} · ${scSel.value} scale` + (folded ? " · folded runs: per repetition" : "")));
    const bar = el("div", {class: "bar"}); for (let i = 0; i < 12; i++) bar.append(el("span", {style: "background:" + palAt(i / 11)}));
    const tick = (t) => fmt(log && lo > 0 ? Math.pow(10, Math.log10(lo) + t * (Math.log10(hi) - Math.log10(lo))) : lo + t * (hi - lo));
    legend.append(bar, el("div", {class: "ticks"}, el("span", {}, tick(0)), el("span", {}, tick(0.5)), el("span", {}, tick(1))),
      el("div", {class: "cat"}, el("span", {class: "sw", style: "background:#eeeeee"}), "no value" + (log ? " (or ≤ 0)" : "")));
  }

  function setView(vi) {
    if (vi === cur) return;
    cur = vi; const view = D.views[vi];
    vp.replaceChildren(); nodeEls.clear(); nodeOfOp = new Map(); heads = [];
    for (const f of view.frames) {
      const [addr, label, depth, x0, y0, x1, y1] = f;
      const g = sv("g", {class: "frame"});
      g.append(sv("rect", {x: x0, y: y0, width: x1 - x0, height: y1 - y0, rx: 6, fill: ["#fbfbfb", "#f3f6fa", "#eef2f7", "#e8eef5"][depth % 4]}));
      const t = sv("text", {x: x0 + 6, y: y0 + 13, class: "hdr"}); t.textContent = "▾ " + label; t.style.pointerEvents = "auto";
      t.addEventListener("click", (e) => { e.stopPropagation(); collapse(addr); });
      const tip = sv("title"); tip.textContent = "collapse " + (addr || "(model)"); t.append(tip);
      g.append(t); vp.append(g); heads.push({t, home: x0 + 6, room: x1 - 6 - D.header_char_w * (label.length + 2)});
    }
    for (const e of view.edges) {
      const p = e[2]; let x = p[0], y = p[1]; const pts = [x + "," + y];  // then y, x, y, ... in turn
      for (let i = 2; i < p.length; i++) { if (i % 2) x = p[i]; else y = p[i]; pts.push(x + "," + y); }
      vp.append(sv("polyline", {points: pts.join(" "), fill: "none", stroke: D.edge_colors[e[3]], "stroke-width": 1, "stroke-dasharray": e[3] === 1 ? "3 2" : "", "marker-end": `url(#arr${e[3]})`}));
    }
    for (const n of view.nodes) {
      const [id, kind, label, x, y, w, h] = n;
      const g = sv("g", {class: "node", "data-id": id, "data-kind": kind});
      g.append(sv("rect", {x: x - w / 2, y: y - h / 2, width: w, height: h, rx: kind === "op" || kind === "io" ? 3 : 5, fill: n[10]}));
      const t = sv("text", {x, y, "text-anchor": "middle", "dominant-baseline": "central"}); t.textContent = label; g.append(t);
      g.addEventListener("click", (ev) => { ev.stopPropagation(); if (kind === "op") selectOp(opIdx.get(id), false); else selectNode(id); });
      if (kind === "module") g.addEventListener("dblclick", (ev) => { ev.stopPropagation(); expand(n[7]); });
      vp.append(g); nodeEls.set(id, g);
      if (kind === "op") nodeOfOp.set(opIdx.get(id), id);
      else { for (const [a, b] of n[9]) for (let i = a; i <= b; i++) nodeOfOp.set(i, id); if (kind === "io" && opIdx.has(id)) nodeOfOp.set(opIdx.get(id), id); }
      if (kind === "io" && n[11].length) for (const m of n[11]) if (opIdx.has(m)) nodeOfOp.set(opIdx.get(m), id);
    }
    crumbs(); paint(); status();
  }

  function crumbs() {
    const c = $("crumbs"); c.replaceChildren("Open: ");
    const exp = D.views[cur].expanded.filter((a) => a !== "");
    const deepest = exp.filter((a) => !exp.some((b) => b !== a && within(b, a)));
    const path = deepest.length === 1 ? chain(deepest[0]).reverse() : [""];
    path.forEach((a, i) => {
      if (i) c.append(" › ");
      const name = a === "" ? D.model_class : a.slice(a.lastIndexOf(".") + 1);
      c.append(el("a", {title: "collapse below " + (a || "the model"), on: {click: () => collapseBelow(a)}}, name));
    });
    if (deepest.length > 1) c.append(` (${deepest.length} modules open)`);
  }
  function status(extra) {
    const v = D.views[cur];
    $("status").textContent = `${v.nodes.length} boxes · ${v.edges.length} edges · view ${cur + 1} of ${D.views.length} · zoom ${Math.round(T.k * 100)}%` + (extra ? " · " + extra : "");
  }

  function go(key, ...fallbacks) {
    for (const k of [key, ...fallbacks]) { const vi = viewByKey.get([...new Set(k)].sort().join("\n")); if (vi != null) return vi; }
    return null;
  }
  function expand(a) {
    const ex = D.views[cur].expanded, def = D.views[0].expanded;
    const vi = go([...ex, ...chain(a)], [...def, ...chain(a)]);
    if (vi == null) { status("“" + a + "” has nothing more to open"); return; }
    const inspected = sel && (sel.module === a || (sel.node != null && (D.views[cur].nodes.find((n) => n[0] === sel.node) || [])[7] === a));
    setView(vi); focusFrame(a); status("expanded " + a);
    if (inspected) showOpenModule(a);
  }
  function collapse(a) {
    const ex = D.views[cur].expanded, def = D.views[0].expanded, p = parentOf(a);
    const vi = go(ex.filter((x) => !within(x, a)), p == null ? [] : [...def.filter((x) => !within(x, a)), ...chain(p)], def.filter((x) => !within(x, a)));
    if (vi == null) return; setView(vi); fit(); status("collapsed " + (a || "the model"));
  }
  function collapseBelow(a) {
    const def = D.views[0].expanded;
    const vi = go([...def, ...chain(a)], def); if (vi != null) { setView(vi); if (a) focusFrame(a); else fit(); }
  }

  // pan and zoom
  // a frame shown before it has a size (an iframe in a notebook page still being laid out) fits when it
  // gets one: a fit of a zero-size canvas is a zero zoom (issue 36: blank, "zoom 0%")
  // and fits again when its size changes until the user pans or zooms
  let pending = null, auto = null;
  const sized = () => { const r = svg.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  new ResizeObserver(() => { const f = pending || auto; if (f && sized()) { pending = null; f(); } }).observe(svg);
  function apply() { vp.setAttribute("transform", `translate(${T.x},${T.y}) scale(${T.k})`); svg.classList.toggle("small", T.k * 11 < 4.5); slideHeads(); status(); }
  function slideHeads() {  // a frame reaching past the window's left edge keeps its header in view (never past its own room)
    const left = -T.x / T.k + 6;
    for (const h of heads) { const x = Math.max(h.home, Math.min(left, h.room)); if (h.x !== x) { h.x = x; h.t.setAttribute("x", x); } }
  }
  function fit() { auto = fit; if (!sized()) { pending = fit; return; } const v = D.views[cur], r = svg.getBoundingClientRect(); T.k = Math.min(r.width / v.w, r.height / v.h, 1.5); T.x = (r.width - v.w * T.k) / 2; T.y = Math.max(0, (r.height - v.h * T.k) / 2); apply(); }
  function start() {  // fit when labels stay legible, else the top of the graph at a readable zoom
    if (!sized()) { pending = start; return; }
    fit(); auto = start; if (T.k >= 0.55) return;
    const v = D.views[cur], r = svg.getBoundingClientRect(); T.k = Math.min(0.8, r.width / v.w); T.x = (r.width - v.w * T.k) / 2; T.y = 10; apply();
  }
  function show(x0, y0, x1, y1, maxK) {
    auto = null; const r = svg.getBoundingClientRect(); T.k = Math.min(r.width / (x1 - x0 + 40), r.height / (y1 - y0 + 40), maxK);
    T.x = r.width / 2 - (x0 + x1) / 2 * T.k; T.y = r.height / 2 - (y0 + y1) / 2 * T.k;
    T.x = Math.max(T.x, 20 - x0 * T.k); T.y = Math.max(T.y, 20 - y0 * T.k);  // its header corner is never cut off
    apply();
  }
  function focusFrame(a) { const f = D.views[cur].frames.find((f) => f[0] === a); if (f) show(f[3], f[4], f[5], f[6], 1.2); else fit(); }
  function centerOn(id) {
    const n = D.views[cur].nodes.find((n) => n[0] === id); if (!n) return;
    auto = null; const r = svg.getBoundingClientRect(); T.k = Math.max(T.k, 0.9); T.x = r.width / 2 - n[3] * T.k; T.y = r.height / 2 - n[4] * T.k; apply();
  }
  svg.addEventListener("wheel", (e) => {
    e.preventDefault(); auto = null; const r = svg.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
    const k2 = Math.min(8, Math.max(0.02, T.k * Math.exp(-e.deltaY * 0.0015)));
    T.x = mx - (mx - T.x) * k2 / T.k; T.y = my - (my - T.y) * k2 / T.k; T.k = k2; apply();
  }, {passive: false});
  let drag = null, moved = false;
  svg.addEventListener("pointerdown", (e) => { drag = [e.clientX, e.clientY, T.x, T.y]; moved = false; });
  window.addEventListener("pointermove", (e) => { if (!drag) return; const dx = e.clientX - drag[0], dy = e.clientY - drag[1]; if (Math.abs(dx) + Math.abs(dy) > 3) { moved = true; auto = null; } T.x = drag[2] + dx; T.y = drag[3] + dy; if (moved) apply(); });
  window.addEventListener("pointerup", () => { drag = null; });
  svg.addEventListener("click", () => { if (!moved) clearSel(); });
  window.addEventListener("keydown", (e) => { if (e.key === "Escape") clearSel(); });
  $("fit").addEventListener("click", fit);
  $("reset").addEventListener("click", () => { setView(0); start(); });

  // selection and inspector
  function mark(id, nb) {
    for (const g of nodeEls.values()) g.classList.remove("sel", "nb");
    for (const x of nb) { const g = nodeEls.get(x); if (g && x !== id) g.classList.add("nb"); }
    const g = nodeEls.get(id); if (g) g.classList.add("sel");
  }
  function clearSel() { sel = null; mark(null, []); $("right").replaceChildren(el("p", {class: "hint"}, "Nothing selected. Click a box, or search on the left.")); setHash(""); }
  function setHash(h) { try { history.replaceState(null, "", h ? "#" + h : location.pathname + location.search); } catch (e) { /* srcdoc or sandboxed frame */ } }
  const opLink = (i) => el("a", {on: {click: () => goOp(i)}}, O.label[i]);
  const row = (k, ...v) => el("tr", {}, el("td", {}, k), el("td", {}, ...v));
  function overlayRow(v) { const oi = +ovSel.value; return oi < 0 ? null : row(D.overlays[oi].title, fmt(v)); }
  // an op's attributes as "key: value" lines; a recorded Python dict such as {'param': 'w'} reads "w (param)"
  function attrText(v) {
    if (Array.isArray(v)) return v.length ? v.map(attrText).join(", ") : "none";
    if (v && typeof v === "object") return Object.entries(v).map(([k, x]) => k + "=" + attrText(x)).join(", ") || "none";
    const s = String(v), m = /^\{'(\w+)': '?([^']*)'?\}$/.exec(s);
    if (m) return m[1] === "edge" ? "input " + m[2] : m[2] + " (" + m[1] + ")";
    return s === "{}" || s === "()" || s === "[]" ? "none" : s;
  }
  function attrTable(a, func) {
    const keys = Object.keys(a).filter((k) => !(k === "call" && a[k] === func));
    if (!keys.length) return "none";
    return el("div", {class: "attrs"}, ...keys.map((k) => el("div", {}, el("span", {class: "k"}, k + ": "), attrText(a[k]))));
  }
  function selectOp(i, center) {
    sel = {op: i}; const id = nodeOfOp.get(i);
    const nb = [...O.parents[i].map(([p]) => nodeOfOp.get(p)), ...children[i].map((c) => nodeOfOp.get(c))].filter(Boolean);
    mark(id, nb); if (center && id) centerOn(id);
    const list = (xs) => { const s = el("span"); xs.forEach((x, j) => { if (j) s.append(", "); s.append(x); }); return xs.length ? s : "none"; };
    const parents = list(O.parents[i].map(([p, pos]) => { const s = el("span"); s.append(opLink(p), ` (${pos}: ${O.shape[p] || "?"} ${O.dtype[p]})`); return s; }));
    const attrs = attrTable(O.attrs[i], O.func[i]);
    const ov = +ovSel.value;
    $("right").replaceChildren(el("h2", {}, O.label[i]), el("table", {},
      row("op", O.kind[i]), row("function", O.func[i]), row("output shape", O.shape[i] || "none"), row("dtype", O.dtype[i] || "none"),
      row("module", O.module[i] ? el("a", {on: {click: () => expand(O.module[i])}}, O.module[i]) : "(top level)"),
      row("inputs", parents), row("used by", list(children[i].map(opLink))),
      row("parameters", O.params[i].length ? O.params[i].join(", ") : "none"),
      row("source", O.source[i] || "not recorded"), row("attributes", attrs),
      O.io[i] ? row("io path", O.io[i]) : null,
      ov < 0 ? null : row(D.overlays[ov].title, fmt(D.overlays[ov].values[i])),
      id && id !== O.label[i] ? row("drawn in", id) : null));
    setHash("op=" + encodeURIComponent(O.label[i]));
  }
  function selectNode(id) {
    const n = D.views[cur].nodes.find((n) => n[0] === id); if (!n) return;
    if (n[1] === "io" && opIdx.has(id) && !n[11].length) return selectOp(opIdx.get(id), false);
    sel = {node: id}; const a = n[7], m = D.modules[a];
    let count = 0; for (const [x, y] of n[9]) count += y - x + 1;
    mark(id, []);
    const ov = +ovSel.value;
    const rows = [row("kind", n[1] === "io" ? "model inputs/outputs" : "module (collapsed box)")];
    if (m) rows.push(row("module", a || "(model)"), row("class", m[0]), row("parameters", fmt(m[1])), row("calls", String(m[2])),
      row("own parameters", m[3].length ? m[3].join(", ") : "none"));
    rows.push(row("ops inside", String(count)));
    if (n[11].length) rows.push(row("members", n[11].join(", ")));
    if (ov >= 0) rows.push(row(D.overlays[ov].title + (D.overlays[ov].categorical ? "" : ` (${ruSel.value})`), fmt(nodeVal.get(id))));
    $("right").replaceChildren(el("h2", {}, n[2]), el("table", {}, ...rows),
      n[1] === "module" ? el("button", {id: "expand-btn", on: {click: () => expand(a)}}, "Expand") : null);
  }
  function showOpenModule(a) {  // a module drawn as an open frame (after Expand): no "collapsed", a Collapse button
    const m = D.modules[a]; if (!m) return;
    sel = {module: a}; mark(null, []);
    $("right").replaceChildren(el("h2", {}, (a.slice(a.lastIndexOf(".") + 1) || D.model_class) + ": " + m[0]), el("table", {},
      row("kind", "module (expanded: its frame is drawn)"), row("module", a || "(model)"), row("class", m[0]),
      row("parameters", fmt(m[1])), row("calls", String(m[2])), row("own parameters", m[3].length ? m[3].join(", ") : "none")),
      el("button", {id: "collapse-btn", on: {click: () => { collapse(a); clearSel(); }}}, "Collapse"));
  }
  function goOp(i) { const [vi, id] = D.where[i]; setView(vi); selectOp(i, true); }

  // search: the ranking of exporters/search_terms (its alias table comes in the data): the exact
  // label, exact names, aliases and whole words, substrings, then module paths; ops before modules on a tie
  const hits = $("hits"), ALIAS = D.search_aliases || {};
  const WORD = /[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+/g;
  function wordsOf(name) {
    const out = new Set();
    for (const part of name.split(/[._\s:]+/)) if (part) { out.add(part.toLowerCase()); for (const w of part.match(WORD) || []) out.add(w.toLowerCase()); }
    return out;
  }
  function contains(text, q) {  // q in text without cutting a number (search_terms.contains)
    const digit = (c) => c >= "0" && c <= "9";
    for (let at = text.indexOf(q); at >= 0; at = text.indexOf(q, at + 1)) {
      const end = at + q.length;
      const cutAfter = digit(q[q.length - 1]) && end < text.length && digit(text[end]);
      const cutBefore = digit(q[0]) && at > 0 && digit(text[at - 1]);
      if (!cutAfter && !cutBefore) return true;
    }
    return false;
  }
  function rank(q, exact, names, path) {  // [tier, coverage] or null
    names = names.filter(Boolean);
    const low = names.map((n) => n.toLowerCase()), alias = (ALIAS[q] || []).filter((t) => t !== q);
    if (exact.toLowerCase() === q) return [0, 1];
    if (low.includes(q)) return [1, 1];
    if (alias.some((t) => low.includes(t))) return [2, 1];
    let best = null;
    const better = (tier, cover) => { if (!best || tier < best[0] || (tier === best[0] && cover > best[1])) best = [tier, cover]; };
    names.forEach((n, i) => { if (wordsOf(n).has(q)) better(2, q.length / low[i].length); });
    if (best) return best;
    for (const l of [exact.toLowerCase(), ...low]) if (contains(l, q)) better(3, q.length / l.length);
    if (!best) for (const t of alias) for (const l of low) if (t.length >= 3 && l.includes(t)) better(4, t.length / l.length);
    if (!best && path && contains(path.toLowerCase(), q)) best = [5, q.length / path.length];
    return best;
  }
  function search() {
    const q = $("search").value.trim().toLowerCase(); hits.replaceChildren();
    if (!q) { hits.append(el("div", {class: "none"}, "Type to search " + N + " ops and " + modNames.length + " modules.")); return; }
    const wanted = [q, ...(ALIAS[q] || [])], found = [];
    modNames.forEach((a, j) => {
      if (!a || !wanted.some((t) => modHay[j].includes(t))) return;
      const r = rank(q, a, [a.split(".").pop(), D.modules[a][0]], a);
      if (r) found.push([r, 1, j]);
    });
    for (let i = 0; i < N; i++) {
      if (!wanted.some((t) => hay[i].includes(t))) continue;
      const r = rank(q, O.label[i], [O.kind[i], String(O.func[i] || "").split(".").pop()], O.module[i] || "");
      if (r) found.push([r, 0, i]);
    }
    found.sort((x, y) => x[0][0] - y[0][0] || y[0][1] - x[0][1] || x[1] - y[1] || x[2] - y[2]);
    const LIMIT = 400;
    for (const [, isMod, j] of found.slice(0, LIMIT)) {
      if (isMod) {  // its own name and class first, whole; the path after it (cut at the end when long)
        const a = modNames[j];
        hits.append(el("div", {class: "hit mod", title: a + ": " + D.modules[a][0], on: {click: () => { expand(a); hits.querySelectorAll(".on").forEach((x) => x.classList.remove("on")); }}},
          a.split(".").pop() + ": " + D.modules[a][0] + " ", el("span", {class: "path"}, "module · " + a)));
      } else {
        hits.append(el("div", {class: "hit op", "data-label": O.label[j], on: {click: () => goOp(j)}}, O.label[j] + " ", el("span", {class: "path"}, O.kind[j] + " · " + (O.module[j] || "(top level)"))));
      }
    }
    if (!found.length) hits.append(el("div", {class: "none"}, "Nothing matches “" + $("search").value + "”."));
    else if (found.length > LIMIT) hits.prepend(el("div", {class: "none"}, `${found.length} hits (first ${LIMIT} listed)`));
  }
  $("search").addEventListener("input", search);
  $("search").addEventListener("keydown", (e) => { if (e.key === "Enter") { const h = hits.querySelector(".hit"); if (h) h.click(); } });
  for (const s of [ovSel, scSel, ruSel]) s.addEventListener("change", () => { paint(); if (sel && sel.op != null) selectOp(sel.op, false); else if (sel && sel.module != null) showOpenModule(sel.module); else if (sel) selectNode(sel.node); });

  const m = /^#op=(.+)$/.exec(location.hash);
  setView(0); start(); search(); clearSel();
  if (m && opIdx.has(decodeURIComponent(m[1]))) goOp(opIdx.get(decodeURIComponent(m[1])));
  document.body.setAttribute("data-ready", "1");
})();
