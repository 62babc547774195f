// Live dashboard of `swell local`: polls api/history every second for the
// points it does not have yet and redraws one card per service.
(() => {
  'use strict';

  const POLL_MS = 1000;         // between the end of one poll and the next
  const TIMEOUT_MS = 5000;      // a poll that takes longer has failed
  const KEEP_MS = 10 * 60e3;    // history held in the page (the longest window)
  const GAP_MS = 2500;          // points further apart than this break a line
  const HEIGHT = 270;
  const M = { left: 46, right: 40, top: 10, bottom: 22 };
  const QUEUE_H = 44, QUEUE_GAP = 16;
  const SVGNS = 'http://www.w3.org/2000/svg';

  const state = {
    services: new Map(),   // name -> {name, metric, target, points, card, ...}
    since: null,           // T of the newest point held; null: fetch everything
    now: 0,                // server's time of the latest answer (unix ms)
    updates: 0,
    windowMs: 300e3,
  };

  const cardsEl = document.getElementById('cards');
  const emptyEl = document.getElementById('empty');
  const statusEl = document.getElementById('status');
  const windowEl = document.getElementById('window');

  function h(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function s(tag, attrs, parent, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // fmt prints a metric value with a precision that suits its size.
  function fmt(v) {
    if (!isFinite(v)) return '–';
    const a = Math.abs(v);
    const d = a >= 100 ? 0 : a >= 10 ? 1 : 2;
    return String(Number(v.toFixed(d)));
  }

  // niceStep rounds v up to 1, 2 or 5 times a power of ten.
  function niceStep(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5]) if (m * p >= v - 1e-9 * p) return m * p;
    return 10 * p;
  }

  function relLabel(ms) {
    if (ms === 0) return 'now';
    const sec = Math.round(ms / 1000);
    if (sec % 60 === 0) return '-' + sec / 60 + 'm';
    if (sec > 60) return '-' + Math.floor(sec / 60) + 'm' + (sec % 60) + 's';
    return '-' + sec + 's';
  }

  // ---- cards ----

  function createService(name) {
    const card = h('section', { class: 'card', 'data-service': name });
    const head = h('header', { class: 'card-head' }, card);
    h('h2', {}, head, name);
    const metric = h('span', { class: 'stat' }, head);
    const load = h('span', { class: 'stat' }, head);
    const ready = h('span', { class: 'stat' }, head);
    const desired = h('span', { class: 'stat' }, head);
    const queued = h('span', { class: 'stat' }, head);
    const badge = h('span', { class: 'badge', hidden: '' }, head, 'PANIC');
    const chart = h('div', { class: 'chart' }, card);
    const svg = s('svg', { role: 'img', 'aria-label': 'load and replicas of ' + name }, chart);
    const legend = h('div', { class: 'legend' }, card);
    const svc = {
      name, metric: '', target: 0, points: [], card, svg, legend,
      els: { metric, load, ready, desired, queued, badge },
    };
    // Keep the cards sorted by name.
    let before = null;
    for (const other of state.services.values()) {
      if (other.name > name && (!before || other.name < before.name)) before = other;
    }
    cardsEl.insertBefore(card, before ? before.card : null);
    state.services.set(name, svc);
    return svc;
  }

  function removeService(svc) {
    svc.card.remove();
    state.services.delete(svc.name);
  }

  function stat(el, label, value) {
    el.replaceChildren(label + ' ');
    h('b', {}, el, value);
  }

  function renderLegend(svc) {
    const unit = svc.metric || 'load';
    const items = [
      ['k-load', unit],
      ['k-stable', 'stable avg'],
      ['k-target', 'target × ready'],
      ['k-ready', 'ready'],
      ['k-desired', 'desired'],
      ['k-queued', 'queued'],
      ['k-panic', 'panic mode'],
    ];
    if (svc.legend.dataset.unit === unit) return;
    svc.legend.dataset.unit = unit;
    svc.legend.replaceChildren();
    for (const [cls, label] of items) {
      const span = h('span', {}, svc.legend);
      h('i', { class: cls }, span);
      span.appendChild(document.createTextNode(label));
    }
  }

  function render(svc) {
    const pts = svc.points;
    const last = pts.length ? pts[pts.length - 1] : null;
    const c = svc.card.dataset;
    c.points = String(pts.length);
    c.lastLoad = last ? String(last.load) : '';
    c.lastReady = last ? String(last.ready) : '';
    c.lastDesired = last ? String(last.desired) : '';
    c.lastQueued = last ? String(last.queued) : '';
    c.panicMode = last && last.panicMode ? 'true' : 'false';

    const e = svc.els;
    e.metric.textContent = (svc.metric || 'load') + (svc.target > 0 ? ', target ' + fmt(svc.target) + '/pod' : '');
    stat(e.load, 'load', last ? fmt(last.load) : '–');
    stat(e.ready, 'ready', last ? String(last.ready) : '–');
    stat(e.desired, 'desired', last ? String(last.desired) : '–');
    stat(e.queued, 'queued', last ? String(last.queued) : '–');
    e.badge.hidden = !(last && last.panicMode);
    renderLegend(svc);
    drawChart(svc);
  }

  // ---- chart ----

  // segments splits points into runs without gaps.
  function segments(pts) {
    const out = [];
    let cur = [];
    for (const p of pts) {
      if (cur.length && p.t - cur[cur.length - 1].t > GAP_MS) { out.push(cur); cur = []; }
      cur.push(p);
    }
    if (cur.length) out.push(cur);
    return out;
  }

  function linePath(segs, x, y) {
    let d = '';
    for (const seg of segs) {
      seg.forEach((p, i) => { d += (i ? 'L' : 'M') + x(p.t).toFixed(1) + ' ' + y(p).toFixed(1); });
      if (seg.length === 1) d += 'h-2';
    }
    return d;
  }

  function stepPath(segs, x, y) {
    let d = '';
    for (const seg of segs) {
      seg.forEach((p, i) => {
        d += i ? 'H' + x(p.t).toFixed(1) + 'V' + y(p).toFixed(1)
               : 'M' + x(p.t).toFixed(1) + ' ' + y(p).toFixed(1);
      });
      if (seg.length === 1) d += 'h-2';
    }
    return d;
  }

  function areaPath(segs, x, y, base) {
    let d = '';
    for (const seg of segs) {
      const x0 = x(seg[0].t).toFixed(1), xn = x(seg[seg.length - 1].t).toFixed(1);
      d += 'M' + x0 + ' ' + base.toFixed(1);
      for (const p of seg) d += 'L' + x(p.t).toFixed(1) + ' ' + y(p).toFixed(1);
      d += 'L' + xn + ' ' + base.toFixed(1) + 'Z';
    }
    return d;
  }

  function drawChart(svc) {
    const svg = svc.svg;
    const width = Math.max(320, Math.floor(svg.parentNode.clientWidth || 600));
    svg.setAttribute('width', width);
    svg.setAttribute('height', HEIGHT);
    svg.setAttribute('viewBox', '0 0 ' + width + ' ' + HEIGHT);
    svg.replaceChildren();

    const end = state.now, start = end - state.windowMs;
    const x0 = M.left, x1 = width - M.right;
    const mainTop = M.top, mainBottom = HEIGHT - M.bottom - QUEUE_H - QUEUE_GAP;
    const qTop = mainBottom + QUEUE_GAP, qBottom = HEIGHT - M.bottom;
    const x = (t) => x0 + (x1 - x0) * (t - start) / (end - start);
    const pts = svc.points.filter((p) => p.t >= start && p.t <= end);
    const target = svc.target;

    let lmax = 0, rmax = 1, qmax = 0;
    for (const p of pts) {
      lmax = Math.max(lmax, p.load, p.stable, target * p.ready);
      rmax = Math.max(rmax, p.ready, p.desired);
      qmax = Math.max(qmax, p.queued);
    }
    const lstep = niceStep(Math.max(lmax * 1.1, 1) / 4);
    lmax = lstep * Math.max(1, Math.ceil(lmax * 1.1 / lstep));
    const rstep = Math.max(1, Math.ceil(rmax / 4));
    rmax = rstep * Math.ceil((rmax + 0.5) / rstep);
    qmax = Math.max(1, qmax);
    const yl = (v) => mainBottom - (mainBottom - mainTop) * v / lmax;
    const yr = (v) => mainBottom - (mainBottom - mainTop) * v / rmax;
    const yq = (v) => qBottom - (qBottom - qTop) * v / qmax;

    // Grid and left axis ticks.
    for (let i = 0; i * lstep <= lmax + lstep / 2; i++) {
      const v = i * lstep, y = yl(v);
      s('line', { class: 'grid', x1: x0, x2: x1, y1: y, y2: y }, svg);
      s('text', { class: 'tick', x: x0 - 6, y: y + 4, 'text-anchor': 'end' }, svg, fmt(v));
    }
    for (let v = 0; v <= rmax; v += rstep) {
      s('text', { class: 'tick', x: x1 + 6, y: yr(v) + 4 }, svg, String(v));
    }
    s('text', { class: 'axis-title', x: x0 + 4, y: mainTop + 11 }, svg, svc.metric || 'load');
    s('text', { class: 'axis-title', x: x1 - 4, y: mainTop + 11, 'text-anchor': 'end' }, svg, 'replicas');

    // Time axis.
    const tickMs = state.windowMs <= 60e3 ? 10e3 : state.windowMs <= 300e3 ? 60e3 : 120e3;
    for (let ago = 0; ago <= state.windowMs; ago += tickMs) {
      const tx = x(end - ago);
      s('line', { class: 'grid', x1: tx, x2: tx, y1: mainTop, y2: qBottom }, svg);
      const anchor = ago === 0 ? 'end' : ago === state.windowMs ? 'start' : 'middle';
      s('text', { class: 'tick', x: tx, y: HEIGHT - 6, 'text-anchor': anchor }, svg, relLabel(ago));
    }
    s('line', { class: 'axis', x1: x0, x2: x1, y1: mainBottom, y2: mainBottom }, svg);
    s('line', { class: 'axis', x1: x0, x2: x1, y1: qBottom, y2: qBottom }, svg);

    const segs = segments(pts);

    // Panic mode as bands behind everything else.
    for (const seg of segs) {
      let from = null;
      seg.forEach((p, i) => {
        if (p.panicMode && from === null) from = p.t;
        const endRun = !p.panicMode || i === seg.length - 1;
        if (from !== null && endRun) {
          s('rect', { class: 'panic-band', x: x(from), y: mainTop, width: Math.max(2, x(p.t) - x(from)), height: qBottom - mainTop }, svg);
          from = null;
        }
      });
    }

    // Queued requests, in their own strip under the main chart.
    s('text', { class: 'axis-title', x: x0 - 6, y: qTop + 9, 'text-anchor': 'end' }, svg, String(qmax));
    s('text', { class: 'axis-title', x: x1 + 6, y: qTop + 9 }, svg, 'queued');
    s('path', { class: 's-queued', 'data-series': 'queued', d: areaPath(segs, x, (p) => yq(p.queued), qBottom) }, svg);

    if (target > 0) {
      s('path', { class: 's-target', 'data-series': 'target', d: stepPath(segs, x, (p) => yl(target * p.ready)) }, svg);
    }
    s('path', { class: 's-stable', 'data-series': 'stable', d: linePath(segs, x, (p) => yl(p.stable)) }, svg);
    s('path', { class: 's-desired', 'data-series': 'desired', d: stepPath(segs, x, (p) => yr(p.desired)) }, svg);
    s('path', { class: 's-ready', 'data-series': 'ready', d: stepPath(segs, x, (p) => yr(p.ready)) }, svg);
    s('path', { class: 's-load', 'data-series': 'load', d: linePath(segs, x, (p) => yl(p.load)) }, svg);

    if (!pts.length) {
      s('text', { class: 'nodata', x: (x0 + x1) / 2, y: (mainTop + mainBottom) / 2, 'text-anchor': 'middle' }, svg, 'no samples in this window');
    }
  }

  function renderAll() {
    emptyEl.hidden = state.services.size > 0;
    for (const svc of state.services.values()) render(svc);
  }

  // ---- polling ----

  function apply(data) {
    if (state.since !== null && data.now < state.since) {
      // The server's history went back in time (it restarted): start over.
      for (const svc of [...state.services.values()]) removeService(svc);
      state.since = null;
      renderAll();
      return;
    }
    state.now = data.now;
    const seen = new Set();
    for (const d of data.services || []) {
      seen.add(d.name);
      const svc = state.services.get(d.name) || createService(d.name);
      svc.metric = d.metric;
      svc.target = d.target;
      const lastT = svc.points.length ? svc.points[svc.points.length - 1].t : -Infinity;
      for (const p of d.points || []) {
        if (p.t > lastT) svc.points.push(p);
        if (state.since === null || p.t > state.since) state.since = p.t;
      }
    }
    for (const svc of [...state.services.values()]) {
      if (!seen.has(svc.name)) { removeService(svc); continue; }
      const horizon = state.now - KEEP_MS;
      let drop = 0;
      while (drop < svc.points.length && svc.points[drop].t < horizon) drop++;
      if (drop) svc.points.splice(0, drop);
    }
    renderAll();
  }

  function setStatus(ok) {
    if (ok) {
      statusEl.className = 'status ok';
      statusEl.textContent = 'live';
    } else {
      statusEl.className = 'status bad';
      statusEl.textContent = 'disconnected — retrying';
    }
  }

  // poll fetches what is new and schedules the next poll whatever happens.
  // A failed fetch shows as disconnected; a failure to draw what arrived is
  // a bug and is left to surface as an uncaught error.
  async function poll() {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), TIMEOUT_MS);
    let data;
    try {
      const url = 'api/history' + (state.since === null ? '' : '?since=' + state.since);
      const resp = await fetch(url, { cache: 'no-store', signal: ctrl.signal });
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      data = await resp.json();
    } catch (err) {
      setStatus(false);
      setTimeout(poll, POLL_MS);
      return;
    } finally {
      clearTimeout(timer);
    }
    setTimeout(poll, POLL_MS);
    apply(data);
    state.updates++;
    document.body.dataset.updates = String(state.updates);
    setStatus(true);
  }

  let resizeQueued = false;
  window.addEventListener('resize', () => {
    if (resizeQueued) return;
    resizeQueued = true;
    requestAnimationFrame(() => { resizeQueued = false; renderAll(); });
  });
  windowEl.addEventListener('change', () => {
    state.windowMs = Number(windowEl.value) * 1000;
    renderAll();
  });
  state.windowMs = Number(windowEl.value) * 1000;
  poll();
})();
