/* Copy buttons: <button data-copy="ID" hidden> copies the value (or text) of the element
 * with that id and says so in [data-copy-status="ID"]. The button stays hidden without
 * JavaScript (selecting the field still works). No inline handlers: the CSP allows none. */
(function () {
  "use strict";
  function say(id, text) {
    var status = document.querySelector('[data-copy-status="' + id + '"]');
    if (status) status.textContent = text;
  }
  function fallback(field) {
    field.focus();
    if (field.select) field.select();
    try {
      return document.execCommand("copy");
    } catch (e) {
      return false;
    }
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var id = button.getAttribute("data-copy");
    var field = document.getElementById(id);
    if (!field) return;
    button.hidden = false;
    button.addEventListener("click", function () {
      var value = "value" in field ? field.value : field.textContent;
      var done = function () { say(id, "Copied to the clipboard."); };
      var failed = function () {
        if (fallback(field)) done();
        else say(id, "Could not copy: select the field and press Ctrl+C (⌘C).");
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(value).then(done, failed);
      } else {
        failed();
      }
    });
  });
})();
