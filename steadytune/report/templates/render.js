// steadytune report: draws every figure from its JSON block and switches the curves between optimizer steps
// and target tokens trained (metrics.jsonl "tokens"). Reads only this page; makes no request.
(function () {
  "use strict";
  var started = performance.now();
  var tokens = JSON.parse(document.getElementById("tokens-tables").textContent);
  var charts = [];
  var stepsOf = new Map();  // chart div -> each trace's x values in optimizer steps

  document.querySelectorAll("div.chart[data-figure]").forEach(function (div) {
    var figure = JSON.parse(document.getElementById(div.dataset.figure).textContent);
    Plotly.newPlot(div, figure.data, figure.layout, {responsive: true, displaylogo: false});
    charts.push(div);
    if (div.dataset.steps === "1") {
      stepsOf.set(div, div.data.map(function (trace) { return Array.from(trace.x || []); }));
    }
  });

  // Tokens seen at a step, interpolated between logged steps ([[steps], [tokens]] per run).
  function tokensAt(table, step) {
    var xs = table[0], ys = table[1], lo = 0, hi = xs.length - 1;
    if (!xs.length) return NaN;
    if (step >= xs[hi]) return ys[hi];
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] <= step) lo = mid; else hi = mid;
    }
    return ys[lo] + (ys[hi] - ys[lo]) * (step - xs[lo]) / Math.max(xs[hi] - xs[lo], 1);
  }

  function showAxis(mode) {
    stepsOf.forEach(function (steps, div) {
      var xs = steps.map(function (traceSteps, i) {
        if (mode !== "tokens") return traceSteps;
        var run = (div.data[i].meta || [0])[0];
        return traceSteps.map(function (s) { return tokensAt(tokens[run], s); });
      });
      Plotly.update(div, {x: xs}, {"xaxis.title.text": mode === "tokens" ? "target tokens trained" : "optimizer step"});
    });
  }

  document.querySelectorAll("input[name=x-axis]").forEach(function (input) {
    input.addEventListener("change", function () { if (input.checked) showAxis(input.value); });
  });

  // For the browser test: how long drawing took, and how many figures were drawn.
  window.steadytuneReport = {charts: charts.length, drawMs: performance.now() - started, readyAt: performance.now()};
  document.body.dataset.rendered = "1";
})();
