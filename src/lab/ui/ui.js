// svcroute lab ui: poll /state.json every second and paint the picture.
// Element ids come from the SVG (src/lab/graph.rs): node-<name>,
// host-<name>, seg-<segment>, link-<iface>, tun-<host>.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let svgVersion = null;
let polls = 0;
let prev = null; // the previous state, for rates and the change list

async function loadSvg() {
  const r = await fetch("/graph.svg", { cache: "no-store" });
  if (!r.ok) {
    $("graph").textContent = await r.text();
    return false;
  }
  $("graph").innerHTML = await r.text();
  return true;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function row(tbody, id, attrs, cells) {
  const tr = document.createElement("tr");
  tr.id = id;
  for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = String(v);
  for (const c of cells) {
    if (Array.isArray(c)) cell(tr, c[0], c[1]);
    else cell(tr, c);
  }
  tbody.appendChild(tr);
}

// A <text> inside group `g` (created once, found by class after that).
function liveText(g, cls, x, y) {
  let t = g.querySelector("text." + cls);
  if (!t) {
    t = document.createElementNS(SVG_NS, "text");
    t.setAttribute("class", cls);
    t.setAttribute("text-anchor", "middle");
    g.appendChild(t);
  }
  t.setAttribute("x", x);
  t.setAttribute("y", y);
  return t;
}

function setState(el, state) {
  if (!el) return;
  el.classList.remove("state-up", "state-down", "state-detached", "state-missing");
  el.classList.add("state-" + state);
  el.dataset.state = state;
}

function rate(name, key, now, dt) {
  if (!prev || !dt) return null;
  const p = prev.nodes[name];
  if (!p || !p.counters || !now.counters) return null;
  return Math.max(0, Math.round((now.counters[key] - p.counters[key]) / dt));
}

function addEvent(s, kind, id, from, to) {
  const li = document.createElement("li");
  Object.assign(li.dataset, { kind, id, from, to, seq: s.seq });
  const t = new Date(s.time_ms).toLocaleTimeString();
  li.textContent = `${t} ${kind} ${id}: ${from} → ${to}`;
  const ol = $("events");
  ol.insertBefore(li, ol.firstChild);
  while (ol.children.length > 100) ol.removeChild(ol.lastChild);
}

function changes(s) {
  if (!prev) return;
  const cmp = (kind, a, b, f) => {
    for (const [name, v] of Object.entries(b)) {
      const o = a[name];
      if (o && f(o) !== f(v)) addEvent(s, kind, name, f(o), f(v));
    }
  };
  const live = (d) => (d.alive ? (d.ready === false ? "alive, not ready" : "alive") : "dead");
  cmp("node", prev.nodes, s.nodes, live);
  cmp("host", prev.hosts, s.hosts, (h) => (h.alive ? "present" : "missing"));
  cmp("link", prev.links, s.links, (l) => l.state);
  cmp("segment", prev.segments, s.segments, (g) => g.state);
}

function apply(s) {
  document.title = `svcroute lab ${s.lab}`;
  $("title").textContent = `svcroute lab ${s.lab}`;
  const st = $("status");
  st.dataset.phase = s.phase;
  st.textContent = `${s.phase} · ${new Date(s.time_ms).toLocaleTimeString()}`;
  const dt = prev ? (s.time_ms - prev.time_ms) / 1000 : 0;

  const devs = $("devices").tBodies[0];
  devs.replaceChildren();
  for (const [name, n] of Object.entries(s.nodes)) {
    const c = n.counters || {};
    const rx = rate(name, "rx_frames", n, dt);
    const tx = rate(name, "tx_frames", n, dt);
    row(devs, "row-" + n.id, { alive: n.alive, ready: n.ready }, [
      name, n.role, n.alive ? "yes" : "no", n.ready ? "yes" : "no", n.pid,
      [c.rx_frames, "num"], [c.tx_frames, "num"], [rx, "num"], [tx, "num"], [c.drops, "num"],
    ]);
    const g = $(n.id);
    if (!g) continue;
    g.classList.toggle("dead", !n.alive);
    g.classList.toggle("notready", n.alive && !n.ready);
    g.dataset.alive = n.alive;
    const r = g.querySelector("rect");
    const x = +r.getAttribute("x") + +r.getAttribute("width") / 2;
    const y = +r.getAttribute("y") + +r.getAttribute("height") + 11;
    liveText(g, "live", x, y).textContent = n.alive
      ? `rx ${c.rx_frames ?? "-"} tx ${c.tx_frames ?? "-"}` + (c.drops ? ` drop ${c.drops}` : "")
      : "not running";
  }
  for (const [name, h] of Object.entries(s.hosts)) {
    row(devs, "row-" + h.id, { alive: h.alive }, [
      name, "kernel host", h.alive ? "yes" : "no", "-",
      `${h.commands_running}/${h.commands} commands`, "", "", "", "", "",
    ]);
    const g = $(h.id);
    if (!g) continue;
    g.classList.toggle("dead", !h.alive);
    g.dataset.alive = h.alive;
  }

  const links = $("links").tBodies[0];
  links.replaceChildren();
  for (const [id, l] of Object.entries(s.links)) {
    const kernel = l.kernel.map((k) => `${k.ifname} ${k.operstate ?? "absent"}` +
      (k.bridge ? ` on ${k.master ?? "no bridge"}` : "")).join("; ");
    row(links, "row-" + id, { state: l.state }, [
      l.device, l.iface, l.to, l.addrs.join(" "), l.state, kernel, l.impairments.join(", "),
    ]);
    const g = $(id);
    if (!g) continue;
    setState(g, l.state);
    g.classList.toggle("impaired", l.impairments.length > 0);
    // The mark goes just under the link's label.
    const b = g.querySelector("text.label").getBBox();
    const x = b.x + b.width / 2;
    const y = b.y + b.height + 10;
    const words = [];
    if (l.state !== "up") words.push(l.state);
    words.push(...l.impairments);
    liveText(g, "mark", x, y).textContent = words.join(" · ");
  }

  const segs = $("segments").tBodies[0];
  segs.replaceChildren();
  for (const [name, g] of Object.entries(s.segments)) {
    row(segs, "row-" + g.id, { state: g.state }, [name, g.bridge, g.state]);
    setState($(g.id), g.state);
  }
  changes(s);
}

async function poll() {
  try {
    const r = await fetch("/state.json", { cache: "no-store" });
    const s = await r.json();
    if (s.svg_version !== svgVersion && (await loadSvg())) svgVersion = s.svg_version;
    apply(s);
    prev = s;
    polls += 1;
    document.body.dataset.polls = polls;
    document.body.dataset.seq = s.seq;
  } catch (e) {
    const st = $("status");
    st.dataset.phase = "error";
    st.textContent = `cannot read the lab state: ${e}`;
  }
  setTimeout(poll, 1000);
}

poll();
