// Runs the dashboard's script (scrapy_clustersync/api/dashboard.html) in Node against a live
// `clustersync serve`, with a small stand-in for the browser's DOM, as tests/test_api_dashboard.py
// does: it prints what the page shows (one JSON line), clicks the first job's "pause" button,
// waits until the page shows the job paused and prints what it shows again.
//
//     node tests/dashboard_harness.js PAGE.html http://127.0.0.1:PORT TOKEN
"use strict";
const fs = require("fs");
const vm = require("vm");

const [page, base, token] = process.argv.slice(2);

class Element {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.text = ""; this.className = "";
    this.style = {}; this.value = ""; this.rows = []; this.cells = []; this.onclick = null;
  }
  get textContent() { return this.text + this.children.map(c => c.textContent).join(""); }
  set textContent(value) { this.text = String(value); this.children = []; }
  appendChild(child) { this.children.push(child); return child; }
  append(...children) { children.forEach(c => this.appendChild(c)); }
  replaceChildren(...children) { this.children = []; this.text = ""; this.rows = []; this.append(...children); }
  insertRow() { const row = new Element("tr"); this.rows.push(row); return this.appendChild(row); }
  insertCell() { const cell = new Element("td"); this.cells.push(cell); return this.appendChild(cell); }
  createTHead() { return this.appendChild(new Element("thead")); }
  createTBody() { return this.appendChild(new Element("tbody")); }
}

const byId = {};
for (const id of ["token", "save", "who", "error", "details", "alerts", "alertlog"]) byId[id] = new Element(id);
const jobsBody = new Element("tbody");
const stored = {"clustersync-token": token};
const document = {
  getElementById: id => byId[id],
  querySelector: selector => (selector === "#jobs tbody" ? jobsBody : null),
  createElement: tag => new Element(tag),
  createTextNode: text => { const node = new Element("#text"); node.text = String(text); return node; },
};
const context = vm.createContext({
  document, console,
  localStorage: {getItem: key => stored[key] ?? null, setItem: (key, value) => { stored[key] = value; }},
  fetch: (path, options) => fetch(base + path, options),
  setInterval: () => 0,
});

function shown() {
  return {
    jobs: jobsBody.rows.map(row => row.cells.slice(0, 8).map(cell => cell.textContent)),
    details: byId.details.textContent, who: byId.who.textContent, error: byId.error.textContent,
    alerts: byId.alerts.children.map(item => item.textContent),
  };
}

async function until(condition, what) {
  for (let i = 0; i < 100; i++) {
    if (condition()) return;
    await new Promise(resolve => setTimeout(resolve, 100));
    await context.refresh();
  }
  throw new Error(`the page never showed ${what}: ${JSON.stringify(shown())}`);
}

(async () => {
  const html = fs.readFileSync(page, "utf8");
  vm.runInContext(html.split("<script>")[1].split("</script>")[0], context);
  await until(() => jobsBody.rows.length > 0 && byId.details.textContent, "the jobs");
  console.log(JSON.stringify(shown()));
  const pause = jobsBody.rows[0].cells[8].children.find(button => button.textContent === "pause");
  pause.onclick();
  await until(() => jobsBody.rows[0].cells[1].textContent === "paused", "the job paused");
  console.log(JSON.stringify(shown()));
})().catch(error => { console.error(String(error)); process.exit(1); });
