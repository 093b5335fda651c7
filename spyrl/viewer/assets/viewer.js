/* spyrl viewer: renders the page's JSON data. Every text from the data goes through
   textContent or an attribute set as a property; nothing from the data is parsed as HTML. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("spyrl-data").textContent);
  var PAGE_SIZE = 25;
  var SVG = "http://www.w3.org/2000/svg";
  var state = { filtered: [], page: 0, current: null, reveal: false };

  function el(tag, props) {
    var node = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (key) {
        if (key === "text") node.textContent = props[key];
        else if (key === "class") node.className = props[key];
        else node[key] = props[key];
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function fmt(x, digits) {
    if (x === null || x === undefined || typeof x !== "number") return "–";
    return x.toFixed(digits === undefined ? 3 : digits);
  }
  function signed(x) { return (x >= 0 ? "+" : "") + fmt(x); }
  function player(seat) { return "Player " + (seat + 1); }
  function agentsOf(game) {
    var seen = [];
    game.seats.forEach(function (s) { if (seen.indexOf(s.agent) < 0) seen.push(s.agent); });
    return seen;
  }

  // ------------------------------------------------------------------ tabs
  var tabs = [["games", "Games (" + DATA.games.length + ")"]];
  if (DATA.run) tabs.unshift(["run", "Run report"]);
  if (DATA.tournament) tabs.unshift(["tournament", "Tournament"]);
  function showTab(name) {
    tabs.forEach(function (t) {
      document.getElementById("tab-" + t[0]).hidden = t[0] !== name;
      document.getElementById("tabbtn-" + t[0]).classList.toggle("active", t[0] === name);
    });
  }
  var nav = document.getElementById("tabs");
  tabs.forEach(function (t) {
    nav.appendChild(el("button", { id: "tabbtn-" + t[0], type: "button", text: t[1], onclick: function () { showTab(t[0]); } }));
  });
  document.getElementById("kind").textContent = DATA.kind;
  document.getElementById("title").textContent = DATA.title;

  // --------------------------------------------------------------- filters
  var filters = {
    caught: document.getElementById("f-caught"),
    viol: document.getElementById("f-viol"),
    agent: document.getElementById("f-agent"),
    deg: document.getElementById("f-deg"),
    iter: document.getElementById("f-iter"),
    doc: document.getElementById("f-doc"),
  };
  function fillOptions(select, values) {
    values.forEach(function (v) { select.appendChild(el("option", { value: String(v), text: String(v) })); });
  }
  (function () {
    var agents = {}, degs = {}, iters = {};
    DATA.games.forEach(function (g) {
      g.seats.forEach(function (s) { agents[s.agent] = 1; });
      degs[g.deg] = 1;
      iters[g.it] = 1;
    });
    fillOptions(filters.agent, Object.keys(agents).sort());
    fillOptions(filters.deg, Object.keys(degs).sort());
    fillOptions(filters.iter, Object.keys(iters).map(Number).sort(function (a, b) { return a - b; }));
  })();

  function applyFilters() {
    var caught = filters.caught.value, viol = filters.viol.value, agent = filters.agent.value;
    var deg = filters.deg.value, iter = filters.iter.value, doc = filters.doc.value.trim().toLowerCase();
    var out = [];
    for (var i = 0; i < DATA.games.length; i++) {
      var g = DATA.games[i];
      if (caught && String(Number(g.caught)) !== caught) continue;
      if (viol && String(Number(g.nviol > 0)) !== viol) continue;
      if (deg && g.deg !== deg) continue;
      if (iter && String(g.it) !== iter) continue;
      if (doc && g.doc.toLowerCase().indexOf(doc) < 0) continue;
      if (agent && !g.seats.some(function (s) { return s.agent === agent; })) continue;
      out.push(i);
    }
    state.filtered = out;
    state.page = 0;
    renderList();
  }
  Object.keys(filters).forEach(function (k) {
    filters[k].addEventListener(k === "doc" ? "input" : "change", applyFilters);
  });

  // ------------------------------------------------------------ game list
  var listBody = document.querySelector("#game-list tbody");
  function renderList() {
    clear(listBody);
    var pages = Math.max(1, Math.ceil(state.filtered.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    var start = state.page * PAGE_SIZE;
    state.filtered.slice(start, start + PAGE_SIZE).forEach(function (index) {
      var g = DATA.games[index];
      var row = el("tr", { className: index === state.current ? "current" : "" },
        el("td", { text: g.run + " #" + g.id, title: g.run + " #" + g.id }),
        el("td", { text: g.doc, title: g.doc }),
        el("td", { className: "num", text: String(g.it) }),
        el("td", { text: agentsOf(g).join(", ") }),
        el("td", { text: g.deg }),
        el("td", { text: g.caught ? "caught" : "survived" }),
        el("td", { className: "num", text: String(g.nviol) }));
      row.dataset.index = String(index);
      row.addEventListener("click", function () { openGame(index); });
      listBody.appendChild(row);
    });
    document.getElementById("count").textContent = state.filtered.length + " of " + DATA.games.length + " games";
    document.getElementById("page").textContent = "page " + (state.page + 1) + " / " + pages;
    document.getElementById("prev").disabled = state.page === 0;
    document.getElementById("next").disabled = state.page >= pages - 1;
  }
  document.getElementById("prev").addEventListener("click", function () { state.page--; renderList(); });
  document.getElementById("next").addEventListener("click", function () { state.page++; renderList(); });

  // ------------------------------------------------------------- one game
  function sourceView(game) {
    var doc = DATA.documents[game.src] || { text: "" };
    var text = doc.text, node = el("div", { className: "source" }), pos = 0;
    game.spans.forEach(function (span) {
      node.appendChild(document.createTextNode(text.slice(pos, span[0])));
      if (span[1] > span[0]) node.appendChild(el("del", { className: "lost", text: text.slice(span[0], span[1]), title: "missing from the spy's copy" }));
      if (span[2]) node.appendChild(el("ins", { className: "changed", text: span[2], title: "what the spy read instead" }));
      pos = span[1];
    });
    node.appendChild(document.createTextNode(text.slice(pos)));
    return node;
  }
  // Log-probs come one character per token (spyrl.viewer.payload.encode_logprobs).
  var LP = DATA.logprobs, LP_FLOOR = -(LP.alphabet.length - 1) * LP.step;
  function logprobs(code) {
    var out = new Array(code.length);
    for (var i = 0; i < code.length; i++) out[i] = -LP.alphabet.indexOf(code.charAt(i)) * LP.step;
    return out;
  }
  function heatColor(lp) {
    return "hsl(" + Math.round(Math.exp(lp) * 120) + ", 75%, " + (lp <= LP_FLOOR ? 45 : 78) + "%)";
  }
  function heatStrip(entry) {
    if (!entry.lp) return null;
    var strip = el("div", { className: "heat", title: entry.tok ? "" : "per-token log-probs (token texts not recorded; hover a cell)" });
    logprobs(entry.lp).forEach(function (lp, i) {
      var label = entry.tok ? entry.tok[i] : "";
      var shown = (lp <= LP_FLOOR ? "≤ " : "≈ ") + lp.toFixed(1);
      var cell = el("span", { className: entry.tok ? "tok" : "cell", text: label,
        title: "token " + (i + 1) + (entry.tok ? " " + JSON.stringify(label) : "") + ": logprob " + shown + ", p " + Math.exp(lp).toFixed(3) });
      cell.style.background = heatColor(lp);
      strip.appendChild(cell);
    });
    return strip;
  }
  function chips(entry) {
    var box = el("div");
    (entry.viol || []).forEach(function (v) { box.appendChild(el("span", { className: "chip", text: v })); });
    if (entry.err) box.appendChild(el("span", { className: "chip err", text: "error: " + entry.err }));
    if (entry.fin && entry.fin !== "stop") box.appendChild(el("span", { className: "chip", text: "finish: " + entry.fin }));
    return box;
  }
  function voteTarget(v) { return v === undefined || v < 0 ? "N/A" : player(v); }
  function playerCard(game, round, seat) {
    var isSpy = state.reveal && seat === game.spy;
    var perf = round.perform[seat], vote = round.vote[seat];
    var head = el("header", null, el("span", { text: player(seat) + " · " + game.seats[seat].agent }),
      state.reveal ? el("span", { className: "badge " + (isSpy ? "spy-badge" : "civ-badge"), text: isSpy ? "SPY" : "civilian" }) : null);
    var card = el("div", { className: "card" + (isSpy ? " spy" : "") }, head);
    card.dataset.seat = String(seat);
    if (perf) {
      card.appendChild(chips(perf));
      card.appendChild(el("div", { className: "text perf-text", text: perf.t || "(empty)" }));
      var strip = heatStrip(perf);
      if (strip) card.appendChild(strip);
    } else {
      card.appendChild(el("p", { className: "muted", text: "(eliminated)" }));
    }
    if (vote) {
      var line = el("div", { className: "vote-line" }, el("b", { text: "votes " + voteTarget(vote.vote) }), chips(vote));
      line.appendChild(el("div", { className: "text vote-text", text: vote.t || "(empty)" }));
      var vstrip = heatStrip(vote);
      if (vstrip) line.appendChild(vstrip);
      card.appendChild(line);
    }
    return card;
  }
  function votesTable(game, round) {
    var n = game.seats.length;
    var head = el("tr", null, el("th", { text: "voter ↓ / voted →" }));
    for (var t = 0; t < n; t++) head.appendChild(el("th", { className: state.reveal && t === game.spy ? "spy-col" : "", text: String(t + 1) }));
    head.appendChild(el("th", { text: "N/A" }));
    var table = el("table", { className: "votes" }, head);
    var received = new Array(n + 1).fill(0);
    round.vote.forEach(function (vote, seat) {
      if (!vote) return;
      var tr = el("tr", null, el("th", { text: player(seat) }));
      var target = vote.vote === undefined || vote.vote < 0 ? n : vote.vote;
      received[target]++;
      for (var c = 0; c <= n; c++) {
        tr.appendChild(el("td", { className: "mark" + (state.reveal && c === game.spy ? " spy-col" : ""), text: c === target ? "●" : "" }));
      }
      table.appendChild(tr);
    });
    var total = el("tr", null, el("th", { text: "received" }));
    received.forEach(function (k, c) { total.appendChild(el("td", { className: "num" + (state.reveal && c === game.spy ? " spy-col" : ""), text: String(k) })); });
    table.appendChild(total);
    return table;
  }
  function rewardsTable(game) {
    var head = el("tr");
    ["player", "agent", "role", "votes recv.", "detect", "perform", "penalty", "reward", "violations"].forEach(function (h) { head.appendChild(el("th", { text: h })); });
    var table = el("table", { className: "rewards" }, head);
    game.seats.forEach(function (s, seat) {
      var sum = [0, 0, 0, 0], viol = [], recv = 0;
      game.rounds.forEach(function (round) {
        [round.perform[seat], round.vote[seat]].forEach(function (e) {
          if (!e) return;
          for (var k = 0; k < 4; k++) sum[k] += e.r[k];
          (e.viol || []).forEach(function (v) { if (viol.indexOf(v) < 0) viol.push(v); });
        });
        if (round.vote[seat]) recv += round.vote[seat].recv;
      });
      table.appendChild(el("tr", null, el("td", { text: player(seat) }), el("td", { text: s.agent }),
        el("td", { text: state.reveal ? s.role : "?" }), el("td", { className: "num", text: String(recv) }),
        el("td", { className: "num", text: signed(sum[1]) }), el("td", { className: "num", text: signed(sum[2]) }),
        el("td", { className: "num", text: signed(sum[3]) }), el("td", { className: "num", text: signed(sum[0]) }),
        el("td", { text: viol.join(", ") || "–" })));
    });
    return table;
  }
  function renderGame() {
    var pane = document.getElementById("game-pane");
    clear(pane);
    if (state.current === null) return;
    var game = DATA.games[state.current];
    var doc = DATA.documents[game.src] || { id: game.doc };
    pane.appendChild(el("h2", { text: "Game " + game.id + " · run " + game.run }));
    pane.appendChild(el("div", { className: "meta" },
      el("span", { text: "document " + doc.id }), el("span", { text: game.seats.length + " players" }),
      el("span", { text: "iteration " + game.it + " (policy version " + game.pv + ")" }), el("span", { text: "degradation " + game.deg }),
      el("span", { text: game.rounds.length + " round(s)" })));
    var reveal = el("button", { id: "reveal", className: "reveal", type: "button",
      text: state.reveal ? "Hide the spy" : "Reveal the spy" });
    reveal.addEventListener("click", function () { state.reveal = !state.reveal; renderGame(); });
    var verdict = state.reveal ? el("b", { id: "verdict", text: " The spy was " + player(game.spy) + "; " + (game.caught ? "caught by the vote." : "it survived.") }) : null;
    pane.appendChild(el("p", null, reveal, verdict));
    pane.appendChild(el("h3", { text: "Source, with what the spy's copy lost" }));
    pane.appendChild(el("div", { className: "muted" },
      el("del", { className: "lost legend-chip", text: "removed or changed" }), el("ins", { className: "changed legend-chip", text: "what the spy read instead" }),
      game.spans.length ? null : "(the spy's copy is identical)"));
    pane.appendChild(sourceView(game));
    game.rounds.forEach(function (round, r) {
      pane.appendChild(el("h3", { text: "Round " + (r + 1) + ": performances and votes" }));
      var grid = el("div", { className: "players" });
      for (var seat = 0; seat < game.seats.length; seat++) grid.appendChild(playerCard(game, round, seat));
      pane.appendChild(grid);
      pane.appendChild(el("h3", { text: "Round " + (r + 1) + ": who voted whom" }));
      pane.appendChild(votesTable(game, round));
    });
    pane.appendChild(el("h3", { text: "Rewards" }));
    pane.appendChild(rewardsTable(game));
  }
  function openGame(index) {
    state.current = index;
    state.reveal = false;
    showTab("games");
    renderGame();
    Array.prototype.forEach.call(listBody.children, function (tr) { tr.classList.toggle("current", tr.dataset.index === String(index)); });
  }

  // ------------------------------------------------------------ run report
  var COLORS = ["#2c5fa8", "#d9822b", "#1e8449", "#c0392b", "#7d3c98", "#16a085"];
  function lineChart(title, rows, keys, switches) {
    var series = keys.map(function (k) {
      return { key: k, points: rows.filter(function (r) { return typeof r[k] === "number"; }).map(function (r) { return [r.iteration, r[k]]; }) };
    }).filter(function (s) { return s.points.length; });
    var W = 440, H = 220, L = 44, R = 10, T = 30 + 11 * Math.ceil(series.length / 2), B = 26;
    var box = el("div", { className: "chart" });
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    var t = svg("text", { x: L, y: 14, "font-size": 12, "font-weight": 600 }); t.textContent = title; root.appendChild(t);
    box.appendChild(root);
    if (!series.length) {
      var none = svg("text", { x: L, y: H / 2, "font-size": 11, fill: "#6b7280" }); none.textContent = "not logged"; root.appendChild(none);
      return box;
    }
    var xs = [], ys = [];
    series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y0 = Math.min(0, Math.min.apply(null, ys)), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y1 = y0 + 1; }
    function X(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function Y(v) { return H - B - (v - y0) / (y1 - y0) * (H - T - B); }
    root.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" }));
    root.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#999" }));
    [y0, (y0 + y1) / 2, y1].forEach(function (v) {
      var lab = svg("text", { x: L - 4, y: Y(v) + 3, "font-size": 9, "text-anchor": "end", fill: "#555" }); lab.textContent = Number(v.toPrecision(3)).toString(); root.appendChild(lab);
    });
    [x0, x1].forEach(function (v) {
      var lab = svg("text", { x: X(v), y: H - B + 12, "font-size": 9, "text-anchor": "middle", fill: "#555" }); lab.textContent = String(Math.round(v)); root.appendChild(lab);
    });
    var xl = svg("text", { x: (W + L) / 2, y: H - 3, "font-size": 9, "text-anchor": "middle", fill: "#555" }); xl.textContent = "iteration"; root.appendChild(xl);
    (switches || []).forEach(function (s) {
      root.appendChild(svg("line", { x1: X(s.at - 0.5), y1: T, x2: X(s.at - 0.5), y2: H - B, stroke: "#d9822b", "stroke-dasharray": "3 3" }));
    });
    series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      root.appendChild(svg("polyline", { points: s.points.map(function (p) { return X(p[0]) + "," + Y(p[1]); }).join(" "), fill: "none", stroke: color, "stroke-width": 1.5 }));
      s.points.forEach(function (p) {
        var c = svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: color });
        var tip = svg("title"); tip.textContent = s.key + " @ " + p[0] + ": " + fmt(p[1], 4); c.appendChild(tip);
        root.appendChild(c);
      });
      var lg = svg("text", { x: L + (i % 2) * 190, y: 28 + Math.floor(i / 2) * 11, "font-size": 9, fill: color });
      lg.textContent = s.key; root.appendChild(lg);
    });
    return box;
  }
  function renderRun() {
    var tab = document.getElementById("tab-run");
    var rows = DATA.run.metrics.filter(function (r) { return typeof r.iteration === "number"; });
    tab.appendChild(el("h2", { text: "Run " + DATA.title + " · " + rows.length + " iterations" }));
    var switches = [];
    var timeline = el("div", { className: "timeline", id: "stage-timeline" });
    rows.forEach(function (r, i) {
      timeline.appendChild(el("span", { className: r.stage === "perform" ? "perform" : "detect", text: String(r.iteration), title: "iteration " + r.iteration + ": " + r.stage }));
      if (i > 0 && rows[i - 1].stage !== r.stage) switches.push({ at: r.iteration, from: rows[i - 1].stage, to: r.stage });
    });
    tab.appendChild(el("h3", { text: "Stage timeline (blue: detection, orange: performing)" }));
    tab.appendChild(timeline);
    tab.appendChild(el("p", { className: "muted", text: switches.length ? "Switch points: " + switches.map(function (s) { return "iteration " + s.at + " (" + s.from + " → " + s.to + ")"; }).join(", ") + " (dashed lines below)." : "No stage switch." }));
    var charts = el("div", { className: "charts" });
    [
      ["Detection", ["env/detection_accuracy", "env/na_rate", "env/spy_caught_rate"]],
      ["Held-out evaluation", ["eval/detection_accuracy", "eval/na_rate", "eval/spy_caught_rate"]],
      ["Rewards per role", ["env/reward/civilian_perform", "env/reward/spy_perform", "env/reward/civilian_vote", "env/reward/spy_vote"]],
      ["KL to the reference", ["losses/kl"]],
      ["Clip fraction · ratio", ["losses/clip_fraction", "losses/ratio"]],
      ["Violations", ["env/violation_rate", "env/forfeit_rate"]],
    ].forEach(function (panel) { charts.appendChild(lineChart(panel[0], rows, panel[1], switches)); });
    tab.appendChild(charts);
    var evalKeys = [];
    rows.forEach(function (r) { Object.keys(r).forEach(function (k) { if (k.indexOf("eval/") === 0 && evalKeys.indexOf(k) < 0) evalKeys.push(k); }); });
    tab.appendChild(el("h3", { text: "Held-out evaluation" }));
    if (evalKeys.length) {
      var head = el("tr", null, el("th", { text: "iteration" }));
      evalKeys.forEach(function (k) { head.appendChild(el("th", { className: "num", text: k.slice(5) })); });
      var table = el("table", { id: "eval-table" }, head);
      rows.filter(function (r) { return evalKeys.some(function (k) { return r[k] !== undefined; }); }).forEach(function (r) {
        var tr = el("tr", null, el("td", { className: "num", text: String(r.iteration) }));
        evalKeys.forEach(function (k) { tr.appendChild(el("td", { className: "num", text: /games$/.test(k) ? String(r[k]) : fmt(r[k]) })); });
        table.appendChild(tr);
      });
      tab.appendChild(table);
    } else {
      tab.appendChild(el("p", { className: "muted", text: "No held-out evaluation logged (eval_games = 0)." }));
    }
    tab.appendChild(el("h3", { text: "Sample games per iteration (first " + DATA.run.games_per_iteration + " of each saved buffer)" }));
    var byIter = {};
    DATA.games.forEach(function (g, i) { (byIter[g.it] = byIter[g.it] || []).push(i); });
    var list = el("ul", { className: "samples" });
    Object.keys(byIter).map(Number).sort(function (a, b) { return a - b; }).forEach(function (it) {
      var games = byIter[it], caught = games.filter(function (i) { return DATA.games[i].caught; }).length;
      var li = el("li", null, el("b", { text: "iteration " + it + " " }), el("span", { className: "muted", text: "(policy version " + DATA.games[games[0]].pv + "; spy caught in " + caught + "/" + games.length + ") " }));
      games.forEach(function (i) {
        li.appendChild(el("button", { type: "button", text: "game " + DATA.games[i].id, onclick: function () { openGame(i); } }));
      });
      list.appendChild(li);
    });
    tab.appendChild(list);
  }

  // ------------------------------------------------------------ tournament
  var COUNTS = /^(actions|games_as_spy|civilian_votes|seats|rank)$/;
  function renderTournament() {
    var tab = document.getElementById("tab-tournament"), T = DATA.tournament;
    var cfg = T.config || {};
    tab.appendChild(el("h2", { text: "Tournament " + DATA.title + " · " + (cfg.num_games === undefined ? "?" : cfg.num_games) + " games" }));
    // role-fair ratings (agents.tournament): rank 1 first, flagged (unranked) agents last
    var names = Object.keys(T.metrics).sort(function (a, b) {
      var ra = (T.ratings[a] || {}).rank, rb = (T.ratings[b] || {}).rank;
      return (ra === undefined || ra === null ? 1e9 : ra) - (rb === undefined || rb === null ? 1e9 : rb);
    });
    function R(key) { return function (n) { return (T.ratings[n] || {})[key]; }; }
    var cols = [["rank", function (n) { var r = T.ratings[n] || {}; return r.flagged ? "flagged" : r.rank; }],
      ["rating", R("mean")], ["95% low", R("low")], ["95% high", R("high")], ["P(best)", R("p_best")]];
    var metricKeys = [];
    names.forEach(function (n) { Object.keys(T.metrics[n]).forEach(function (k) { if (metricKeys.indexOf(k) < 0) metricKeys.push(k); }); });
    metricKeys.forEach(function (k) { cols.push([k, function (n) { return T.metrics[n][k]; }]); });
    var head = el("tr", null, el("th", { text: "agent" }));
    cols.forEach(function (c) { head.appendChild(el("th", { className: "num", text: c[0] })); });
    var table = el("table", { id: "ratings-table" }, head);
    names.forEach(function (n) {
      var tr = el("tr", null, el("td", { text: n }));
      cols.forEach(function (c) { var v = c[1](n); tr.appendChild(el("td", { className: "num", text: COUNTS.test(c[0]) ? String(v) : fmt(v) })); });
      table.appendChild(tr);
    });
    tab.appendChild(el("h3", { text: "Ratings and per-agent metrics" }));
    tab.appendChild(el("div", { style: "overflow:auto" }, table));
    if (T.chart && T.chart.indexOf("data:image/png;base64,") === 0) {
      tab.appendChild(el("h3", { text: "Chart" }));
      tab.appendChild(el("img", { src: T.chart, alt: "tournament chart" }));
    }
    var settings = Object.keys(cfg).filter(function (k) { return typeof cfg[k] !== "object"; }).map(function (k) { return k + "=" + cfg[k]; });
    tab.appendChild(el("p", { className: "muted", text: settings.join(" · ") }));
  }

  // ----------------------------------------------------------------- start
  if (DATA.run) renderRun();
  if (DATA.tournament) renderTournament();
  showTab(tabs[0][0]);
  applyFilters();
  // A link may open a tab or a game: page.html#tab=run, page.html#game=12&reveal=1 (game: list index).
  var wanted = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
    var kv = pair.split("=");
    if (kv.length === 2) wanted[kv[0]] = kv[1];
  });
  if (/^\d+$/.test(wanted.game || "") && Number(wanted.game) < DATA.games.length) {
    openGame(Number(wanted.game));
    if (wanted.reveal === "1") { state.reveal = true; renderGame(); }
  } else if (wanted.tab && tabs.some(function (t) { return t[0] === wanted.tab; })) {
    showTab(wanted.tab);
  }
  window.__spyrlFirstRenderMs = performance.now();
  window.__spyrlOpenGame = openGame;
  document.body.dataset.ready = "1";
})();
