// Map page: server-drawn tiles of one attribute (Leaflet), time and level controls, colour range, a
// click that fetches the grid cell's (station's, node's) time series and draws it as an inline SVG line,
// and the query builder's records (?sql=…) as dots. window.dstpMap, dstpTilesReady and dstpMoving are
// there for the browser tests.
"use strict";

(function () {
  const page = JSON.parse(document.getElementById("map-data").textContent);
  const $ = (id) => document.getElementById(id);
  const map = L.map("map", { worldCopyJump: true, fadeAnimation: false });
  window.dstpMap = map;
  window.dstpMoving = false;
  map.on("movestart zoomstart", () => { window.dstpMoving = true; });
  map.on("moveend zoomend", () => { window.dstpMoving = false; });
  if (page.bounds) map.fitBounds(page.bounds); else map.setView([20, 0], 1);

  // The query builder's records (/datasets/{id}/map?sql=…): each a dot at its latitude and longitude columns.
  const MAX_RECORDS = 5000;
  async function showRecords(sql) {
    const r = await fetch("/query?" + new URLSearchParams({ sql, format: "json", limit: String(MAX_RECORDS) }));
    if (!r.ok) {
      let message = r.statusText;
      try { message = (await r.json()).error.message; } catch (err) { /* not JSON */ }
      $("map-records").textContent = "the query's records could not be read: " + message;
      return;
    }
    const records = await r.json();
    const keys = records.length ? Object.keys(records[0]) : [];
    const latKey = keys.find((k) => /^(lat|latitude|nav_lat)$/i.test(k));
    const lonKey = keys.find((k) => /^(lon|longitude|nav_lon)$/i.test(k));
    if (records.length && (!latKey || !lonKey)) {
      $("map-records").textContent = "the query's records have no latitude and longitude columns: select lat and lon too";
      return;
    }
    const group = L.layerGroup().addTo(map);
    let shown = 0;
    for (const rec of records) {
      const lat = rec[latKey], lon = rec[lonKey];
      if (typeof lat !== "number" || typeof lon !== "number") continue;
      const text = keys.map((k) => `${k} = ${rec[k]}`).join("<br>");
      L.circleMarker([lat, ((lon + 540) % 360) - 180], { radius: 3, color: "#c2410c", weight: 1, fillOpacity: 0.8 })
        .bindTooltip(text).addTo(group);
      shown += 1;
    }
    document.body.dataset.records = String(shown);
    $("map-records").textContent = `${shown.toLocaleString()} record${shown === 1 ? "" : "s"} of the query on the map` +
      (records.length >= MAX_RECORDS ? ` (the first ${MAX_RECORDS.toLocaleString()})` : "") + `: ${sql}`;
  }
  if (page.sql) showRecords(page.sql);
  if (!page.variable) return;

  function choice() {
    const c = { colormap: $("map-colormap").value, vmin: $("map-vmin").value, vmax: $("map-vmax").value };
    if ($("map-time")) c.time = page.times[Number($("map-time").value)];
    if ($("map-level")) c.elevation = $("map-level").value;
    return c;
  }
  function tileUrl() {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(choice())) if (String(v).trim() !== "") params.set(k, v);
    return `/tiles/${encodeURIComponent(page.id)}/${encodeURIComponent(page.variable)}/{z}/{x}/{y}.png?` +
      params.toString();
  }
  function legendUrl() {
    const c = choice();
    const params = new URLSearchParams({ SERVICE: "WMS", REQUEST: "GetLegendGraphic", FORMAT: "image/png",
      LAYER: `${page.id}/${page.variable}`, STYLE: c.colormap, COLORSCALERANGE: `${c.vmin},${c.vmax}` });
    if (c.time) params.set("TIME", c.time);
    if (c.elevation) params.set("ELEVATION", c.elevation);
    return "/wms?" + params.toString();
  }
  // opaque and without fade, so a drawn pixel has the colour bar's colour
  const layer = L.tileLayer(tileUrl(), { maxZoom: 10, opacity: 1, attribution: page.id });
  window.dstpTilesReady = false;
  window.dstpLoads = 0;
  layer.on("loading", () => { window.dstpTilesReady = false; });
  layer.on("load", () => { window.dstpTilesReady = true; window.dstpLoads += 1; });
  layer.on("tileerror", () => { $("map-error").textContent = "a tile could not be drawn"; $("map-error").hidden = false; });
  layer.addTo(map);
  $("map-legend").src = legendUrl();

  function redraw() {
    const low = Number($("map-vmin").value), high = Number($("map-vmax").value);
    if ($("map-vmin").value !== "" && $("map-vmax").value !== "" && !(low < high)) {
      // a range being typed (min raised past the old max): wait for a range that draws
      $("map-error").textContent = `min ${low} must be below max ${high}`;
      $("map-error").hidden = false;
      return;
    }
    $("map-error").hidden = true;
    if ($("map-time")) $("map-time-label").textContent = page.times[Number($("map-time").value)];
    layer.setUrl(tileUrl());
    $("map-legend").src = legendUrl();
  }
  for (const id of ["map-colormap", "map-vmin", "map-vmax", "map-time", "map-level"]) {
    if ($(id)) $(id).addEventListener("change", redraw);
  }
  if ($("map-time")) $("map-time").addEventListener("input", () => {
    $("map-time-label").textContent = page.times[Number($("map-time").value)];
  });
  $("map-variable").addEventListener("change", () => $("map-form").submit());

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  }
  function drawSeries(s) {
    const box = $("series");
    box.replaceChildren();
    const W = 760, H = 220, left = 60, right = 10, top = 24, bottom = 30;
    const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "series-svg", role: "img",
      "data-times": JSON.stringify(s.time), "data-values": JSON.stringify(s.values) });
    const finite = s.values.filter((v) => v !== null);
    const title = `${s.variable} at lat ${s.cell.lat.toFixed(3)}, lon ${s.cell.lon.toFixed(3)}` +
      (Object.keys(s.fixed).length ? ` (${Object.entries(s.fixed).map(([k, v]) => `${k} = ${v}`).join(", ")})` : "");
    chart.appendChild(svg("text", { x: left, y: 14, "font-size": 12 }, title));
    if (!finite.length) {
      chart.appendChild(svg("text", { x: left, y: H / 2 }, "no data: every value at this point is missing"));
      box.appendChild(chart);
      return;
    }
    let lo = Math.min(...finite), hi = Math.max(...finite);
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    const n = s.values.length;
    const x = (i) => left + (n === 1 ? 0.5 : i / (n - 1)) * (W - left - right);
    const y = (v) => top + (1 - (v - lo) / (hi - lo)) * (H - top - bottom);
    let d = "", pen = "M";
    s.values.forEach((v, i) => {
      if (v === null) { pen = "M"; return; }
      d += `${pen}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
      pen = "L";
    });
    chart.appendChild(svg("path", { d: d.trim(), fill: "none", stroke: "#1f6feb", "stroke-width": 1.5, class: "series-line" }));
    chart.appendChild(svg("text", { x: 2, y: top + 4, "font-size": 11 }, `${hi.toPrecision(5)}`));
    chart.appendChild(svg("text", { x: 2, y: H - bottom, "font-size": 11 }, `${lo.toPrecision(5)}`));
    chart.appendChild(svg("text", { x: left, y: H - 8, "font-size": 11 }, s.time[0]));
    chart.appendChild(svg("text", { x: W - right, y: H - 8, "font-size": 11, "text-anchor": "end" }, s.time[n - 1]));
    chart.appendChild(svg("text", { x: 2, y: H / 2, "font-size": 11 }, s.units));
    box.appendChild(chart);
  }
  map.on("click", async (e) => {
    const at = e.latlng.wrap();
    // a station or mesh node answers within 8 px of its place at this zoom (its dot is 5 px)
    const within = Math.min(180, 8 * 360 / (256 * 2 ** map.getZoom()));
    const params = new URLSearchParams({ variable: page.variable, lat: at.lat, lon: at.lng, within: within.toPrecision(4) });
    if ($("map-level")) params.set("elevation", $("map-level").value);
    const response = await fetch(`/datasets/${encodeURIComponent(page.id)}/series.json?` + params.toString());
    const body = await response.json();
    if (!response.ok) {
      $("map-error").textContent = body.error ? body.error.message : "no time series there";
      $("map-error").hidden = false;
      return;
    }
    $("map-error").hidden = true;
    drawSeries(body);
  });
})();
