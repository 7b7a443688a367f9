// Parameters checked as they are typed, against the patterns their definition declares (the
// input's pattern attribute): the field is marked and a message says why, before anything is
// sent. The server checks the same patterns again; this only saves a round trip.
(function () {
  "use strict";
  function check(input) {
    const hint = document.getElementById(input.getAttribute("aria-describedby"));
    const bad = input.value !== "" && !input.checkValidity();
    input.setAttribute("aria-invalid", bad ? "true" : "false");
    if (!hint) return;
    if (!bad) hint.textContent = "";
    else if (input.validity.patternMismatch) hint.textContent = "Does not match the declared pattern " + input.pattern + ".";
    else hint.textContent = input.validationMessage;
  }
  document.querySelectorAll("input.checked").forEach(function (input) {
    input.addEventListener("input", function () { check(input); });
    check(input);
  });
})();
