// Query builder: keeps the SQL, snippets, download links and the size estimate in step with the form,
// and previews the first rows through the JSON API (GET /query?format=json&limit=100) as the query changes
// (debounced: PREVIEW_WAIT_MS after the last edit; a newer preview cancels the one in flight).
"use strict";

const PREVIEW_WAIT_MS = 400;

const form = document.getElementById("builder-form");
const dataset = form.dataset.dataset;
const sqlBox = document.getElementById("sql");
const errorBox = document.getElementById("query-error");
const builderErrorBox = document.getElementById("builder-error");
const resetButton = document.getElementById("reset-sql");
const statusLine = document.getElementById("preview-status");
let custom = new URLSearchParams(location.search).has("sql");
let timer = null;
let generation = 0;
let previewTimer = null;
let previewRun = null;
let previewGeneration = 0;
const estimateLine = document.getElementById("estimate");

function encodeConditions() {
  form.querySelectorAll(".condition").forEach((row) => {
    const column = row.querySelector(".cond-column").value;
    const op = row.querySelector(".cond-op").value;
    const value = row.querySelector(".cond-value").value;
    row.querySelector("input[name=where]").value = column + ":" + op + ":" + value;
  });
}

function encodeAggregates() {
  form.querySelectorAll(".aggregate").forEach((row) => {
    const fn = row.querySelector(".agg-function").value;
    const column = row.querySelector(".agg-column").value;
    row.querySelector("input[name=agg]").value = fn + ":" + column;
  });
  // With groups or aggregates the result is one record per group: picked columns are not used.
  const reduces = form.querySelector(".aggregate") !== null ||
    form.querySelector("input[name=group]:checked") !== null;
  form.querySelector("fieldset.columns").classList.toggle("unused", reduces);
}

function builderParams() {
  encodeConditions();
  encodeAggregates();
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(form)) {
    if (String(value).trim() !== "") params.append(name, value);
  }
  return params;
}

function showError(message, box = errorBox) {
  box.textContent = message;
  box.hidden = !message;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return body.error ? body.error.message : response.statusText;
  } catch (err) {
    return response.status + " " + response.statusText;
  }
}

function render(page) {
  if (!custom) sqlBox.value = page.sql;
  estimateLine.textContent = page.estimate && page.estimate.text ? "Estimated before it runs: " + page.estimate.text : "";
  for (const lang of ["python", "r", "curl"]) {
    document.getElementById("snippet-" + lang).textContent = page.snippets[lang];
  }
  const onMap = document.getElementById("records-map");
  if (onMap) onMap.href = "/datasets/" + encodeURIComponent(dataset) + "/map?" + new URLSearchParams({ sql: sqlBox.value });
  const list = document.getElementById("downloads");
  list.replaceChildren(...page.downloads.map((d) => {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = d.url;
    link.dataset.format = d.format;
    link.setAttribute("download", "");
    link.textContent = d.label;
    item.append(link);
    return item;
  }));
}

async function refresh() {
  const mine = ++generation;
  const params = custom ? new URLSearchParams({ sql: sqlBox.value }) : builderParams();
  const response = await fetch("/datasets/" + encodeURIComponent(dataset) + "/query.json?" + params);
  if (mine !== generation) return;  // a newer refresh is on its way
  if (!response.ok) {
    showError(await errorMessage(response), builderErrorBox);
    return;
  }
  showError("", builderErrorBox);
  render(await response.json());
  if (!custom) history.replaceState(null, "", "?" + builderParams());
  resetButton.hidden = !custom;
  previewSoon();
}

function previewSoon() {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(preview, PREVIEW_WAIT_MS);
}

function refreshSoon() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 150);
}

function cell(value) {
  const td = document.createElement("td");
  if (value === null) {
    td.textContent = "NULL";
    td.className = "null";
  } else {
    td.textContent = String(value);
  }
  return td;
}

async function preview() {
  clearTimeout(previewTimer);
  const mine = ++previewGeneration;
  if (previewRun) previewRun.abort();  // its result would be stale
  const run = previewRun = new AbortController();
  const started = performance.now();
  statusLine.textContent = "running…";
  const table = document.getElementById("preview-table");
  const sql = sqlBox.value;
  table.classList.add("stale");  // the rows shown are an older query's until this one answers
  const params = new URLSearchParams({ sql, format: "json", limit: "100" });
  let response;
  let rows;
  try {
    response = await fetch("/query?" + params, { signal: run.signal });
    if (response.ok) rows = await response.json();
  } catch (err) {
    if (mine !== previewGeneration) return;  // cancelled by a newer preview
    statusLine.textContent = "";
    showError("the result broke off while it was being sent; the server log says why");
    return;
  }
  if (mine !== previewGeneration) return;
  const head = document.querySelector("#preview-table thead");
  const body = document.querySelector("#preview-table tbody");
  head.replaceChildren();
  body.replaceChildren();
  table.classList.remove("stale");
  table.dataset.sql = sql;  // which query the rows answer
  if (!response.ok) {
    statusLine.textContent = "";
    showError(await errorMessage(response));
    return;
  }
  showError("");
  const columns = rows.length ? Object.keys(rows[0]) : [];
  const tr = document.createElement("tr");
  columns.forEach((name) => {
    const th = document.createElement("th");
    th.textContent = name;
    tr.append(th);
  });
  head.append(tr);
  for (const record of rows) {
    const row = document.createElement("tr");
    columns.forEach((name) => row.append(cell(record[name])));
    body.append(row);
  }
  const ms = Math.round(performance.now() - started);
  statusLine.textContent = rows.length
    ? rows.length + " row" + (rows.length === 1 ? "" : "s") + " in " + ms + " ms" + (rows.length === 100 ? " (first 100)" : "")
    : "no rows match";
}

function addAggregate() {
  const template = document.getElementById("aggregate-template");
  document.getElementById("aggregates").append(template.content.cloneNode(true));
  refreshSoon();
}

function addCondition() {
  const template = document.getElementById("condition-template");
  document.getElementById("conditions").append(template.content.cloneNode(true));
  refreshSoon();
}

form.addEventListener("input", () => { custom = false; refreshSoon(); });
form.addEventListener("change", () => { custom = false; refreshSoon(); });
form.addEventListener("submit", (event) => { event.preventDefault(); refresh(); });
form.addEventListener("click", (event) => {
  if (event.target.classList.contains("cond-remove")) {
    event.target.closest(".condition").remove();
    custom = false;
    refreshSoon();
  }
  if (event.target.classList.contains("agg-remove")) {
    event.target.closest(".aggregate").remove();
    custom = false;
    refreshSoon();
  }
});
document.getElementById("add-condition").addEventListener("click", addCondition);
document.getElementById("add-aggregate").addEventListener("click", addAggregate);
sqlBox.addEventListener("input", () => { custom = true; refreshSoon(); });
sqlBox.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); preview(); }
});
resetButton.addEventListener("click", () => { custom = false; refresh(); });
document.getElementById("preview-btn").addEventListener("click", preview);
document.querySelectorAll("button.copy").forEach((button) => {
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.target).textContent;
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "copied";
    } catch (err) {
      button.textContent = "select and copy";
    }
    setTimeout(() => { button.textContent = "copy"; }, 1500);
  });
});
resetButton.hidden = !custom;
preview();  // the page opens with its query's first rows, no click needed
