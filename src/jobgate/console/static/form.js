// Parameters checked as they are typed, against the patterns their definition declares (the
// input's data-pattern): the field is marked and a message says why, before anything is sent.
// The patterns are Python's; the browser's pattern attribute would compile them with the
// stricter "v" flag, under which a class such as [a-z_.-] is a syntax error and the check is
// silently dropped, so they are compiled here, in full-match form, with the "u" flag only: without
// it JavaScript reads some Python syntax as something else (\Z as the letter Z, {,8} as text) and
// would call good values bad. A pattern that does not compile so is not checked here. The server
// checks every value again and decides; this only saves a round trip, and never stops a form.
(function () {
  "use strict";
  function compile(pattern) {
    if (pattern === undefined) return null;
    try { return new RegExp("^(?:" + pattern + ")$", "u"); } catch (e) { return null; }
  }
  function check(input, expected) {
    const hint = document.getElementById(input.getAttribute("aria-describedby"));
    const mismatch = input.value !== "" && expected !== null && !expected.test(input.value);
    const bad = mismatch || (input.value !== "" && !input.checkValidity());
    input.setAttribute("aria-invalid", bad ? "true" : "false");
    if (!hint) return;
    if (!bad) hint.textContent = "";
    else if (mismatch) hint.textContent = "Does not match the declared pattern " + input.dataset.pattern + ".";
    else hint.textContent = input.validationMessage;
  }
  document.querySelectorAll("input.checked").forEach(function (input) {
    const expected = compile(input.dataset.pattern);
    input.addEventListener("input", function () { check(input, expected); });
    check(input, expected);
  });
})();
