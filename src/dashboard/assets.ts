// The dashboard's two static files, served from memory under /assets/ (the content security
// policy allows scripts and styles from the dashboard itself only, never inline).

/**
 * Live updates: the page's <main> names its fragment and its event stream; on each "change" event
 * the fragment is fetched again and swapped in. The fragment is server-rendered and escaped, so
 * nothing from a message is ever interpreted as markup here.
 */
export const LIVE_JS = `"use strict";
(() => {
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");
  if (!live || !live.dataset.events || !window.EventSource) {
    if (status) status.textContent = "live updates: off on this page";
    return;
  }
  let updates = 0;
  let busy = false;
  let again = false;
  const refresh = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const response = await fetch(live.dataset.fragment, { credentials: "same-origin", headers: { accept: "text/html" } });
      if (response.ok) {
        live.innerHTML = await response.text();
        updates += 1;
        document.body.dataset.updates = String(updates);
        if (status) status.textContent = "live updates: on, last at " + new Date().toLocaleTimeString();
      } else if (status) {
        status.textContent = "live updates: the dashboard answered " + response.status;
      }
    } catch (error) {
      if (status) status.textContent = "live updates: the dashboard cannot be reached";
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  };
  const source = new EventSource(live.dataset.events);
  // The first event on each connection may repeat what the page shows; fetching it again is cheap and misses nothing.
  source.addEventListener("change", () => refresh());
  source.addEventListener("error", () => {
    if (status) status.textContent = "live updates: reconnecting";
  });
})();
`;

export const DASHBOARD_CSS = `
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2430; background: #fbfbfd; }
header { display: flex; gap: 1rem; align-items: center; padding: .7rem 1.5rem; background: #1d2430; color: #fff; flex-wrap: wrap; }
header a.brand { color: #fff; font-weight: 700; text-decoration: none; }
header nav a { color: #cfd6e0; margin-right: .7rem; text-decoration: none; }
header nav a:hover { color: #fff; text-decoration: underline; }
form.filters { display: flex; gap: .8rem; flex-wrap: wrap; align-items: end; margin: .5rem 0 1rem; }
form.filters input:not([type=number]) { width: 12rem; }
nav.pages { display: flex; gap: 1.5rem; margin: 1rem 0; }
nav.pages .page-none { color: #9aa3b0; }
.notice { padding: .5rem .8rem; background: #e8f5ec; border-radius: 4px; }
header .db { font-family: ui-monospace, monospace; font-size: .85rem; opacity: .85; }
header .mode { font-size: .8rem; padding: .1rem .5rem; border-radius: 999px; background: #3b4452; }
header form.search { margin-left: auto; display: flex; gap: .4rem; }
header input { width: 22rem; max-width: 60vw; padding: .3rem .5rem; border-radius: 4px; border: 0; }
main { max-width: 80rem; margin: 1.2rem auto; padding: 0 1.5rem; }
footer { max-width: 80rem; margin: 0 auto 2rem; padding: 0 1.5rem; font-size: .8rem; color: #5b6472; }
h1 { font-size: 1.3rem; } h2 { font-size: 1rem; margin: 1.6rem 0 .5rem; border-bottom: 1px solid #d7dbe3; padding-bottom: .2rem; }
.counts { display: flex; gap: .8rem; flex-wrap: wrap; }
.count { background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .6rem 1rem; min-width: 8rem; }
.count .n { display: block; font-size: 1.5rem; font-weight: 600; }
.count .label { color: #5b6472; font-size: .85rem; }
.count-dead .n { color: #c62828; } .count-processing .n { color: #2f6fdf; } .count-processed .n { color: #2e9a5b; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #e3e6ec; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #eef0f4; vertical-align: top; }
th { font-size: .8rem; color: #5b6472; font-weight: 600; }
.error-text, .last-error { color: #a4161a; white-space: pre-wrap; word-break: break-word; }
pre { font: 12.5px/1.4 ui-monospace, monospace; background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .7rem 1rem; overflow-x: auto; }
.status { font-size: .75rem; padding: .1rem .5rem; border-radius: 999px; background: #eef0f4; }
.status-dead { background: #fde2e2; color: #a4161a; } .status-processing { background: #e1ecfd; color: #1f4fa8; }
.status-processed { background: #dff3e7; color: #1d6b3f; } .status-pending { background: #fff3d6; color: #7a5200; }
.status-gone, .status-cancelled { background: #e9e9ee; color: #4a4f5c; }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .7rem 1rem; }
dt { color: #5b6472; } dd { margin: 0; word-break: break-word; }
figure { margin: 0; background: #fff; border: 1px solid #e3e6ec; border-radius: 6px; padding: .6rem .8rem; overflow-x: auto; }
figcaption, .timeline-legend, .note, .empty { font-size: .85rem; color: #5b6472; }
tr.audit-refused td { background: #fdecec; }
form.action { display: inline; } form.action button { font-size: .8rem; }
.error { background: #fdecec; border: 1px solid #f3b9b9; padding: .6rem 1rem; border-radius: 6px; }
main.problem { max-width: 40rem; margin-top: 4rem; }
`;
