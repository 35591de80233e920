// Sortable tables (issue #12): <table data-sortable>. Each column header of the table's head
// gets a button; pressing it sorts the body rows by that column (numbers as numbers, a cell's
// data-sort value when it has one, text otherwise; empty or "—" cells last), again to
// reverse, and sets aria-sort on the header so screen readers say the order. Without
// JavaScript the table keeps the server's order. Paginated tables sort on the server.
(function () {
  "use strict";
  var NUMBER = /^[-+]?\d[\d,]*(\.\d+)?\s*(%|[a-zA-Z/-]*)?$/;

  function value(row, column) {
    var cell = row.cells[column];
    if (!cell) return null;
    var raw = cell.getAttribute("data-sort");
    if (raw === null) raw = cell.textContent.replace(/\s+/g, " ").trim();
    if (raw === "" || raw === "—" || raw === "-") return null;
    if (NUMBER.test(raw)) return parseFloat(raw.replace(/,/g, ""));
    return raw.toLowerCase();
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null) return 1; // missing values last, whichever the direction
    if (b === null) return -1;
    if (typeof a === typeof b) return a < b ? -1 : 1;
    return typeof a === "number" ? -1 : 1;
  }

  function sort(table, header, column) {
    var descending = header.getAttribute("aria-sort") === "ascending";
    table.querySelectorAll("thead th[aria-sort]").forEach(function (th) {
      th.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var rows = Array.prototype.slice.call(body.rows);
      var keyed = rows.map(function (row, i) { return [value(row, column), i, row]; });
      keyed.sort(function (x, y) {
        var c = compare(x[0], y[0]);
        if (c !== 0 && x[0] !== null && y[0] !== null && descending) c = -c;
        return c || x[1] - y[1];
      });
      keyed.forEach(function (k) { body.appendChild(k[2]); });
    });
  }

  document.querySelectorAll("table[data-sortable]").forEach(function (table) {
    var head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head) return;
    Array.prototype.forEach.call(head.cells, function (header, column) {
      if (header.hasAttribute("data-nosort")) return;
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort-button";
      while (header.firstChild) button.appendChild(header.firstChild);
      header.appendChild(button);
      button.addEventListener("click", function () { sort(table, header, column); });
    });
  });
})();
