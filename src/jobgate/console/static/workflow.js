// A workflow run's page, live: while the workflow is not finished, the page is drawn again from
// the server every 2 s and its content replaced in place (no reload: the reader keeps their
// place and focus); the step graph and the table then show each step's state as it changes.
(function () {
  "use strict";
  function live() {
    const title = document.getElementById("workflow-title");
    return title && title.dataset.live === "true";
  }
  function redraw() {
    if (!live()) return;
    window.jobgateRedraw().finally(function () { if (live()) window.setTimeout(redraw, 2000); });
  }
  window.setTimeout(redraw, 2000);
})();
