// sheetcheck's page: no build step, no framework. Talks to the JSON API of server.py.
"use strict";

const COLOURS = { orange: "#f08c00", red: "#d62828", blue: "#1d5fd1", green: "#2a9d3a",
  purple: "#7b3fa8", empty: "#ffffff", crossed: "#555555", written: "#222222" };
const $ = (sel) => document.querySelector(sel);
const state = { audit: null, regions: null, regionsFor: null };

function setStatus(text, isError = false) {
  const el = $("#status");
  el.textContent = text;
  el.classList.toggle("error", isError);
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

async function api(path, options = {}) {
  const resp = await fetch(path, options);
  const type = resp.headers.get("content-type") || "";
  const body = type.includes("json") ? await resp.json() : await resp.text();
  if (!resp.ok) {
    const msg = body && body.message ? body.message : `request failed (${resp.status})`;
    throw new Error(msg);
  }
  return body;
}

async function loadTemplates() {
  const list = await api("/api/templates");
  const select = $("#template");
  const sheets = $("#sheets");
  for (const t of list) {
    select.append(el("option", { value: t.id }, `${t.title}`));
    sheets.append(el("li", {}, el("a", { href: `/api/templates/${encodeURIComponent(t.id)}/sheet.pdf`,
      target: "_blank", rel: "noopener" }, t.title)));
  }
}

async function checkPhoto(file) {
  if (!file) return;
  const form = new FormData();
  form.append("photo", file, file.name || "photo.jpg");
  const tpl = $("#template").value;
  if (tpl) form.append("template", tpl);
  setStatus("Reading the sheet…");
  try {
    const audit = await api("/api/check", { method: "POST", body: form });
    history.pushState({}, "", audit.url);
    await show(audit);
    setStatus("");
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function regionsFor(templateId) {
  if (state.regionsFor !== templateId) {
    state.regions = await api(`/api/templates/${encodeURIComponent(templateId)}/regions.json?dpi=50`);
    state.regionsFor = templateId;
  }
  return state.regions;
}

function verdictClass(v) {
  return v === "OK" ? "ok" : v === "DISCREPANCY" ? "discrepancy" : "review";
}

async function show(audit) {
  state.audit = audit;
  const r = audit.report;
  $("#result").hidden = false;
  const v = $("#verdict");
  v.className = "verdict " + verdictClass(r.verdict);
  v.textContent = r.verdict;
  v.title = r.summary || "";
  $("#total-rules").textContent = r.total.rules;
  $("#total-claimed").textContent = r.total.claimed;

  const body = $("#breakdown tbody");
  body.replaceChildren();
  let section = null;
  for (const line of r.breakdown.rules.lines) {
    if (line.section !== section) {
      section = line.section;
      body.append(el("tr", { class: "section" }, el("td", { colspan: "2" }, section)));
    }
    body.append(el("tr", {}, el("td", {}, line.label), el("td", { class: "pts" }, line.points)));
  }
  body.append(el("tr", { class: "total" }, el("td", {}, "Total"), el("td", { class: "pts" }, r.total.rules)));

  const findings = $("#findings");
  findings.replaceChildren();
  if (!r.findings.length) findings.append(el("li", {}, "None: the sheet follows the rules."));
  for (const f of r.findings) {
    findings.append(el("li", {}, el("div", {}, f.message + (f.effect ? ` (${f.effect > 0 ? "+" : ""}${f.effect})` : "")),
      el("div", { class: "rule" }, `Rule: ${f.rule_text}`)));
  }

  const review = $("#review");
  review.replaceChildren();
  if (r.review.length) {
    review.append(el("p", {}, "Please look at: " + r.review.map((u) => u.region).join(", ")));
  }

  const link = new URL(audit.url, location.href).href;
  $("#share-link").value = link;
  $("#revision-info").textContent = audit.revisions > 1
    ? `Revision ${audit.revision} of ${audit.revisions} (corrections: ${Object.keys(audit.corrections).length})`
    : "";

  const img = $("#overlay");
  $("#overlay-full").href = audit.overlay_url;
  placeOverlay(audit.report.overlay);
  await new Promise((resolve) => {
    img.onload = resolve; img.onerror = resolve;
    img.src = audit.overlay_url;
  });
  await drawHotspots(audit);
}

// Show only the sheet part of the overlay picture (the breakdown is on the page as text):
// the wrapper takes the sheet's aspect ratio and the picture is scaled and shifted inside it.
function placeOverlay(ov) {
  const wrap = $("#overlay-wrap");
  const img = $("#overlay");
  if (!ov) { wrap.style.aspectRatio = ""; img.style.cssText = "position:static;width:100%"; return; }
  const [W, H] = ov.size;
  const [sx, sy, sw, sh] = ov.sheet_box;
  wrap.style.aspectRatio = `${sw} / ${sh}`;
  img.style.width = `${(100 * W) / sw}%`;
  img.style.left = `${(-100 * sx) / sw}%`;
  img.style.top = `${(-100 * sy) / sh}%`;
}

async function drawHotspots(audit) {
  const svg = $("#hotspots");
  svg.replaceChildren();
  const ov = audit.report.overlay;
  if (!ov) return;
  const regions = await regionsFor(audit.report.template.id);
  // the svg covers exactly the sheet box, in regions.json pixels
  const [pw, ph] = regions.image_size;
  svg.setAttribute("viewBox", `0 0 ${pw} ${ph}`);
  svg.setAttribute("preserveAspectRatio", "none");
  for (const reg of regions.regions) {
    if (!reg.readable) continue;
    const pts = reg.polygon.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    const poly = document.createElementNS("http://www.w3.org/2000/svg", "polygon");
    poly.setAttribute("points", pts);
    poly.setAttribute("tabindex", "0");
    poly.setAttribute("data-region", reg.id);
    const reading = audit.report.readings[reg.id];
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `${reg.id}: ${reading ? reading.mark : "?"}`;
    poly.append(title);
    poly.addEventListener("click", () => openFix(reg));
    poly.addEventListener("keydown", (e) => { if (e.key === "Enter") openFix(reg); });
    svg.append(poly);
  }
}

function openFix(reg) {
  const audit = state.audit;
  const reading = audit.report.readings[reg.id] || {};
  $("#fix-title").textContent = `Correct ${reg.id}`;
  $("#fix-current").textContent = `Read as: ${reading.mark || "?"}` +
    (reading.confidence !== undefined ? ` (confidence ${(Math.floor(reading.confidence * 1000) / 10).toFixed(1)} %)` : "");
  const box = $("#fix-marks");
  box.replaceChildren();
  for (const mark of reg.marks) {
    const b = el("button", { type: "button", "data-mark": mark, class: mark === reading.mark ? "current" : "" },
      el("span", { class: "swatch", style: `background:${COLOURS[mark] || "#fff"}` }), mark);
    b.addEventListener("click", () => { $("#fix-dialog").close(); applyFix(reg.id, mark); });
    box.append(b);
  }
  $("#fix-dialog").showModal();
}

async function applyFix(regionId, mark) {
  const audit = state.audit;
  setStatus("Re-scoring with your correction…");
  try {
    const headers = { "content-type": "application/json" };
    const token = localStorage.getItem("sheetcheck-token");
    if (token) headers.authorization = `Bearer ${token}`;
    const updated = await api(`/api/audits/${audit.id}/corrections`, {
      method: "POST", headers, body: JSON.stringify({ corrections: { [regionId]: mark } }) });
    await show(updated);
    setStatus(`Corrected ${regionId} to ${mark}.`);
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function loadShared() {
  const m = location.pathname.match(/^\/a\/([0-9a-f]{16})$/);
  if (!m) return;
  setStatus("Loading the stored audit…");
  try {
    await show(await api(`/api/audits/${m[1]}`));
    setStatus("");
  } catch (err) {
    setStatus(err.message, true);
  }
}

$("#photo-camera").addEventListener("change", (e) => checkPhoto(e.target.files[0]));
$("#photo-file").addEventListener("change", (e) => checkPhoto(e.target.files[0]));
$("#zoom").addEventListener("click", () => {
  const scroll = $("#overlay-scroll");
  const on = scroll.classList.toggle("zoomed");
  $("#zoom").setAttribute("aria-pressed", String(on));
  $("#zoom").textContent = on ? "Zoom out" : "Zoom in";
});
$("#share").addEventListener("click", async () => {
  const link = $("#share-link").value;
  if (navigator.share) { try { await navigator.share({ title: "sheetcheck audit", url: link }); return; } catch (_) { /* fall through */ } }
  $("#share-link").select();
  try { await navigator.clipboard.writeText(link); setStatus("Link copied."); } catch (_) { setStatus("Copy the link above."); }
});
loadTemplates().catch((err) => setStatus(err.message, true));
loadShared();
