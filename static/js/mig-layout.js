/* Live validation of the MIG request form (templates/mig/request_new.html).
 *
 * Progressive enhancement: without this script every product's profile numbers are shown
 * and the server checks the layout on submit. With it, only the chosen product's numbers
 * are shown, and each change POSTs the layout to /api/v1/mig-layouts/validate/ (session
 * auth, CSRF header) and redraws the proposed GPU and the error list in place. The drawing
 * mirrors templates/mig/_gpu.html; the placements come from the server, never from here.
 */
(function () {
  "use strict";

  var form = document.getElementById("mig-request-form");
  if (!form || !window.fetch) return;
  var catalog = JSON.parse(document.getElementById("mig-catalog").textContent);
  var strategies = JSON.parse(document.getElementById("mig-strategies").textContent);
  var url = form.getAttribute("data-validate-url");
  var product = form.elements.product;
  var namespace = form.elements.namespace;
  var errorsBox = form.querySelector("[data-mig-errors]");
  var drawingBox = form.querySelector("[data-mig-drawing]");
  var csrf = form.elements.csrfmiddlewaretoken.value;
  var timer = null;
  var sequence = 0;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function span(a, b) {
    return a === b ? String(a) : a + "-" + b;
  }

  function chosenFieldset() {
    return form.querySelector('fieldset[data-product="' + product.value + '"]');
  }

  function showChosen() {
    var sets = form.querySelectorAll("fieldset[data-product]");
    for (var i = 0; i < sets.length; i++) {
      sets[i].hidden = sets[i].getAttribute("data-product") !== product.value;
    }
  }

  /* {profile: count} of the chosen product; bad entries are listed, not guessed. */
  function readLayout() {
    var layout = {};
    var bad = [];
    var fs = chosenFieldset();
    if (!fs) return { layout: layout, bad: bad };
    var inputs = fs.querySelectorAll("input[data-profile]");
    for (var i = 0; i < inputs.length; i++) {
      var raw = inputs[i].value.trim();
      if (raw === "") continue;
      var name = inputs[i].getAttribute("data-profile");
      if (!/^\d+$/.test(raw)) {
        bad.push(name + ": enter a whole number of instances (0 or more).");
      } else if (parseInt(raw, 10) > 0) {
        layout[name] = parseInt(raw, 10);
      }
    }
    return { layout: layout, bad: bad };
  }

  function showErrors(messages) {
    errorsBox.textContent = "";
    var fs = chosenFieldset();
    if (!messages.length) {
      if (fs) fs.removeAttribute("aria-describedby");
      if (fs) fs.classList.remove("mig-profiles--invalid");
      return;
    }
    var banner = el("div", "banner banner--error");
    banner.id = "id_layout_error";
    banner.appendChild(el("strong", "", "This layout cannot be requested."));
    var list = el("ul", "error-list");
    messages.forEach(function (m) {
      list.appendChild(el("li", "", m));
    });
    banner.appendChild(list);
    errorsBox.appendChild(banner);
    if (fs) {
      fs.setAttribute("aria-describedby", "id_layout_error");
      fs.classList.add("mig-profiles--invalid");
    }
  }

  /* The same markup as templates/mig/_gpu.html, from the API's placements. */
  function drawGpu(productName, placements, title) {
    var info = catalog[productName];
    var counts = {};
    var words = [];
    placements.forEach(function (p) {
      counts[p.profile] = (counts[p.profile] || 0) + 1;
    });
    var summary = Object.keys(counts).map(function (name) {
      return counts[name] > 1 ? counts[name] + " x " + name : name;
    }).join(" + ");
    var figure = el("figure", "mig-gpu");
    var caption = el("figcaption", "mig-gpu__title");
    caption.appendChild(el("strong", "", title));
    caption.appendChild(document.createTextNode(" "));
    caption.appendChild(el("span", "muted", summary));
    figure.appendChild(caption);
    var grid = el("div", "mig-grid mig-grid--" + info.memory_slices);
    grid.setAttribute("role", "img");
    var i;
    for (i = 0; i < info.memory_slices; i++) {
      grid.appendChild(el("span", "mig-grid__axis mig-row-1 mig-col-" + i, String(i)));
    }
    grid.appendChild(el("span", "mig-grid__head mig-row-2", "compute"));
    for (i = 0; i < info.memory_slices; i++) {
      var none = i >= info.compute_slices ? " mig-grid__slot--none" : "";
      grid.appendChild(el("span", "mig-grid__slot mig-row-2 mig-col-" + i + none));
    }
    grid.appendChild(el("span", "mig-grid__head mig-row-3", "memory"));
    for (i = 0; i < info.memory_slices; i++) {
      grid.appendChild(el("span", "mig-grid__slot mig-row-3 mig-col-" + i));
    }
    placements.forEach(function (p) {
      var g = info.profiles[p.profile];
      var colour = (info.order.indexOf(p.profile) % 6) + 1;
      var cstart = Math.min(p.start, info.compute_slices - g);
      var end = p.start + p.size - 1;
      var compute = el("span", "mig-block mig-block--compute mig-c" + colour + " mig-row-2 mig-col-" +
        cstart + " mig-w" + g, g + "g");
      compute.title = p.profile + ": compute slices " + cstart + "-" + (cstart + g - 1);
      var memory = el("span", "mig-block mig-c" + colour + " mig-row-3 mig-col-" + p.start +
        " mig-w" + p.size, p.profile);
      memory.title = p.profile + ": memory slices " + p.start + "-" + end;
      memory.setAttribute("data-profile", p.profile);
      memory.setAttribute("data-start", p.start);
      memory.setAttribute("data-end", end);
      grid.appendChild(compute);
      grid.appendChild(memory);
      words.push(p.profile + " on memory slices " + span(p.start, end) + " and compute slices " +
        span(cstart, cstart + g - 1));
    });
    grid.setAttribute("aria-label", title + ": " + words.join("; ") + ".");
    figure.appendChild(grid);
    return figure;
  }

  function showDrawing(node) {
    drawingBox.textContent = "";
    if (node) drawingBox.appendChild(node);
  }

  /* A 400 answer: {"detail": ..., "layout": [...], ...}: every message, the detail last. */
  function messagesOf(body) {
    var out = [];
    Object.keys(body || {}).forEach(function (key) {
      if (key === "detail") return;
      [].concat(body[key]).forEach(function (m) {
        if (typeof m === "string") out.push(m);
        else if (m && typeof m === "object") out = out.concat(messagesOf(m));
      });
    });
    if (!out.length && body && body.detail) out.push(String(body.detail));
    return out;
  }

  function validate() {
    var read = readLayout();
    var mine = ++sequence;
    if (read.bad.length) {
      showErrors(read.bad);
      showDrawing(null);
      return;
    }
    if (!Object.keys(read.layout).length) {
      showErrors([]);
      showDrawing(el("p", "muted", "Enter instances above to see where they sit on the GPU."));
      return;
    }
    var strategy = strategies[namespace.value + "|" + product.value] || "mixed";
    fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "X-CSRFToken": csrf
      },
      body: JSON.stringify({ product: product.value, layout: read.layout, strategy: strategy })
    }).then(function (response) {
      return response.json().then(function (body) {
        return { ok: response.ok, body: body };
      });
    }).then(function (answer) {
      if (mine !== sequence) return; // a newer change is on its way
      if (answer.ok && answer.body.valid) {
        showErrors([]);
        showDrawing(drawGpu(answer.body.product, answer.body.placements, "Each requested GPU"));
      } else {
        showErrors(answer.ok ? answer.body.errors : messagesOf(answer.body));
        showDrawing(null);
      }
    }).catch(function () {
      if (mine !== sequence) return;
      showErrors([]);
      showDrawing(el("p", "muted", "Could not check the layout just now; it is checked when you submit."));
    });
  }

  function later() {
    window.clearTimeout(timer);
    timer = window.setTimeout(validate, 250);
  }

  form.addEventListener("input", function (event) {
    if (event.target.hasAttribute("data-profile")) later();
  });
  product.addEventListener("change", function () {
    showChosen();
    validate();
  });
  namespace.addEventListener("change", later);
  showChosen();
  if (Object.keys(readLayout().layout).length) validate();
})();
