/* Swagger UI at /api/docs/ (templates/drf_spectacular/swagger_ui.html): each operation's
 * summary is a <button> with its path inside as a deep link (<a href="#/tag/op">), an
 * interactive control nested in another (axe nested-interactive; screen readers announce
 * neither well). The link's href is dropped: the button still expands the operation and
 * deep linking still puts #/tag/op in the address bar. Swagger UI renders after load and
 * on every expand, so new summaries are fixed as they appear. */
(function () {
  "use strict";

  var root = document.getElementById("swagger-ui");
  if (!root || !window.MutationObserver) return;

  function fix() {
    var links = root.querySelectorAll(".opblock-summary-control a[href]");
    for (var i = 0; i < links.length; i++) links[i].removeAttribute("href");
  }

  new MutationObserver(fix).observe(root, { childList: true, subtree: true });
  fix();
})();
