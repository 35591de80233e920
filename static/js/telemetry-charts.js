/* Line charts for the telemetry pages, drawn with the vendored uPlot (static/vendor/uplot).
 *
 * Each <div data-chart="ID"> reads the JSON in <script id="ID"> ({x, series[{label, values}]})
 * and draws one line per series. Series differ by dash pattern and point marker as well as
 * colour, so they can be told apart without colour; the numbers are in a table beside the
 * chart, which is what screen readers get (the plot is aria-hidden).
 */
(function () {
  "use strict";
  var COLOURS = ["#1d4ed8", "#b45309", "#047857", "#7c3aed", "#be123c", "#0e7490"];
  var DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3], [4, 4], [1, 6]];
  var MARKERS = ["circle", "square", "triangle", "diamond", "circle", "square"];

  function marker(shape) {
    return function (u, seriesIdx, show, gaps) {
      var path = new Path2D();
      var s = u.series[seriesIdx];
      var data = u.data[seriesIdx];
      var size = 4 * devicePixelRatio;
      for (var i = 0; i < data.length; i++) {
        if (data[i] == null) continue;
        var x = u.valToPos(u.data[0][i], "x", true);
        var y = u.valToPos(data[i], s.scale, true);
        if (shape === "square") path.rect(x - size, y - size, 2 * size, 2 * size);
        else if (shape === "triangle") { path.moveTo(x, y - size); path.lineTo(x + size, y + size); path.lineTo(x - size, y + size); path.closePath(); }
        else if (shape === "diamond") { path.moveTo(x, y - size); path.lineTo(x + size, y); path.lineTo(x, y + size); path.lineTo(x - size, y); path.closePath(); }
        else { path.moveTo(x + size, y); path.arc(x, y, size, 0, 2 * Math.PI); }
      }
      return { fill: path, stroke: path };
    };
  }

  function draw(el) {
    var source = document.getElementById(el.dataset.chart);
    if (!source || typeof uPlot === "undefined") return;
    var spec = JSON.parse(source.textContent);
    var unit = el.dataset.unit || "";
    var series = [{}];
    var data = [spec.x];
    spec.series.forEach(function (s, i) {
      var k = i % COLOURS.length;
      series.push({
        label: s.label,
        stroke: COLOURS[k],
        width: 2,
        dash: DASHES[k],
        spanGaps: false,
        points: { show: true, paths: marker(MARKERS[k]), fill: COLOURS[k], stroke: COLOURS[k] },
        value: function (u, v) { return v == null ? "—" : v.toFixed(1) + unit; },
      });
      data.push(s.values);
    });
    var legend = el.parentNode.querySelector(".chart__legend");
    if (legend) legend.style.display = "none"; // uPlot draws its own legend with line samples
    var width = function () { return Math.max(el.clientWidth, 280); };
    var plot = new uPlot({
      width: width(),
      height: 260,
      series: series,
      scales: { y: { range: unit.trim() === "%" ? [0, 100] : undefined } },
      axes: [
        { stroke: "#55606e", grid: { stroke: "#e4e9f0" } },
        { stroke: "#55606e", size: 56, grid: { stroke: "#e4e9f0" }, values: function (u, vals) { return vals.map(function (v) { return v + unit; }); } },
      ],
      legend: { live: true },
    }, data, el);
    window.addEventListener("resize", function () { plot.setSize({ width: width(), height: 260 }); });
  }

  function init() { document.querySelectorAll("[data-chart]").forEach(draw); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
