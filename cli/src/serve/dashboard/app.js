// The operator's page of `dockhand serve`: the key's sandboxes, refreshed
// every two seconds. Text from the server is only ever set as text, never
// parsed as HTML.
'use strict';

const REFRESH_MS = 2000;
const STORE = 'dockhand-serve-key';
const SVG = 'http://www.w3.org/2000/svg';

let key = sessionStorage.getItem(STORE) || '';
let timer = null;

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

class Unauthorized extends Error {}

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  if (response.status === 401) throw new Unauthorized();
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).message || message; } catch (_) { /* not JSON */ }
    throw new Error(`${method} ${path}: ${response.status} ${message}`);
  }
  return response.status === 204 ? null : response.json();
}

function duration(seconds) {
  if (!isFinite(seconds)) return '-';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

// A small line of the last readings, scaled to `max` (or their own top).
function sparkline(values, max) {
  const width = 120;
  const height = 28;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  if (values.length > 1) {
    const top = Math.max(max || 0, ...values, 1e-9);
    const step = width / (values.length - 1);
    const points = values.map((v, i) =>
      `${(i * step).toFixed(1)},${(height - 1 - (v / top) * (height - 2)).toFixed(1)}`);
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', points.join(' '));
    svg.appendChild(line);
  }
  return svg;
}

function usageCell(values, max, label) {
  const td = el('td');
  td.appendChild(sparkline(values, max));
  td.appendChild(el('span', label, 'figure'));
  return td;
}

function commandsCell(commands) {
  const td = el('td');
  if (commands.length === 0) {
    td.textContent = '-';
    return td;
  }
  const details = el('details');
  details.appendChild(el('summary', `${commands.length} run`));
  const list = el('ol', undefined, 'commands');
  for (const c of commands) {
    const end = c.exitCode === null ? 'running' : `exit ${c.exitCode}`;
    list.appendChild(el('li', `${c.command}  (${end})`));
  }
  details.appendChild(list);
  td.appendChild(details);
  return td;
}

function action(label, className, run) {
  const button = el('button', label, className);
  button.type = 'button';
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await run();
      await refresh();
    } catch (e) {
      report(e);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

function row(s, now) {
  const tr = el('tr');
  tr.dataset.sandbox = s.sandboxID;
  tr.appendChild(el('td', s.sandboxID, 'id'));
  tr.appendChild(el('td', s.templateID));
  tr.appendChild(el('td', s.state, s.state));
  tr.appendChild(el('td', duration((now - Date.parse(s.startedAt)) / 1000)));
  tr.appendChild(el('td', s.state === 'paused' ? '-' : duration((Date.parse(s.endAt) - now) / 1000)));
  const cpu = s.metrics.map((m) => m.cpuUsedPct);
  const mem = s.metrics.map((m) => m.memUsed / 1048576);
  const last = s.metrics[s.metrics.length - 1];
  tr.appendChild(usageCell(cpu, 100, last ? `${last.cpuUsedPct.toFixed(1)}%` : '-'));
  tr.appendChild(usageCell(mem, last ? last.memTotal / 1048576 : 0, last ? `${(last.memUsed / 1048576).toFixed(1)} MiB` : '-'));
  tr.appendChild(commandsCell(s.commands));
  const actions = el('td', undefined, 'actions');
  const path = `/sandboxes/${encodeURIComponent(s.sandboxID)}`;
  actions.appendChild(action('Kill', 'kill', () => api('DELETE', path)));
  if (s.state === 'paused') {
    actions.appendChild(action('Resume', 'resume', () => api('POST', `${path}/resume`, {})));
  } else {
    actions.appendChild(action('Pause', 'pause', () => api('POST', `${path}/pause`)));
    actions.appendChild(action('+5 min', 'extend', () => api('POST', `${path}/refreshes`, { duration: 300 })));
  }
  tr.appendChild(actions);
  return tr;
}

function report(e) {
  if (e instanceof Unauthorized) {
    showLogin("That key is not one of this server's.");
    return;
  }
  $('status').textContent = String(e.message || e);
  $('status').className = 'error';
}

async function refresh() {
  const list = await api('GET', '/dashboard/api/sandboxes');
  const now = Date.now();
  const body = $('sandboxes');
  body.replaceChildren(...list.map((s) => row(s, now)));
  $('empty').hidden = list.length !== 0;
  const running = list.filter((s) => s.state === 'running').length;
  $('summary').textContent = `${list.length} sandboxes: ${running} running, ${list.length - running} paused`;
  $('status').textContent = `updated ${new Date(now).toLocaleTimeString()}`;
  $('status').className = '';
}

function showLogin(message) {
  if (timer) clearInterval(timer);
  timer = null;
  key = '';
  sessionStorage.removeItem(STORE);
  $('board').hidden = true;
  $('forget').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('key').focus();
}

async function showBoard() {
  $('login').hidden = true;
  $('board').hidden = false;
  $('forget').hidden = false;
  try {
    await refresh();
  } catch (e) {
    report(e);
    if (e instanceof Unauthorized) return;
  }
  timer = setInterval(() => refresh().catch(report), REFRESH_MS);
}

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  key = $('key').value.trim();
  $('key').value = '';
  sessionStorage.setItem(STORE, key);
  showBoard();
});
$('forget').addEventListener('click', () => showLogin());

if (key) showBoard(); else showLogin();
