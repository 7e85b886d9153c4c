// steadytune studio: the pages' script. It talks to the studio only (the Content-Security-Policy allows nothing
// else); every string from a run goes into the page as text (textContent), or inside HTML the server escaped.
(function () {
  "use strict";
  var body = document.body;
  var pageName = body.dataset.page;
  var runName = body.dataset.run || "";
  var runPath = "/runs/" + encodeURIComponent(runName);
  var apiRun = "/api/runs/" + encodeURIComponent(runName);
  var PLOT_CONFIG = {responsive: true, displaylogo: false};
  window.studio = {page: pageName, polls: 0, curves: 0, answers: 0};

  // --- requests ---------------------------------------------------------------------------------------------
  function parse(response) {
    return response.text().then(function (text) {
      var data = null;
      try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
      if (!response.ok) {
        var error = new Error((data && data.error) || ("HTTP " + response.status));
        error.data = data;
        error.status = response.status;
        throw error;
      }
      return data === null ? text : data;
    });
  }

  // Everything that changes something sends X-Studio: 1 (a page of another site cannot).
  function send(method, url, data, raw) {
    var headers = {"X-Studio": "1"};
    var payload;
    if (raw !== undefined) {
      payload = raw;
      headers["Content-Type"] = "application/octet-stream";
    } else if (data !== undefined) {
      payload = JSON.stringify(data);
      headers["Content-Type"] = "application/json";
    }
    return fetch(url, {method: method, headers: headers, body: payload, credentials: "same-origin"}).then(parse);
  }

  function get(url) {
    return fetch(url, {credentials: "same-origin", cache: "no-store"}).then(parse);
  }

  // Calls fn every `ms`, one call at a time; a failed call (the studio restarting) is tried again later.
  function poll(ms, fn) {
    function tick() {
      var done = function () { window.studio.polls += 1; setTimeout(tick, ms); };
      try { Promise.resolve(fn()).then(done, done); } catch (e) { done(); }
    }
    setTimeout(tick, ms);
  }

  function drawFigures(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("div.chart[data-figure]").forEach(function (div) {
      var block = document.getElementById(div.dataset.figure);
      if (!block) return;
      var figure = JSON.parse(block.textContent);
      Plotly.react(div, figure.data, figure.layout, PLOT_CONFIG);
    });
  }

  function showError(element, message) {
    if (!element) return;
    element.textContent = message || "";
    element.hidden = !message;
  }

  // --- the runs list ------------------------------------------------------------------------------------------
  function runsPage() {
    var rows = document.getElementById("runs-rows");
    var compare = document.getElementById("compare");
    var picked = new Set();
    var shown = null;
    function sync() {
      rows.querySelectorAll("input.pick").forEach(function (box) { box.checked = picked.has(box.value); });
      compare.disabled = picked.size < 2;
    }
    rows.addEventListener("change", function (event) {
      var box = event.target;
      if (!box.classList.contains("pick")) return;
      if (box.checked) picked.add(box.value); else picked.delete(box.value);
      sync();
    });
    compare.addEventListener("click", function () {
      var query = Array.from(picked).map(function (n) { return "run=" + encodeURIComponent(n); }).join("&");
      window.location.href = "/compare?" + query;
    });
    poll(2000, function () {
      return get("/fragments/runs").then(function (html) {
        if (html !== shown) {
          shown = html;
          rows.innerHTML = html;   // server-rendered, every string escaped
          sync();
        }
      });
    });
  }

  // --- the New run form ---------------------------------------------------------------------------------------
  function newPage() {
    var upload = document.getElementById("upload");
    if (upload) {
      upload.addEventListener("change", function () {
        var file = upload.files[0];
        if (!file) return;
        file.text().then(function (text) {
          return send("POST", "/api/uploads?filename=" + encodeURIComponent(file.name), undefined, text);
        }).then(function (result) {
          window.location.href = result.url;
        }).catch(function (error) {
          showError(document.getElementById("upload-error"), error.message);
        });
      });
    }
    var form = document.getElementById("run-form");
    if (!form) return;
    var nameInput = document.getElementById("name");
    var nprocInput = document.getElementById("nproc");
    var extra = document.getElementById("extra");
    var command = document.getElementById("command");
    var yaml = document.getElementById("yaml");
    var general = document.getElementById("general-errors");
    var launch = document.getElementById("launch");
    var status = document.getElementById("launch-status");
    var outputDir = document.getElementById("output-dir");
    var managed = form.querySelector("[data-managed]");
    var sequence = 0;
    var timer = null;

    function payload() {
      var values = {};
      form.querySelectorAll("[data-key]").forEach(function (el) { values[el.dataset.key] = el.value; });
      return {source: {kind: form.dataset.kind, ref: form.dataset.ref}, name: nameInput.value,
              nproc: nprocInput.value, values: values, extra: extra.value};
    }

    function show(result) {
      var errors = result.errors || {};
      var left = (result.general || []).slice();
      form.querySelectorAll(".field-error").forEach(function (slot) { slot.textContent = ""; });
      form.querySelectorAll(".invalid").forEach(function (el) { el.classList.remove("invalid"); });
      Object.keys(errors).forEach(function (key) {
        var slot = form.querySelector('.field-error[data-error-for="' + CSS.escape(key) + '"]');
        if (!slot) { left.push(key + ": " + errors[key]); return; }
        slot.textContent = errors[key];
        var field = slot.closest(".field") || slot.closest("details");
        if (field) field.classList.add("invalid");
        var section = slot.closest("details");
        if (section) section.open = true;
      });
      form.querySelectorAll("details.section").forEach(function (section) {
        var count = section.querySelectorAll(".field.invalid").length + (section.classList.contains("invalid") ? 1 : 0);
        section.querySelector(".section-errors").textContent = count ? count + (count > 1 ? " errors" : " error") : "";
      });
      showError(general, left.join("\n"));
      if (result.command !== undefined) command.textContent = result.command;
      if (result.yaml !== undefined) yaml.textContent = result.yaml;
      if (result.output_dir !== undefined) {
        outputDir.textContent = result.output_dir;
        if (managed) managed.value = result.output_dir;
      }
      form.dataset.ok = result.ok ? "1" : "0";
      form.dataset.checked = String(sequence);
    }

    function check() {
      var mine = ++sequence;
      return send("POST", "/api/check", payload()).then(function (result) {
        if (mine === sequence) show(result);
      }).catch(function (error) { showError(general, error.message); });
    }

    function later() {
      clearTimeout(timer);
      form.dataset.checked = "";
      timer = setTimeout(check, 250);
    }
    form.addEventListener("input", later);
    form.addEventListener("change", later);
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      clearTimeout(timer);
      launch.disabled = true;
      status.textContent = "launching…";
      send("POST", "/api/launch", payload()).then(function (result) {
        status.textContent = "launched: " + result.command;
        window.location.href = result.url;
      }).catch(function (error) {
        launch.disabled = false;
        status.textContent = "not launched: fix what is marked above";
        if (error.data && (error.data.errors || error.data.general)) {
          sequence += 1;
          show({errors: error.data.errors, general: error.data.general, ok: false});
        } else {
          showError(general, error.message);
        }
        body.dataset.launch = "refused";
      });
    });
    check();
  }

  // --- a run ----------------------------------------------------------------------------------------------------
  function runPage() {
    drawFigures(document);
    var header = document.getElementById("run-header");
    var jobs = document.getElementById("jobs-body");
    var panels = document.getElementById("panels");
    var actionError = document.getElementById("action-error");
    var versions = {curves: header.dataset.versions, panels: panels.dataset.versions};
    var last = {header: null, jobs: null};

    function curves() {
      return get(apiRun + "/curves").then(function (result) {
        var grid = document.getElementById("curve-grid");
        var added = false;
        result.charts.forEach(function (chart) {   // every new chart's place first: the grid's columns settle
          if (document.getElementById(chart.id)) return;
          var div = document.createElement("div");
          div.className = "chart";
          div.id = chart.id;
          grid.appendChild(div);
          added = true;
        });
        result.charts.forEach(function (chart) {
          Plotly.react(document.getElementById(chart.id), chart.figure.data, chart.figure.layout, PLOT_CONFIG);
        });
        if (added) {   // the charts drawn before the grid changed take their new width
          grid.querySelectorAll("div.chart").forEach(function (div) { Plotly.Plots.resize(div); });
        }
        document.getElementById("no-curves").hidden = result.charts.length > 0;
        window.studio.curves += 1;
      });
    }

    function enable(can) {
      document.querySelectorAll("#actions [data-action]").forEach(function (button) {
        button.disabled = !can[button.dataset.action];
      });
      var chat = document.getElementById("chat-link");
      if (can.chat) chat.removeAttribute("aria-disabled"); else chat.setAttribute("aria-disabled", "true");
    }

    function state() {
      return get(apiRun + "/state").then(function (s) {
        if (s.header_html !== last.header) { last.header = s.header_html; header.innerHTML = s.header_html; }
        if (s.jobs_html !== last.jobs) { last.jobs = s.jobs_html; jobs.innerHTML = s.jobs_html; }
        enable(s.can);
        body.dataset.status = s.status;
        var work = [];
        if (s.versions.curves !== versions.curves) {
          versions.curves = s.versions.curves;
          work.push(curves());
        }
        if (s.versions.panels !== versions.panels) {
          versions.panels = s.versions.panels;
          work.push(get("/fragments" + runPath + "/panels").then(function (html) {
            panels.innerHTML = html;   // server-rendered, every string escaped
            drawFigures(panels);
          }));
        }
        return Promise.all(work);
      });
    }

    // The grants ticked in the run's header (what its config asks for that only the user grants), key -> value.
    function ticked() {
      var out = {};
      document.querySelectorAll("#grants input.grant:checked").forEach(function (box) {
        out[box.dataset.key] = JSON.parse(box.dataset.value);
      });
      return out;
    }

    function act(action, button, extra) {
      var url = apiRun + "/" + action;
      var call;
      if (action === "eval") {
        var zero = document.getElementById("eval-zero-shot");
        var review = document.getElementById("eval-review");
        call = send("POST", url, {zero_shot: zero ? zero.checked : false, grant: ticked(),
                                  review_errors: review ? parseInt(review.value || "0", 10) : 0});
      } else if (action === "resume") {
        call = send("POST", url, {grant: ticked()});
      } else if (action === "stop") {
        call = send("POST", url, extra || {});
      } else if (action === "export") {
        var kind = document.querySelector("input[name=export-kind]:checked").value;
        call = send("POST", url, {kind: kind, quant: document.getElementById("export-quant").value});
      } else if (action === "predict") {
        var file = document.getElementById("predict-file").files[0];
        if (!file) { showError(actionError, "choose a file to predict on first"); return; }
        call = send("POST", url + "?filename=" + encodeURIComponent(file.name), undefined, file);
      } else {
        call = send("POST", url, {});
      }
      button.disabled = true;
      showError(actionError, "");
      call.then(state).catch(function (error) {
        button.disabled = false;
        var proc = error.status === 409 && error.data && error.data.confirm;
        if (proc && window.confirm("Stop process " + proc.pid + ", started " + proc.started + "?\n\n" +
                                   proc.command + "\n\n(named by " + proc.source + "; the studio did not start it)")) {
          act(action, button, {confirm_pid: proc.pid});
          return;
        }
        showError(actionError, error.message);
      });
    }

    document.addEventListener("click", function (event) {
      var button = event.target.closest("button[data-action]");
      if (button && !button.disabled) act(button.dataset.action, button);
    });
    document.getElementById("chat-link").addEventListener("click", function (event) {
      if (this.getAttribute("aria-disabled") === "true") event.preventDefault();
    });
    state();
    poll(1000, state);
  }

  // --- chat -----------------------------------------------------------------------------------------------------
  function chatPage() {
    var form = document.getElementById("chat-form");
    var text = document.getElementById("chat-text");
    var send_ = document.getElementById("chat-send");
    var status = document.getElementById("chat-status");
    var withBase = document.getElementById("chat-base");
    var greedy = document.getElementById("chat-greedy");
    var maxNew = document.getElementById("chat-max");
    var system = document.getElementById("chat-system");
    var history = {run: [], base: []};

    function bubble(side, role, content) {
      var box = document.createElement("div");
      box.className = "message " + role;
      box.textContent = content;
      document.getElementById("messages-" + side).appendChild(box);
      return box;
    }

    function scores(box, event) {
      box.textContent = "";
      var head = document.createElement("div");
      head.className = "label";
      head.textContent = event.label + " (p=" + event.probability.toFixed(3) + ")";
      box.appendChild(head);
      var table = document.createElement("table");
      table.className = "scores";
      Object.keys(event.probabilities).forEach(function (label) {
        var row = table.insertRow();
        row.insertCell().textContent = label;
        var cell = row.insertCell();
        var bar = document.createElement("progress");
        bar.max = 1;
        bar.value = event.probabilities[label];
        cell.appendChild(bar);
        row.insertCell().textContent = event.probabilities[label].toFixed(3);
      });
      box.appendChild(table);
    }

    document.getElementById("chat-reset").addEventListener("click", function () {
      history = {run: [], base: []};
      document.getElementById("messages-run").textContent = "";
      document.getElementById("messages-base").textContent = "";
      status.textContent = "";
    });

    withBase.addEventListener("change", function () {
      document.querySelector('.chat-col[data-side="base"]').hidden = !withBase.checked;
    });

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var message = text.value.trim();
      if (!message) return;
      var sides = withBase.checked ? ["run", "base"] : ["run"];
      var answers = {};
      sides.forEach(function (side) {
        bubble(side, "user", message);
        answers[side] = bubble(side, "assistant pending", "");
      });
      text.value = "";
      send_.disabled = true;
      body.dataset.chat = "busy";
      status.textContent = "sending…";
      var request = {text: message, history: history, side_by_side: withBase.checked,
                     greedy: greedy ? greedy.checked : false,
                     max_new_tokens: maxNew ? parseInt(maxNew.value || "0", 10) || null : null,
                     system: system ? system.value : null};
      var failed = false;

      function handle(event) {
        if (event.error) { failed = true; status.textContent = "error: " + event.error; return; }
        if (event.status) { status.textContent = event.status + "…"; return; }
        if (event.ready) {
          if (event.note) status.textContent = event.note;
          if (event.sides.indexOf("base") < 0 && answers.base) { answers.base.remove(); delete answers.base; }
          return;
        }
        var box = answers[event.side];
        if (!box) return;
        if (event.delta !== undefined) box.textContent += event.delta;
        if (event.label !== undefined) scores(box, event);
        if (event.done) box.classList.remove("pending");
      }

      fetch(apiRun + "/chat", {method: "POST", credentials: "same-origin",
                               headers: {"X-Studio": "1", "Content-Type": "application/json"},
                               body: JSON.stringify(request)}).then(function (response) {
        if (!response.ok) return parse(response);
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            buffer += decoder.decode(chunk.value || new Uint8Array(), {stream: !chunk.done});
            var parts = buffer.split("\n\n");
            buffer = parts.pop();
            parts.forEach(function (part) {
              if (part.indexOf("data: ") !== 0) return;
              var data = part.slice(6);
              if (data === "[DONE]") return;
              handle(JSON.parse(data));
            });
            if (!chunk.done) return pump();
          });
        }
        return pump();
      }).then(function () {
        Object.keys(answers).forEach(function (side) {
          history[side].push({role: "user", content: message});
          history[side].push({role: "assistant", content: answers[side].textContent});
        });
        if (!failed) status.textContent = "";
        window.studio.answers += 1;
      }).catch(function (error) {
        status.textContent = "error: " + error.message;
      }).then(function () {
        send_.disabled = false;
        body.dataset.chat = "idle";
      });
    });
  }

  // --- doctor -----------------------------------------------------------------------------------------------------
  function doctorPage() {
    var button = document.getElementById("doctor-run");
    var holder = document.getElementById("doctor-body");
    function refresh() {
      return get("/api/doctor").then(function (s) {
        holder.innerHTML = s.html;   // server-rendered, every string escaped
        button.disabled = s.running;
        if (s.running) setTimeout(refresh, 1000); else body.dataset.doctor = "done";
      });
    }
    function run() {
      button.disabled = true;
      body.dataset.doctor = "running";
      send("POST", "/api/doctor", {}).then(refresh).catch(function (error) {
        button.disabled = false;
        holder.textContent = "error: " + error.message;
      });
    }
    button.addEventListener("click", run);
    if (button.dataset.auto === "1") run();
    else if (document.getElementById("doctor-running")) refresh();
    else body.dataset.doctor = "done";
  }

  var pages = {runs: runsPage, "new": newPage, run: runPage, chat: chatPage, doctor: doctorPage};
  if (pages[pageName]) pages[pageName]();
  body.dataset.ready = "1";
})();
