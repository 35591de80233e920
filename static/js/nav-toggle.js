/* The header's menu button (templates/base.html): below 760 px the main navigation folds
 * behind it; the button toggles it and says so with aria-expanded. Escape closes it and
 * puts the focus back on the button. Without JavaScript the button stays hidden and the
 * navigation simply wraps. A static file: the Content-Security-Policy allows no inline
 * script. */
(function () {
  "use strict";
  var header = document.querySelector(".site-header");
  var button = header && header.querySelector(".nav-toggle");
  var nav = button && document.getElementById(button.getAttribute("aria-controls"));
  if (!nav) return;
  function set(open) {
    button.setAttribute("aria-expanded", open ? "true" : "false");
    nav.classList.toggle("is-open", open);
  }
  header.classList.add("site-header--js");
  button.hidden = false;
  set(false);
  button.addEventListener("click", function () {
    set(button.getAttribute("aria-expanded") !== "true");
  });
  nav.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && nav.classList.contains("is-open")) {
      set(false);
      button.focus();
    }
  });
})();
