#include "stintd/server/dashboard.h"

namespace stint::stintd {
namespace {

// Everything the page needs is below: no external script, style, font or
// image, so it works on an air-gapped cluster and cannot leak the token to a
// third party. Data is only ever put into the DOM with textContent and
// setAttribute (never innerHTML): job names and messages are user input.
constexpr std::string_view kPage = R"stintd(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>stintd dashboard</title>
<style>
  :root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --bg: #ffffff; --panel: #f6f8fa; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
         background: var(--bg); }
  header { display: flex; align-items: baseline; gap: 16px; padding: 10px 16px; border-bottom: 1px solid var(--line);
           background: var(--panel); flex-wrap: wrap; }
  header h1 { font-size: 16px; margin: 0; }
  #summary { color: var(--fg); }
  #status { margin-left: auto; color: var(--muted); }
  #status[data-state="error"], #status[data-state="no-token"] { color: #cf222e; font-weight: 600; }
  #token-form input { width: 22em; }
  main { padding: 8px 16px 24px; }
  section { margin-top: 14px; }
  h2 { font-size: 14px; margin: 0 0 6px; display: flex; gap: 12px; align-items: baseline; }
  h2 small { font-weight: normal; color: var(--muted); }
  #timeline-wrap { width: 100%; overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; }
  svg#timeline { display: block; font-size: 11px; }
  .lane { fill: #ffffff; }
  .lane.odd { fill: #f6f8fa; }
  .lane-label { font-weight: 600; font-size: 12px; }
  .lane-sub { fill: var(--muted); }
  .tick { stroke: #eaeef2; }
  .tick-label { fill: var(--muted); text-anchor: middle; }
  .window { stroke-width: 1; rx: 3; }
  .window.open { fill: #ddf4ff; stroke: #54aeff; }
  .window.upcoming { fill: #f0f6ff; stroke: #8fb8ee; stroke-dasharray: 4 3; }
  .window.closed { fill: url(#hatch); stroke: #8c959f; }
  .window.revoked { stroke: #cf222e; stroke-dasharray: 5 3; }
  .window.spot.open { fill: #fff8c5; stroke: #d4a72c; }
  .window-label { fill: #24292f; }
  .window-label.closed { fill: var(--muted); }
  .open-end { fill: #54aeff; }
  .segment { stroke: rgba(0, 0, 0, 0.35); stroke-width: 1; }
  .segment.ended, .segment.completed, .segment.cancelled { opacity: 0.55; }
  .segment.lost { opacity: 0.55; stroke: #cf222e; stroke-width: 2; }
  .segment.notified { stroke: #cf222e; stroke-width: 2; }
  .segment-label { fill: #ffffff; font-weight: 600; paint-order: stroke; stroke: rgba(0, 0, 0, 0.35);
                   stroke-width: 2px; pointer-events: none; }
  .segment-plan { fill: none; stroke-dasharray: 3 3; stroke-width: 1.5; }
  .deadline { stroke: #cf222e; stroke-width: 2; }
  #now-line { stroke: #cf222e; stroke-width: 1.5; stroke-dasharray: 6 3; }
  .now-label { fill: #cf222e; font-weight: 600; text-anchor: middle; }
  .empty-note { fill: var(--muted); }
  #legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin-top: 6px; color: var(--muted); }
  .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px;
            vertical-align: -1px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eaeef2; white-space: nowrap; }
  th { background: var(--panel); font-weight: 600; position: sticky; top: 0; }
  td.detail { white-space: normal; color: var(--muted); }
  td.num { font-variant-numeric: tabular-nums; text-align: right; }
  td.value { font-variant-numeric: tabular-nums; }
  #metrics td.name, #metrics td.labels { width: 1%; }
  td.labels { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
  td.name { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
  tr[data-state="RUNNING"] td.state { color: #1a7f37; font-weight: 600; }
  tr[data-state="PENDING"] td.reason { color: #9a6700; font-weight: 600; }
  tr.empty td { color: var(--muted); }
  .scroll { max-height: 420px; overflow-y: auto; border: 1px solid var(--line); border-radius: 6px; }
</style>
</head>
<body>
<header>
  <h1>stintd</h1>
  <span id="summary"></span>
  <form id="token-form" hidden>
    <input id="token-input" type="password" placeholder="admin or worker token" autocomplete="off">
    <button type="submit">Use token</button>
  </form>
  <span id="status" data-state="loading">loading&hellip;</span>
</header>
<main>
  <section>
    <h2>Timeline <small>one lane per pool: windows (GPUs), and the segments jobs ran in them</small>
      <label><small>range</small>
        <select id="range">
          <option value="auto" selected>since the first window, and as far ahead</option>
          <option value="fit">everything</option>
          <option value="900">last 15 min</option>
          <option value="3600">last hour</option>
          <option value="21600">last 6 h</option>
          <option value="86400">last day</option>
        </select>
      </label>
    </h2>
    <div id="timeline-wrap">
      <svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="1200" height="80">
        <defs>
          <pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
            <rect width="6" height="6" fill="#eaeef2"></rect>
            <line x1="0" y1="0" x2="0" y2="6" stroke="#d0d7de" stroke-width="3"></line>
          </pattern>
        </defs>
        <g id="timeline-body"></g>
      </svg>
    </div>
    <div id="legend"></div>
  </section>
  <section>
    <h2>Queue <small>pending jobs in plan order, then running ones</small></h2>
    <div class="scroll">
      <table id="queue">
        <thead><tr><th>Pos</th><th>Job</th><th>Name</th><th>Team</th><th>Priority</th><th>State</th><th>GPUs</th>
          <th>Reason</th><th>Planned start</th><th>Waiting</th><th>Detail</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </section>
  <section>
    <h2>Metrics <small>stintd_* samples of /metrics</small></h2>
    <div class="scroll">
      <table id="metrics">
        <thead><tr><th>Metric</th><th>Labels</th><th>Value</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </section>
</main>
<script>
'use strict';
(() => {
  const REFRESH_MS = 2000;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const LABEL_W = 140, AXIS_H = 30, ROW_H = 56, LANE_PAD = 8, RIGHT_PAD = 16;
  const WINDOW_LABEL_H = 16;  // room for "w3 · 8 GPUs" above the segments
  const $ = (id) => document.getElementById(id);

  // The token lives in the fragment (#token=...), which is never sent to a
  // server; it only goes out in the Authorization header of our own fetches.
  const token = () => new URLSearchParams(location.hash.slice(1)).get('token') || '';

  function make(ns, tag, attrs, text) {
    const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  const html = (tag, attrs, text) => make(null, tag, attrs, text);
  const svg = (tag, attrs, text) => make(SVG_NS, tag, attrs, text);

  async function fetchView(path, asText) {
    const res = await fetch(path, {
      headers: {'Authorization': 'Bearer ' + token()},
      cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer',
    });
    const body = await res.text();
    if (!res.ok) {
      let message = body.slice(0, 300);
      try {
        const e = JSON.parse(body).error;
        message = e.code + ': ' + e.message;
      } catch (_) { /* not stintd's error body: show it raw */ }
      throw new Error('GET ' + path + ' answered HTTP ' + res.status + ' ' + message);
    }
    if (asText) return body;
    try {
      return JSON.parse(body);
    } catch (e) {
      throw new Error('GET ' + path + ' answered something that is not JSON: ' + e.message);
    }
  }

  function setStatus(state, text) {
    const s = $('status');
    s.setAttribute('data-state', state);
    s.textContent = text;
  }

  // --- formatting ---
  const pad2 = (n) => String(n).padStart(2, '0');
  function clock(ms, seconds) {
    const d = new Date(ms);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + (seconds ? ':' + pad2(d.getSeconds()) : '');
  }
  function dayClock(ms) {
    const d = new Date(ms);
    return d.getFullYear() + '-' + pad2(d.getMonth() + 1) + '-' + pad2(d.getDate()) + ' ' + clock(ms, false);
  }
  function duration(seconds) {
    let s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + 's';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm' + (s % 60 ? pad2(s % 60) + 's' : '');
    const h = Math.floor(m / 60);
    if (h < 48) return h + 'h' + pad2(m % 60) + 'm';
    return Math.floor(h / 24) + 'd' + pad2(h % 24) + 'h';
  }
  function relative(ms, now) {
    const d = (ms - now) / 1000;
    if (Math.abs(d) < 1) return 'now';
    return d > 0 ? 'in ' + duration(d) : duration(-d) + ' ago';
  }
  const jobColour = (id) => 'hsl(' + ((id * 137.508) % 360).toFixed(1) + ', 62%, 46%)';
  function gpuRange(min, max) {
    if (min === undefined || min === null) return '-';
    return max === undefined || max === null || max === min ? String(min) : min + '-' + max;
  }

  // --- timeline ---
  const windowEnd = (w, now) => (w.end_ms === null ? now : w.end_ms);  // open-ended: drawn to now
  const segmentEnd = (s, now) => (s.ended_ms > 0 ? s.ended_ms : now);

  function timeRange(windows, segments, now) {
    const choice = $('range').value;
    if (choice !== 'fit' && choice !== 'auto') {
      const span = Number(choice) * 1000;
      return [now - span, now + span / 4];
    }
    // "auto": all of the past (to a week), as much of the future (at least
    // 5 min); "fit": up to the last window end too (a week at most).
    let lo = now, hi = now;
    for (const w of windows) {
      lo = Math.min(lo, w.start_ms);
      hi = Math.max(hi, windowEnd(w, now));
    }
    for (const s of segments) {
      lo = Math.min(lo, s.start_ms);
      hi = Math.max(hi, segmentEnd(s, now), s.planned_end_ms || 0, s.deadline_ms || 0);
    }
    const WEEK = 7 * 86400000;
    lo = Math.max(lo, now - WEEK);
    hi = Math.min(hi, now + WEEK);
    if (choice === 'auto') hi = Math.min(hi, now + Math.max(now - lo, 300000));
    const span = Math.max(hi - lo, 60000);
    return [lo - span * 0.02, hi + span * 0.04];
  }

  function axisStep(spanMs, plotWidth) {
    const want = spanMs / Math.max(2, plotWidth / 110);
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
                   172800, 604800];
    for (const s of steps) if (s * 1000 >= want) return s * 1000;
    return steps[steps.length - 1] * 1000;
  }

  // Windows of a pool that overlap in time go to separate rows of its lane.
  function assignRows(windows) {
    const rowOf = new Map(), rowEnds = [];
    const sorted = windows.slice().sort((a, b) => a.start_ms - b.start_ms || a.id - b.id);
    for (const w of sorted) {
      let r = rowEnds.findIndex((end) => end <= w.start_ms);
      if (r < 0) {
        r = rowEnds.length;
        rowEnds.push(0);
      }
      rowEnds[r] = w.end_ms === null ? Infinity : Math.max(w.end_ms, w.start_ms);
      rowOf.set(w.id, r);
    }
    return {rowOf, rows: Math.max(1, rowEnds.length)};
  }

  // Within a window, each allocation gets a GPU offset no other allocation
  // overlapping it in time holds, so concurrent jobs stack by GPU count.
  function assignGpuOffsets(items, capacity) {
    const placed = [];
    for (const it of items.slice().sort((a, b) => a.start - b.start || a.seg.id - b.seg.id)) {
      const busy = placed.filter((p) => p.start < it.end && it.start < p.end);
      const candidates = [0].concat(busy.map((p) => p.offset + p.gpus)).sort((a, b) => a - b);
      let offset = candidates.find((c) => busy.every((p) => c + it.gpus <= p.offset || c >= p.offset + p.gpus));
      if (offset === undefined) offset = 0;
      it.offset = Math.min(offset, Math.max(0, capacity - it.gpus));
      placed.push(it);
    }
  }

  function drawTimeline(d) {
    const {pools, windows, segments, jobsById, now} = d;
    const body = $('timeline-body');
    const box = $('timeline');
    const width = Math.max(700, ($('timeline-wrap').clientWidth || 1202) - 2);
    const plotW = width - LABEL_W - RIGHT_PAD;
    const [t0, t1] = timeRange(windows, segments, now);
    const x = (t) => LABEL_W + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * plotW;
    const visible = (a, b) => b >= t0 && a <= t1;
    const lanes = [], parts = [];

    // Lanes: the pools in the API's order, then any pool only a window names.
    const laneNames = pools.map((p) => p.name);
    for (const w of windows) if (!laneNames.includes(w.pool)) laneNames.push(w.pool);
    const windowsById = new Map(windows.map((w) => [w.id, w]));
    const place = new Map();  // window id -> {y}
    let y = AXIS_H;
    laneNames.forEach((name, i) => {
      const own = windows.filter((w) => w.pool === name);
      const {rowOf, rows} = assignRows(own);
      const laneH = rows * ROW_H + 2 * LANE_PAD;
      lanes.push(svg('rect', {class: 'lane' + (i % 2 ? ' odd' : ''), 'data-pool': name, x: 0, y, width,
                              height: laneH}));
      lanes.push(svg('text', {class: 'lane-label', 'data-pool': name, x: 8, y: y + 20}, name));
      const openGpus = own.reduce((n, w) => n + (w.open ? w.gpus : 0), 0);
      const usedGpus = own.reduce((n, w) => n + (w.open ? w.allocated_gpus : 0), 0);
      lanes.push(svg('text', {class: 'lane-sub', x: 8, y: y + 36}, usedGpus + '/' + openGpus + ' GPUs in use'));
      for (const w of own) place.set(w.id, {y: y + LANE_PAD + rowOf.get(w.id) * ROW_H});
      y += laneH;
    });
    const height = Math.max(y, AXIS_H + 40) + 6;
    if (laneNames.length === 0) {
      parts.push(svg('text', {class: 'empty-note', x: LABEL_W, y: AXIS_H + 24},
                     'no pools yet: POST /v1/pools, then /v1/windows'));
    }

    // Time axis, ticks aligned to the local clock.
    const step = axisStep(t1 - t0, plotW);
    const tz = new Date(t0).getTimezoneOffset() * 60000;
    const axis = svg('g', {id: 'axis'});
    for (let t = Math.ceil((t0 - tz) / step) * step + tz; t <= t1; t += step) {
      const tx = x(t);
      axis.appendChild(svg('line', {class: 'tick', x1: tx, x2: tx, y1: AXIS_H - 6, y2: height}));
      const label = step >= 86400000 ? dayClock(t) : clock(t, step < 60000);
      axis.appendChild(svg('text', {class: 'tick-label', x: tx, y: AXIS_H - 10}, label));
    }

    // Windows.
    for (const w of windows) {
      const end = windowEnd(w, now);
      if (!visible(w.start_ms, end)) continue;
      const state = w.open ? 'open' : w.start_ms > now ? 'upcoming' : 'closed';
      const cls = ['window', state, w.kind];
      if (w.closed_early) cls.push('revoked');
      if (w.end_ms === null) cls.push('open-ended');
      const wx = x(w.start_ms), ww = Math.max(2, x(end) - wx), wy = place.get(w.id).y, wh = ROW_H - 6;
      const rect = svg('rect', {class: cls.join(' '), 'data-pool': w.pool, 'data-window': w.id, 'data-state': state,
                                'data-gpus': w.gpus, 'data-kind': w.kind, x: wx, y: wy, width: ww, height: wh});
      const until = w.end_ms === null ? 'until revoked' : 'until ' + dayClock(w.end_ms);
      rect.appendChild(svg('title', {}, 'window ' + w.id + ' (' + w.kind + '), pool ' + w.pool + ': ' + w.gpus +
                           ' GPUs, ' + w.allocated_gpus + ' allocated; from ' + dayClock(w.start_ms) + ' ' + until +
                           (w.closed_early ? '; closed early' : '') + '; ' + state));
      parts.push(rect);
      if (w.end_ms === null && end >= t0) {
        const ex = x(end);
        parts.push(svg('path', {class: 'open-end', 'data-window': w.id,
                                d: 'M' + ex + ' ' + (wy + 2) + ' l7 ' + (wh / 2 - 2) + ' l-7 ' + (wh / 2 - 2) + 'z'}));
      }
      let label = 'w' + w.id + ' \u00b7 ' + w.gpus + ' GPUs';
      if (w.open) label += ' \u00b7 ' + w.allocated_gpus + ' used';
      if (w.kind === 'spot') label += ' \u00b7 spot';
      if (w.closed_early) label += ' \u00b7 closed early';
      const clip = svg('svg', {x: wx, y: wy, width: ww, height: WINDOW_LABEL_H});
      clip.appendChild(svg('text', {class: 'window-label ' + state, 'data-window': w.id, x: 4, y: 12}, label));
      parts.push(clip);
    }

    // Segments, one rectangle per window they hold GPUs in.
    const perWindow = new Map();
    for (const s of segments) {
      for (const a of s.allocs || []) {
        const w = windowsById.get(a.window_id);
        if (!w) continue;
        if (!perWindow.has(w.id)) perWindow.set(w.id, []);
        perWindow.get(w.id).push({seg: s, gpus: a.gpus, start: s.start_ms, end: segmentEnd(s, now)});
      }
    }
    const legend = new Map();
    for (const [wid, items] of perWindow) {
      const w = windowsById.get(wid);
      assignGpuOffsets(items, w.gpus);
      const top = place.get(wid).y + WINDOW_LABEL_H, areaH = ROW_H - 6 - WINDOW_LABEL_H - 3;
      for (const it of items) {
        const s = it.seg;
        const job = jobsById.get(s.job_id);
        const name = job ? job.name : 'job ' + s.job_id;
        const colour = jobColour(s.job_id);
        const sy = top + (areaH * it.offset) / w.gpus, sh = Math.max(4, (areaH * it.gpus) / w.gpus);
        const active = s.state === 'running' || s.state === 'notified';
        const planEnd = s.deadline_ms > 0 ? s.deadline_ms : s.planned_end_ms;
        if (active && planEnd && planEnd > now && visible(now, planEnd)) {
          parts.push(svg('rect', {class: 'segment-plan', 'data-job': s.job_id, 'data-segment': s.id, x: x(now),
                                  y: sy + 0.5, width: Math.max(0, x(planEnd) - x(now)), height: sh - 1,
                                  stroke: colour}));
        }
        if (!visible(it.start, it.end)) continue;
        const sx = x(it.start), sw = Math.max(3, x(it.end) - sx);
        const group = svg('svg', {class: 'segment-box', x: sx, y: sy, width: sw, height: sh});
        const rect = svg('rect', {class: 'segment ' + s.state, 'data-job': s.job_id, 'data-segment': s.id,
                                  'data-window': wid, 'data-pool': w.pool, 'data-gpus': it.gpus,
                                  'data-state': s.state, x: 0, y: 0, width: sw, height: sh, fill: colour});
        let tip = name + ' (job ' + s.job_id + '), segment ' + s.id + ': ' + it.gpus + ' GPUs in window ' + wid +
                  ', ' + s.state + ', from ' + clock(s.start_ms, true);
        if (s.ended_ms > 0) tip += ' to ' + clock(s.ended_ms, true);
        if (s.notice_reason && s.notice_reason !== 'none') {
          tip += '; notice ' + s.notice_reason + ', deadline ' + clock(s.deadline_ms, true);
        }
        rect.appendChild(svg('title', {}, tip));
        group.appendChild(rect);
        group.appendChild(svg('text', {class: 'segment-label', 'data-job': s.job_id, 'data-segment': s.id, x: 4,
                                       y: sh / 2 + 4, style: 'font-size:' + Math.max(8, Math.min(12, sh - 2)) + 'px'},
                              name));
        parts.push(group);
        if (s.state === 'notified' && s.deadline_ms > 0 && visible(s.deadline_ms, s.deadline_ms)) {
          const dx = x(s.deadline_ms);
          parts.push(svg('line', {class: 'deadline', 'data-job': s.job_id, x1: dx, x2: dx, y1: sy, y2: sy + sh}));
        }
        legend.set(s.job_id, name);
      }
    }

    // Now.
    const nx = x(now);
    parts.push(svg('line', {id: 'now-line', x1: nx, x2: nx, y1: AXIS_H - 4, y2: height}));
    parts.push(svg('text', {class: 'now-label', x: nx, y: 11}, 'now ' + clock(now, true)));

    box.setAttribute('width', width);
    box.setAttribute('height', height);
    box.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    box.setAttribute('data-t0', Math.round(t0));
    box.setAttribute('data-t1', Math.round(t1));
    box.setAttribute('data-now', now);
    body.replaceChildren(...lanes, axis, ...parts);  // ticks over the lane bands, under the windows

    const items = [];
    for (const [id, name] of [...legend].sort((a, b) => a[0] - b[0])) {
      const item = html('span', {class: 'legend-item', 'data-job': id});
      item.appendChild(html('span', {class: 'swatch', style: 'background:' + jobColour(id)}));
      item.appendChild(document.createTextNode(name + ' #' + id));
      items.push(item);
    }
    $('legend').replaceChildren(...items);
  }

  // --- queue ---
  function row(attrs, cells) {
    const tr = html('tr', attrs);
    for (const [cls, text, title] of cells) {
      const td = html('td', {class: cls}, text);
      if (title) td.setAttribute('title', title);
      tr.appendChild(td);
    }
    return tr;
  }

  function drawQueue(queue, jobsById, now) {
    const rows = [];
    for (const p of queue.pending || []) {
      const job = jobsById.get(p.job_id) || {};
      let planned = 'unknown';
      if (p.planned_start_ms !== null && p.planned_start_ms !== undefined) {
        planned = clock(p.planned_start_ms, true) + ' (' + relative(p.planned_start_ms, now) + ')';
        if (p.planned_gpus > 0) planned += ' on ' + p.planned_gpus;
      }
      rows.push(row({'data-job': p.job_id, 'data-state': job.state || 'PENDING', 'data-reason': p.reason},
                    [['num pos', p.position], ['num job', p.job_id], ['name', p.name || job.name || ''],
                     ['team', p.team || '-'], ['priority', p.priority || job.priority || '-'],
                     ['state', job.state || 'PENDING'], ['gpus', gpuRange(p.min_gpus, p.max_gpus)],
                     ['reason', p.reason, p.detail], ['planned', planned],
                     ['wait', duration(p.wait_seconds || 0)], ['detail', p.detail || '']]));
    }
    for (const r of queue.running || []) {
      const job = jobsById.get(r.job_id) || {};
      const seg = r.segment || {};
      const where = (seg.allocs || []).map((a) => 'w' + a.window_id + ':' + a.gpus).join(', ');
      let detail = 'segment ' + seg.id + ' on ' + where + ' (' + seg.state + ')';
      if (seg.notice_reason && seg.notice_reason !== 'none') {
        detail += '; notice ' + seg.notice_reason + ', deadline ' + relative(seg.deadline_ms, now);
      }
      rows.push(row({'data-job': r.job_id, 'data-state': job.state || 'RUNNING'},
                    [['num pos', '-'], ['num job', r.job_id], ['name', r.name || job.name || ''],
                     ['team', r.team || '-'], ['priority', r.priority || '-'], ['state', job.state || 'RUNNING'],
                     ['gpus', gpuRange(job.min_gpus, job.max_gpus)], ['reason', '-'],
                     ['planned', 'started ' + relative(seg.start_ms, now)], ['wait', '-'], ['detail', detail]]));
    }
    if (rows.length === 0) {
      const tr = html('tr', {class: 'empty'});
      tr.appendChild(html('td', {colspan: 11}, 'no pending or running jobs'));
      rows.push(tr);
    }
    $('queue').tBodies[0].replaceChildren(...rows);
  }

  // --- metrics ---
  // Prometheus text format 0.0.4: "name{labels} value [timestamp]" lines and
  // "# HELP name text" comments. Only stintd's own families are shown.
  function parseMetrics(text) {
    const help = new Map(), samples = [];
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (line === '') continue;
      if (line.startsWith('# HELP ')) {
        const rest = line.slice(7), sp = rest.indexOf(' ');
        help.set(sp < 0 ? rest : rest.slice(0, sp), sp < 0 ? '' : rest.slice(sp + 1));
        continue;
      }
      if (line[0] === '#') continue;
      const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/.exec(line);
      if (m && m[1].startsWith('stintd_')) samples.push({name: m[1], labels: m[2] || '', value: m[3]});
    }
    return {help, samples};
  }

  // The shortest text that reads back as the same double ("0.1", not
  // "0.10000000000000001"); NaN and infinities as Prometheus writes them.
  function showValue(raw) {
    const v = Number(raw);
    return Number.isFinite(v) ? String(v) : raw;
  }

  function drawMetrics(metrics) {
    const rows = [];
    for (const s of metrics.samples) {
      const family = metrics.help.has(s.name) ? s.name : s.name.replace(/_(bucket|sum|count)$/, '');
      rows.push(row({'data-metric': s.name, 'data-labels': s.labels, 'data-value': s.value},
                    [['name', s.name, metrics.help.get(family)], ['labels', s.labels],
                     ['value', showValue(s.value)]]));
    }
    if (rows.length === 0) {
      const tr = html('tr', {class: 'empty'});
      tr.appendChild(html('td', {colspan: 3}, 'no stintd_* samples'));
      rows.push(tr);
    }
    $('metrics').tBodies[0].replaceChildren(...rows);
  }

  function drawSummary(d) {
    const st = d.queue.stats || {};
    const open = d.windows.filter((w) => w.open).length;
    $('summary').textContent = (st.running_jobs ?? '-') + ' running \u00b7 ' + (st.pending_jobs ?? '-') +
        ' pending \u00b7 ' + (st.allocated_gpus ?? '-') + '/' + (st.open_window_gpus ?? '-') + ' GPUs allocated, ' +
        (st.free_gpus ?? '-') + ' free \u00b7 ' + open + ' window' + (open === 1 ? '' : 's') + ' open';
  }

  // --- refresh loop ---
  let last = null, timer = null;

  function render() {
    if (!last) return;
    drawSummary(last);
    drawTimeline(last);
    drawQueue(last.queue, last.jobsById, last.now);
    drawMetrics(last.metrics);
  }

  async function refresh() {
    clearTimeout(timer);
    if (!token()) {
      $('token-form').hidden = false;
      setStatus('no-token', 'no token: open this page as /dashboard#token=<admin or worker token>');
      return;  // the hashchange listener starts again
    }
    $('token-form').hidden = true;
    try {
      const [pools, windows, jobs, queue, segments, metrics] = await Promise.all([
        fetchView('/v1/pools'), fetchView('/v1/windows'), fetchView('/v1/jobs'), fetchView('/v1/queue'),
        fetchView('/v1/segments'), fetchView('/metrics', true)]);
      const jobList = jobs.jobs || [];
      last = {pools: pools.pools || [], windows: windows.windows || [],
              jobsById: new Map(jobList.map((j) => [j.id, j])), queue, segments: segments.segments || [],
              metrics: parseMetrics(metrics), now: queue.now_ms};
      render();
      setStatus('ok', 'updated ' + clock(Date.now(), true) + ' (every ' + REFRESH_MS / 1000 + ' s)');
    } catch (e) {
      setStatus('error', e.message + (last ? ' (showing the last data that loaded)' : ''));
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token-input').value.trim();
    if (t) location.hash = 'token=' + encodeURIComponent(t);
  });
  // #token=...&range=3600 picks the timeline's range.
  function rangeFromHash() {
    const range = new URLSearchParams(location.hash.slice(1)).get('range');
    if (range && [...$('range').options].some((o) => o.value === range)) $('range').value = range;
  }
  rangeFromHash();
  $('range').addEventListener('change', render);
  window.addEventListener('hashchange', () => {
    rangeFromHash();
    refresh();
  });
  window.addEventListener('resize', render);
  refresh();
})();
</script>
</body>
</html>
)stintd";

}  // namespace

std::string_view DashboardHtml() { return kPage; }

}  // namespace stint::stintd
