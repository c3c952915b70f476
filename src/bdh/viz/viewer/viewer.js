/* BDH viewer: draws the document written by bdh.viz.export (embedded as JSON in #bdh-data).
   Plain JavaScript, no libraries. State = (layer, token); every panel redraws from it. */
(function () {
  "use strict";
  var V = JSON.parse(document.getElementById("bdh-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var L = V.meta.layers, T = V.tokens.length;
  var isBoard = V.kind === "boardpath" || V.kind === "sudoku";
  var S = V.board_size || 0;
  var state = { layer: L - 1, token: defaultToken() };

  function defaultToken() {
    if (V.kind === "boardpath") { var e = V.tokens.indexOf(3); return e >= 0 ? e : 0; }
    if (V.kind === "sudoku") { var b = V.tokens.indexOf(0); return b >= 0 ? b : 0; }
    return T - 1;
  }

  // ------------------------------------------------------------ small helpers
  function el(tag, attrs, parent, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) { if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]); }
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function h(tag, cls, parent, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function fmt(v, d) { return Number(v).toFixed(d === undefined ? 3 : d); }
  function label(t) { return V.labels[t]; }
  function vocabLabel(i) { return V.vocab && V.vocab[String(i)] !== undefined ? V.vocab[String(i)] : String(i); }
  // white -> colour ramp for v in [0, 1]
  function ramp(rgb, v) {
    v = Math.max(0, Math.min(1, v));
    var r = Math.round(255 + (rgb[0] - 255) * v), g = Math.round(255 + (rgb[1] - 255) * v), b = Math.round(255 + (rgb[2] - 255) * v);
    return [r, g, b];
  }
  function css(c) { return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; }
  var BLUE = [31, 111, 235], ORANGE = [232, 89, 12], GREY = [120, 120, 120];

  // ------------------------------------------------------------ header, facts, controls
  function header() {
    document.getElementById("title").textContent = V.title;
    document.getElementById("source").textContent = V.source || "";
    var m = V.meta, tbl = document.getElementById("facts");
    var rows = [
      ["parameters", m.num_params.toLocaleString("en-US")],
      ["neurons n (per head N x heads)", m.n + " (" + m.N + " x " + m.heads + ")"],
      ["embedding D", m.D], ["layers", m.layers], ["vocabulary", m.vocab_size],
      ["state size per layer (n D)", m.state_size.toLocaleString("en-US")],
      ["attention", m.causal ? "causal" : "bidirectional"],
      ["input", V.kind + ", " + T + " tokens" + (S ? " (" + S + " x " + S + " board)" : "")],
      ["hub graph", V.graph.nodes.length + " hubs, " + V.graph.edges.length + " edges; " + V.graph.rule]
    ];
    var cfg = m.config;
    Object.keys(cfg).forEach(function (k) { rows.push(["config." + k, cfg[k] === null ? "null" : JSON.stringify(cfg[k])]); });
    rows.forEach(function (r) {
      var tr = h("tr", "", tbl);
      h("td", "", tr, r[0]); h("td", "", tr, String(r[1]));
    });
    var ls = document.getElementById("layer"), ts = document.getElementById("token");
    ls.max = String(L - 1); ls.value = String(state.layer);
    ts.max = String(T - 1); ts.value = String(state.token);
    ls.addEventListener("input", function () { setLayer(parseInt(ls.value, 10)); });
    ts.addEventListener("input", function () { setToken(parseInt(ts.value, 10)); });
    document.addEventListener("keydown", function (ev) {
      if (ev.target && ev.target.tagName === "INPUT") return;
      if (ev.key === "ArrowUp") { setLayer(Math.min(L - 1, state.layer + 1)); ev.preventDefault(); }
      else if (ev.key === "ArrowDown") { setLayer(Math.max(0, state.layer - 1)); ev.preventDefault(); }
      else if (ev.key === "ArrowRight") { setToken(Math.min(T - 1, state.token + 1)); ev.preventDefault(); }
      else if (ev.key === "ArrowLeft") { setToken(Math.max(0, state.token - 1)); ev.preventDefault(); }
    });
  }
  function setLayer(l) { if (l >= 0 && l < L) { state.layer = l; document.getElementById("layer").value = String(l); draw(); } }
  function setToken(t) { if (t >= 0 && t < T) { state.token = t; document.getElementById("token").value = String(t); draw(); } }

  // ------------------------------------------------------------ input: token strip or board
  var inputCells = [];
  function buildInput() {
    var box = document.getElementById("tokens");
    if (isBoard) {
      document.getElementById("input-note").textContent = "(" + S + " x " + S + " board; click a cell)";
      var tbl = h("table", "board", box);
      for (var r = 0; r < S; r++) {
        var tr = h("tr", "", tbl);
        for (var c = 0; c < S; c++) {
          var i = r * S + c, td = h("td", cellClass(V.tokens[i]), tr, cellText(V.tokens[i]));
          if (V.kind === "sudoku") { if (c % 3 === 2 && c < 8) td.className += " box-r"; if (r % 3 === 2 && r < 8) td.className += " box-b"; }
          td.setAttribute("data-t", String(i));
          td.title = "cell " + i + " (row " + r + ", column " + c + ")";
          td.addEventListener("click", onPick);
          inputCells.push(td);
        }
      }
    } else {
      document.getElementById("input-note").textContent = "(" + T + " tokens; click one)";
      for (var t = 0; t < T; t++) {
        var s = h("span", "tok", box, label(t));
        s.setAttribute("data-t", String(t));
        s.title = "token " + t + " = " + V.tokens[t];
        s.addEventListener("click", onPick);
        inputCells.push(s);
      }
    }
  }
  function onPick(ev) { setToken(parseInt(ev.currentTarget.getAttribute("data-t"), 10)); }
  function cellClass(v) {
    if (V.kind === "boardpath") return ["", "wall", "start", "end", "path"][v] || "";
    if (V.kind === "sudoku") return v ? "given" : "";
    return "";
  }
  function cellText(v) {
    if (V.kind === "boardpath") return v === 1 ? "" : (v === 2 ? "S" : v === 3 ? "E" : v === 4 ? "*" : "");
    if (V.kind === "sudoku") return v ? String(v) : "";
    return String(v);
  }
  function markInput(sources) {
    var src = {};
    sources.forEach(function (s) { src[s[0]] = true; });
    inputCells.forEach(function (c, i) {
      var base = isBoard ? c.className.replace(/ ?\b(sel|src)\b/g, "") : "tok";
      c.className = base + (i === state.token ? " sel" : "") + (src[i] && !isBoard ? " src" : "") +
        (V.fact && i === V.fact.write ? " fact" : "");
    });
  }

  // ------------------------------------------------------------ attention
  function drawAttention() {
    var rows = V.attention[state.layer][state.token] || [];
    var svg = document.getElementById("attention");
    clear(svg);
    var list = document.getElementById("attention-list");
    clear(list);
    var maxw = rows.reduce(function (m, r) { return Math.max(m, Math.abs(r[1])); }, 0) || 1;
    if (isBoard) attentionBoard(svg, rows, maxw); else attentionArcs(svg, rows, maxw);
    if (!rows.length) h("li", "muted", list, V.meta.causal && state.token === 0 ? "the first token reads nothing (causal)" : "no attention");
    rows.forEach(function (r) {
      h("li", "", list, label(r[0]) + "  (#" + r[0] + ")  " + (r[1] >= 0 ? "+" : "") + fmt(r[1]));
    });
    markInput(rows);
  }
  function attentionArcs(svg, rows, maxw) {
    var step = 16, W = Math.max(400, T * step + 20), H = 190, base = H - 26;
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    function xOf(t) { return 10 + t * step + step / 2; }
    for (var t = 0; t < T; t++) {
      var sel = t === state.token;
      var txt = el("text", { x: xOf(t), y: base + 16, "text-anchor": "middle", "font-size": 11, "font-family": "monospace",
        fill: sel ? "#1f6feb" : "#333", "font-weight": sel ? "700" : "400", "data-t": t, style: "cursor:pointer" }, svg, label(t));
      txt.addEventListener("click", onPick);
    }
    var x0 = xOf(state.token);
    el("circle", { cx: x0, cy: base, r: 4, fill: "#1f6feb" }, svg);
    // strongest last so that it is drawn on top; the list order is strongest first
    rows.slice().reverse().forEach(function (r) {
      var x1 = xOf(r[0]), w = Math.abs(r[1]) / maxw;
      var hgt = Math.min(base - 8, 12 + Math.abs(x1 - x0) * 0.45);
      var d = "M" + x0 + "," + base + " C" + x0 + "," + (base - hgt) + " " + x1 + "," + (base - hgt) + " " + x1 + "," + base;
      var p = el("path", { d: d, fill: "none", stroke: css(r[1] >= 0 ? ORANGE : GREY), "stroke-width": (0.6 + 4.5 * w).toFixed(2),
        "stroke-opacity": (0.25 + 0.75 * w).toFixed(2), "class": "arc" }, svg);
      el("title", {}, p, label(state.token) + " <- " + label(r[0]) + ": " + fmt(r[1]));
      el("circle", { cx: x1, cy: base, r: 2.5, fill: css(ORANGE) }, svg);
    });
    var wrap = document.getElementById("attention-wrap");
    wrap.scrollLeft = Math.max(0, x0 - wrap.clientWidth / 2);
  }
  function attentionBoard(svg, rows, maxw) {
    var cell = Math.max(16, Math.min(36, Math.floor(400 / S))), W = S * cell + 2;
    svg.setAttribute("width", W); svg.setAttribute("height", W);
    svg.setAttribute("viewBox", "0 0 " + W + " " + W);
    var defs = el("defs", {}, svg), mk = el("marker", { id: "ah", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse" }, defs);
    el("path", { d: "M0,0 L10,5 L0,10 z", fill: css(ORANGE) }, mk);
    var fills = V.kind === "boardpath" ? ["#fff", "#444", "#2f9e44", "#c92a2a", "#fab005"] : null;
    for (var i = 0; i < T; i++) {
      var r = Math.floor(i / S), c = i % S, v = V.tokens[i];
      var rc = el("rect", { x: 1 + c * cell, y: 1 + r * cell, width: cell, height: cell, fill: fills ? fills[v] : (v ? "#eef3fb" : "#fff"),
        stroke: "#ccc", "data-t": i, style: "cursor:pointer" }, svg);
      rc.addEventListener("click", onPick);
      if (V.kind === "sudoku" && v) el("text", { x: 1 + c * cell + cell / 2, y: 1 + r * cell + cell * 0.7, "text-anchor": "middle", "font-size": cell * 0.5, fill: "#333", "pointer-events": "none" }, svg, String(v));
    }
    function ctr(i) { return [1 + (i % S) * cell + cell / 2, 1 + Math.floor(i / S) * cell + cell / 2]; }
    var to = ctr(state.token);
    el("rect", { x: to[0] - cell / 2, y: to[1] - cell / 2, width: cell, height: cell, fill: "none", stroke: "#1f6feb", "stroke-width": 3 }, svg);
    rows.slice().reverse().forEach(function (rw) {
      var w = Math.abs(rw[1]) / maxw, from = ctr(rw[0]);
      if (rw[0] === state.token) { el("circle", { cx: to[0], cy: to[1], r: 3 + 5 * w, fill: "none", stroke: css(ORANGE), "stroke-width": 2, "class": "arc" }, svg); return; }
      var ln = el("line", { x1: from[0], y1: from[1], x2: to[0], y2: to[1], stroke: css(rw[1] >= 0 ? ORANGE : GREY), "stroke-width": (0.8 + 4 * w).toFixed(2),
        "stroke-opacity": (0.3 + 0.7 * w).toFixed(2), "marker-end": "url(#ah)", "class": "arc" }, svg);
      el("title", {}, ln, "cell " + state.token + " <- cell " + rw[0] + ": " + fmt(rw[1]));
    });
  }

  // ------------------------------------------------------------ logit lens
  // The panel shares a grid row with the taller attention panel: its tables stretch to the row (CSS) and the
  // boards are sized to the room measured with the panel empty, so that the lens uses the whole box.
  function drawLens() {
    var box = document.getElementById("lens");
    clear(box);
    if (isBoard) { lensBoard(box); return; }
    var t = state.token, next = t + 1 < T ? V.tokens[t + 1] : null;
    document.getElementById("lens-note").textContent = "(top predictions after each layer for the token after #" + t +
      (next !== null ? "; the input continues with '" + label(t + 1) + "'" : "") + ")";
    var tbl = h("table", "lens", box), hr = h("tr", "", tbl);
    h("th", "", hr, "layer");
    for (var k = 0; k < V.lens[0][t].length; k++) h("th", "", hr, "#" + (k + 1));
    for (var l = 0; l < L; l++) {
      var tr = h("tr", l === state.layer ? "cur" : "", tbl);
      h("td", "", tr, String(l));
      V.lens[l][t].forEach(function (p) {
        h("td", p[0] === next ? "hit" : "", tr, vocabLabel(p[0]) + " " + fmt(p[1], 3));
      });
    }
    lensTokens(box);
  }
  // the top prediction after each layer (rows) for the tokens around the selected one (columns)
  function lensTokens(box) {
    var n = Math.max(1, Math.min(T, Math.floor((box.clientWidth - 50) / 46)));
    var t0 = Math.max(0, Math.min(T - n, state.token - Math.floor(n / 2)));
    h("div", "muted", box, "top prediction per token after each layer; shade = its probability, green = the input's next token");
    var tbl = h("table", "lens by-token", box);
    var hr = h("tr", "", tbl);
    h("th", "", hr, "layer");
    for (var t = t0; t < t0 + n; t++) {
      var th = h("th", t === state.token ? "sel" : "", hr, label(t));
      th.setAttribute("data-t", String(t));
      th.title = "token #" + t;
      th.addEventListener("click", onPick);
    }
    for (var l = 0; l < L; l++) {
      var tr = h("tr", l === state.layer ? "cur" : "", tbl);
      h("td", "", tr, String(l));
      for (t = t0; t < t0 + n; t++) {
        var p = V.lens[l][t][0], hit = t + 1 < T && p[0] === V.tokens[t + 1];
        var td = h("td", (hit ? "hit" : "") + (t === state.token ? " sel" : ""), tr, vocabLabel(p[0]));
        td.style.background = css(ramp(BLUE, 0.5 * p[1]));  // at most half strength: the label stays legible
        td.title = "after layer " + l + ", token #" + t + " -> " + vocabLabel(p[0]) + " (" + fmt(p[1], 3) + ")";
        td.setAttribute("data-t", String(t));
        td.addEventListener("click", onPick);
      }
    }
  }
  function lensBoard(box) {
    var l = state.layer, pred = V.lens[l];
    var changed = function (k) { var c = 0; for (var i = 0; k > 0 && i < T; i++) if (V.lens[k - 1][i] !== V.lens[k][i]) c++; return c; };
    document.getElementById("lens-note").textContent = "(argmax label of every cell after layer " + l + (l > 0 ? "; " + changed(l) + " cells changed since layer " + (l - 1) : "") + "; beside it, after every layer)";
    var fit = boardFit(box.clientWidth, box.clientHeight >= 120 ? box.clientHeight : Math.min(box.clientWidth, 460));
    var wrapper = h("div", "lens-boards", box);
    boardTable(h("div", "", wrapper), pred, fit.main, true);
    var thumbs = h("div", "lens-thumbs", wrapper);
    thumbs.style.gridTemplateColumns = "repeat(" + fit.cols + ", " + fit.thumb + "px)";
    for (var k = 0; k < L; k++) {
      var fig = h("div", "lens-thumb" + (k === l ? " cur" : ""), thumbs);
      boardTable(fig, V.lens[k], fit.thumb, false);
      var n = 0;
      for (var q = 0; q < T; q++) if (V.lens[k][q] === 4) n++;
      var cap = h("div", "muted", fig, V.kind === "boardpath" ? "L" + k + ": " + n + " path" : "L" + k + (k > 0 ? ": " + changed(k) + " changed" : ""));
      fig.title = "layer " + k + (V.kind === "boardpath" ? ": " + n + " path cells" : "") + (k > 0 ? ", " + changed(k) + " cells changed since layer " + (k - 1) : "") + "; click to show this layer";
      fig.setAttribute("data-layer", String(k));
      fig.addEventListener("click", function (ev) { setLayer(parseInt(ev.currentTarget.getAttribute("data-layer"), 10)); });
      cap.style.width = fit.thumb + "px";
    }
  }
  // sides in px of the current layer's board and of the per-layer thumbnails (in `cols` columns) that fill W x H best
  function boardFit(W, H) {
    var CAP = 16, GAP = 10, best = null;
    for (var k = 1; k <= L; k++) {
      var rows = Math.ceil(L / k);
      var s = Math.min(Math.floor((H - rows * CAP - (rows - 1) * GAP) / rows), Math.floor((W - GAP * k) / (k + 2)));
      var m = Math.min(H, W - k * (s + GAP));
      var score = m * m + L * s * s;
      if (s > 0 && m > 0 && (best === null || score > best.score)) best = { main: m, thumb: s, cols: k, score: score };
    }
    return best || { main: Math.max(40, Math.min(W, H)), thumb: 40, cols: 1 };
  }
  // one board of predicted labels as a table `side` px wide; the big one marks the selected cell and selects on click
  function boardTable(parent, pred, side, big) {
    var tbl = h("table", "board", parent), cell = Math.max(2, Math.floor((side - 1) / S) - 1);
    var text = big || (V.kind === "sudoku" && cell >= 12);  // no letters in small cells: they would make them taller
    tbl.style.fontSize = Math.max(6, Math.min(20, Math.floor(cell * 0.55))) + "px";
    for (var r = 0; r < S; r++) {
      var tr = h("tr", "", tbl);
      for (var c = 0; c < S; c++) {
        var j = r * S + c, v = pred[j], inp = V.tokens[j], td;
        if (V.kind === "boardpath") {
          td = h("td", ["", "wall", "start", "end", "path"][v] || "", tr, v === 4 ? "*" : v === 2 ? "S" : v === 3 ? "E" : "");
          if (inp !== v && !(inp === 0 && v === 4)) td.className += " wrong";
        } else {
          td = h("td", inp ? "given" : "pred", tr, inp ? String(inp) : (v ? String(v) : "?"));
          if (c % 3 === 2 && c < 8) td.className += " box-r";
          if (r % 3 === 2 && r < 8) td.className += " box-b";
        }
        td.style.width = td.style.height = td.style.lineHeight = cell + "px";
        if (!text) td.textContent = "";
        if (!big) continue;
        if (j === state.token) td.className += " sel";
        td.setAttribute("data-t", String(j));
        td.addEventListener("click", onPick);
      }
    }
  }

  // ------------------------------------------------------------ neuron graph
  function drawGraph() {
    var svg = document.getElementById("graph");
    clear(svg);
    var G = V.graph, l = state.layer, t = state.token, W = 420;
    var xs = V.lit.x[l][t], ys = V.lit.y[l][t];
    var xnext = l + 1 < L ? V.lit.x[l + 1][t] : xs;
    var P = G.pos.map(function (p) { return [10 + p[0] * (W - 20), 10 + p[1] * (W - 20)]; });
    var active = 0;
    G.edges.forEach(function (e) {
      var s = e[0], d = e[1], w = e[2];
      // signal along the edge: y of the source now, x of the target at the next layer
      var flow = Math.sqrt((ys[s] / 255) * (xnext[d] / 255));
      if (flow > 0) active++;
      el("line", { x1: P[s][0].toFixed(1), y1: P[s][1].toFixed(1), x2: P[d][0].toFixed(1), y2: P[d][1].toFixed(1),
        stroke: flow > 0 ? css(ORANGE) : "#999", "stroke-width": (0.4 + 1.6 * w).toFixed(2),
        "stroke-opacity": (0.12 + 0.8 * Math.max(flow, 0.05 * w)).toFixed(2) }, svg);
    });
    var lit = 0;
    G.nodes.forEach(function (nd, i) {
      var xv = xs[i] / 255, yv = ys[i] / 255;
      if (xs[i] > 0) lit++;
      var c = el("circle", { cx: P[i][0].toFixed(1), cy: P[i][1].toFixed(1), r: (4 + 5 * Math.sqrt(nd.strength)).toFixed(1),
        fill: css(ramp(BLUE, xv)), stroke: yv > 0 ? css(ramp(ORANGE, 0.35 + 0.65 * yv)) : "#bbb",
        "stroke-width": (yv > 0 ? 1.5 + 3 * yv : 1).toFixed(2), "class": "node", "data-x": xs[i], "data-y": ys[i] }, svg);
      el("title", {}, c, "neuron " + nd.id + " (head " + nd.head + ")  x=" + fmt(xv * V.lit.scale_x[l]) + "  y=" + fmt(yv * V.lit.scale_y[l]));
    });
    factHubs(l).forEach(function (i) {  // hubs whose state row holds the fact at this layer: a green ring
      var r = 4 + 5 * Math.sqrt(G.nodes[i].strength) + 3;
      el("circle", { cx: P[i][0].toFixed(1), cy: P[i][1].toFixed(1), r: r.toFixed(1), fill: "none", stroke: "#2f9e44",
        "stroke-width": "2", "class": "fact-hub" }, svg);
    });
    document.getElementById("graph-note").textContent = "layer " + l + ", token #" + t + ": " + lit + " of " + G.nodes.length +
      " hubs fire in x; " + active + " of " + G.edges.length + " edges carry y of this layer into x of the next" +
      (V.fact ? "; green rings: the " + factHubs(l).length + " hubs among the memory panel's neurons of this layer" : "");
  }

  // ------------------------------------------------------------ memory: one fact read back through the state
  function factHubs(l) {
    if (!V.fact) return [];
    return V.fact.neurons.filter(function (n) { return n.layer === l && n.hub !== null; }).map(function (n) { return n.hub; });
  }
  function drawFact() {
    var F = V.fact;
    if (!F) return;
    document.getElementById("fact-panel").hidden = false;
    document.getElementById("fact-note").textContent = "(the token at #" + F.write + " as the last token, #" + F.read +
      ", reads it back through the state; a head's share: the fact's part of what it reads, fact / (|fact| + |rest|))";
    document.getElementById("fact-line").textContent = "fact '" + label(F.write) + "' at #" + F.write + "; read at #" +
      F.read + " '" + label(F.read) + "'; the model predicts '" + F.predicted_label + "'";
    var svg = document.getElementById("fact-heads"), W = 420, H = 150, mid = 64, n = F.heads.length;
    clear(svg);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    var bw = (W - 40) / Math.max(1, n);
    el("line", { x1: 30, y1: mid, x2: W - 6, y2: mid, stroke: "#999" }, svg);
    el("text", { x: 2, y: 14, "font-size": 10, fill: "#777" }, svg, "+1");
    el("text", { x: 2, y: 2 * mid - 4, "font-size": 10, fill: "#777" }, svg, "-1");
    el("text", { x: 32, y: H - 2, "font-size": 10, fill: "#777" }, svg, "share of each head (layer.head); click a bar to show its layer");
    F.heads.forEach(function (hd, i) {
      var v = Math.max(-1, Math.min(1, hd.share)), y = v >= 0 ? mid - v * (mid - 8) : mid, hgt = Math.abs(v) * (mid - 8);
      var b = el("rect", { x: (32 + i * bw).toFixed(1), y: y.toFixed(1), width: Math.max(1, bw - 3).toFixed(1),
        height: Math.max(0.5, hgt).toFixed(1), fill: hd.layer === state.layer ? "#2f9e44" : "#b2d8bb", "class": "fact-head",
        "data-layer": hd.layer }, svg);
      el("title", {}, b, "layer " + hd.layer + ", head " + hd.head + ": share " + fmt(hd.share) + " (fact " + fmt(hd.fact, 4) + ", rest " + fmt(hd.other, 4) + ")");
      b.addEventListener("click", function () { setLayer(hd.layer); });
      if (bw >= 14) el("text", { x: (32 + i * bw + (bw - 3) / 2).toFixed(1), y: 2 * mid + 10, "font-size": 9, fill: "#555",
        "text-anchor": "middle" }, svg, hd.layer + "." + hd.head);
    });
    var tbl = document.getElementById("fact-neurons");
    clear(tbl);
    var hr = h("tr", "", tbl);
    ["layer", "head", "neuron", "fact", "rest", "purity", "x at fact", "x at read", "hub"].forEach(function (c) { h("th", "", hr, c); });
    F.neurons.forEach(function (nr) {
      var tr = h("tr", nr.layer === state.layer ? "cur" : "", tbl);
      [nr.layer, nr.head, nr.neuron, fmt(nr.fact, 4), fmt(nr.other, 4), fmt(nr.purity), fmt(nr.written, 3), fmt(nr.read, 3),
        nr.hub === null ? "-" : "yes"].forEach(function (c) { h("td", "", tr, String(c)); });
    });
  }

  // ------------------------------------------------------------ heatmaps
  var off = document.createElement("canvas");
  function drawHeat(which, rgb) {
    var cv = document.getElementById("heat-" + which), l = state.layer;
    var data = V.heat[which][l], cols = V.heat["neurons_" + which][l];
    var K = cols.length;
    off.width = K; off.height = T;
    var octx = off.getContext("2d"), img = octx.createImageData(K, T);
    for (var t = 0; t < T; t++) for (var k = 0; k < K; k++) {
      var c = ramp(rgb, data[t][k] / 255), o = 4 * (t * K + k);
      img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
    }
    octx.putImageData(img, 0, 0);
    var W = 420, rowH = Math.max(1, Math.min(14, Math.floor(520 / T))), Hh = T * rowH;
    cv.width = W; cv.height = Hh;
    var ctx = cv.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, Hh);
    ctx.drawImage(off, 0, 0, K, T, 0, 0, W, Hh);
    ctx.strokeStyle = "#000"; ctx.lineWidth = 1;
    ctx.strokeRect(0.5, state.token * rowH + 0.5, W - 1, Math.max(rowH, 2));
    cv.style.height = Math.max(Hh, 60) + "px";
    document.getElementById("heat-" + which + "-note").textContent = "layer " + l + ": " + K + " neurons (ids " + cols.slice(0, 6).join(", ") +
      (K > 6 ? ", ..." : "") + "), colour 0 .. " + fmt(V.heat["scale_" + which][l]) + "; outlined row = token #" + state.token;
  }

  // ------------------------------------------------------------ sparsity
  function drawSparsity() {
    var svg = document.getElementById("sparsity");
    clear(svg);
    var sx = V.sparsity.x, sy = V.sparsity.y, W = 420, H = 170, top = 14, bottom = 24, left = 40;
    var mx = Math.max.apply(null, sx.concat(sy).concat([1e-6]));
    var bw = (W - left - 10) / L;
    el("text", { x: 2, y: 10, "font-size": 10, fill: "#555" }, svg, "max " + fmt(mx * 100, 1) + "%");
    for (var l = 0; l < L; l++) {
      var x0 = left + l * bw;
      if (l === state.layer) el("rect", { x: x0, y: top - 4, width: bw, height: H - top - bottom + 4, fill: "#e7f0ff", "class": "cur" }, svg);
      [[sx[l], BLUE, 0], [sy[l], ORANGE, 1]].forEach(function (b) {
        var hh = (H - top - bottom) * b[0] / mx;
        var r = el("rect", { x: x0 + bw * (0.15 + 0.35 * b[2]), y: H - bottom - hh, width: bw * 0.33, height: hh, fill: css(b[1]) }, svg);
        el("title", {}, r, "layer " + l + " " + (b[2] ? "y" : "x") + ": " + fmt(b[0] * 100, 2) + "% non-zero");
      });
      var lt = el("text", { x: x0 + bw / 2, y: H - 8, "text-anchor": "middle", "font-size": 10, fill: "#333", style: "cursor:pointer" }, svg, "L" + l);
      lt.addEventListener("click", (function (k) { return function () { setLayer(k); }; })(l));
    }
    el("text", { x: W - 120, y: 10, "font-size": 10, fill: css(BLUE) }, svg, "x " + fmt(sx[state.layer] * 100, 2) + "%");
    el("text", { x: W - 60, y: 10, "font-size": 10, fill: css(ORANGE) }, svg, "y " + fmt(sy[state.layer] * 100, 2) + "%");
    // per token, current layer
    var s2 = document.getElementById("sparsity-tokens");
    clear(s2);
    var tx = V.sparsity.x_token[state.layer], ty = V.sparsity.y_token[state.layer], H2 = 90;
    var m2 = Math.max.apply(null, tx.concat(ty).concat([1e-6]));
    function line(vals, rgb) {
      var pts = vals.map(function (v, t) { return (left + t * (W - left - 10) / Math.max(1, T - 1)).toFixed(1) + "," + (H2 - 12 - (H2 - 22) * v / m2).toFixed(1); });
      el("polyline", { points: pts.join(" "), fill: "none", stroke: css(rgb), "stroke-width": 1.2 }, s2);
    }
    line(tx, BLUE); line(ty, ORANGE);
    var xt = left + state.token * (W - left - 10) / Math.max(1, T - 1);
    el("line", { x1: xt, y1: 6, x2: xt, y2: H2 - 12, stroke: "#1f6feb", "stroke-dasharray": "2,2" }, s2);
    el("text", { x: 2, y: 12, "font-size": 10, fill: "#555" }, s2, "per token");
    el("text", { x: left, y: H2 - 1, "font-size": 10, fill: "#555" }, s2, "layer " + state.layer + ", token #" + state.token + ": x " +
      fmt(tx[state.token] * 100, 2) + "%, y " + fmt(ty[state.token] * 100, 2) + "%");
  }

  // ------------------------------------------------------------ all
  function draw() {
    document.getElementById("layer-label").textContent = state.layer + " (of " + L + " layers, counted from 0)";
    document.getElementById("token-label").textContent = "#" + state.token + " '" + label(state.token) + "'";
    drawAttention();
    drawLens();
    drawGraph();
    drawHeat("x", BLUE);
    drawHeat("y", ORANGE);
    drawSparsity();
    drawFact();
  }

  header();
  buildInput();
  draw();
  document.body.setAttribute("data-ready", "1");
})();
