/* Selects the whole value of [data-select-on-focus] fields when they get focus (the new
 * API token on the account page), so it can be copied at once. Kept out of the page's
 * HTML: the Content-Security-Policy allows no inline event handlers. */
(function () {
  "use strict";
  document.querySelectorAll("[data-select-on-focus]").forEach(function (field) {
    field.addEventListener("focus", function () {
      field.select();
    });
  });
})();
