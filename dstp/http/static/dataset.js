// Dataset page: redraw the quicklook map and the time series when their forms change.
"use strict";

function plotUrl(form) {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(form)) {
    if (String(value).trim() !== "") params.append(name, value);
  }
  return form.getAttribute("action") + "?" + params.toString();
}

async function showPlotError(url, box) {
  try {
    const response = await fetch(url);
    const body = await response.json();
    box.textContent = body.error ? body.error.message : "the plot could not be drawn";
  } catch (err) {
    box.textContent = "the plot could not be drawn: " + err;
  }
  box.hidden = false;
}

function wirePlot(form) {
  const img = document.getElementById(form.dataset.img);
  const box = form.parentElement.querySelector(".plot-error");
  const draw = (event) => {
    if (event) event.preventDefault();
    const url = plotUrl(form);
    box.hidden = true;
    img.classList.add("loading");
    img.onload = () => img.classList.remove("loading");
    img.onerror = () => { img.classList.remove("loading"); showPlotError(url, box); };
    img.src = url;
  };
  form.addEventListener("submit", draw);
  form.querySelectorAll("select").forEach((el) => el.addEventListener("change", draw));
}

document.querySelectorAll("form.plot-form").forEach(wirePlot);
