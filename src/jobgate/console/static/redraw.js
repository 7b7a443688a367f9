// The page drawn again from the server and its content replaced in place (no reload: the reader
// keeps their place, focus and the page's scripts' state). Shared by the run and workflow pages.
window.jobgateRedraw = function () {
  "use strict";
  return fetch(window.location.href, { credentials: "same-origin" })
    .then(function (response) { return response.ok ? response.text() : null; })
    .then(function (html) {
      if (!html) return;
      const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
      const main = document.getElementById("main");
      if (fresh && main) main.replaceChildren.apply(main, Array.from(fresh.childNodes));
    })
    .catch(function () {});
};
