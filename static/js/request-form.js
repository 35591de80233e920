// The quota request form (templates/quotas/request_new.html): the end of a window is
// required, a permanent grant has none. Marks the end input required (and says so to
// screen readers) while "For a window" is chosen; the server checks it either way.
(function () {
  "use strict";
  var end = document.getElementById("id_ends_at");
  var radios = document.querySelectorAll('input[name="duration"]');
  if (!end || !radios.length) return;
  function sync() {
    var chosen = document.querySelector('input[name="duration"]:checked');
    var windowed = chosen && chosen.value === "window";
    end.required = !!windowed;
    end.setAttribute("aria-required", windowed ? "true" : "false");
  }
  radios.forEach(function (radio) { radio.addEventListener("change", sync); });
  sync();
})();
