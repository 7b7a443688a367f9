// Parameters checked as they are typed, against the patterns their definition declares (the
// input's data-pattern): the field is marked and a message says why, before anything is sent.
// The patterns are Python's; the browser's pattern attribute would compile them with the
// stricter "v" flag, under which a class such as [a-z_.-] is a syntax error and the check is
// silently dropped, so they are compiled here, in full-match form. A pattern JavaScript cannot
// compile is not checked here. The server checks every value again and decides; this only
// saves a round trip, and never stops a form being sent.
(function () {
  "use strict";
  function compile(pattern) {
    if (pattern === undefined) return null;
    for (const flags of ["u", ""]) {
      try { return new RegExp("^(?:" + pattern + ")$", flags); } catch (e) { /* the next form, or none */ }
    }
    return null;
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
