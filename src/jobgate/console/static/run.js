// The run page, live: the run's events from the console's stream of it (the API's SSE events,
// on the session). Each state change updates the status and appends a transition row; the
// stream ends when the run does. Without JavaScript the page is the same, reloaded by hand.
(function () {
  "use strict";
  const status = document.getElementById("run-status");
  const rows = document.getElementById("transitions");
  if (!status || !rows || !window.EventSource) return;
  const source = new EventSource(status.dataset.events);
  let following = true;  // reading the log while the run is not finished
  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
  }
  source.addEventListener("state", function (event) {
    const t = JSON.parse(event.data);
    status.textContent = t.to_status;
    if (rows.querySelector('tr[data-sequence="' + t.sequence + '"]')) return;
    const row = document.createElement("tr");
    row.dataset.sequence = t.sequence;
    const at = t.at ? new Date(t.at).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "";  // as the server writes it
    [t.sequence, t.from_status, t.to_status, at, t.actor, t.reason].forEach(function (v) { cell(row, v); });
    rows.appendChild(row);
  });
  source.addEventListener("progress", function (event) {
    const p = JSON.parse(event.data);
    const cell = document.getElementById("run-progress");
    if (!cell) return;
    if (p.fraction != null) {
      let bar = document.getElementById("run-progress-bar");
      if (!bar) {
        bar = document.createElement("progress");
        bar.id = "run-progress-bar";
        bar.max = 1;
        bar.setAttribute("aria-label", "Progress");
        cell.insertBefore(bar, cell.firstChild);
      }
      bar.value = p.fraction;
      document.getElementById("run-progress-text").textContent = " " + Math.round(p.fraction * 100) + " %";
    }
    document.getElementById("run-progress-message").textContent = p.message ? " — " + p.message : "";
  });
  // Once the run has ended, the page is drawn again from the server (``redraw.js``): its
  // attempts, artifact, final log and the actions that now apply (a retry instead of a cancel).
  source.addEventListener("terminal", function (event) {
    status.textContent = JSON.parse(event.data).status;
    document.querySelectorAll("form.run-action").forEach(function (form) { form.remove(); });
    source.close();
    following = false;
    window.jobgateRedraw();
  });
  source.addEventListener("gone", function () { source.close(); });

  // The log, followed: what was written since the page (or the last read) ended, every 2 s
  // while the run is not finished (the redrawn page then holds its end).
  const log = document.getElementById("run-log");
  function readLog() {
    if (!log) return;
    fetch(log.dataset.log + "?offset=" + encodeURIComponent(log.dataset.end), { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) return;
        const end = response.headers.get("X-Log-End");
        return response.text().then(function (text) {
          if (text) log.textContent += text;
          if (end) log.dataset.end = end;
        });
      })
      .catch(function () {})
      .finally(function () { if (following) window.setTimeout(readLog, 2000); });
  }
  window.setTimeout(readLog, 2000);
})();
