/* sip dashboard (docs/dashboard.md).
 *
 * Live: reads GET /v2/dashboard/data once a second and at once when
 * /v2/events (Server-Sent Events, without INFERENCE_COMPLETE) reports a
 * change; session state changes are shown as the event arrives. Each read
 * is a sample: rates, windowed p50/p99 and the charts (uPlot) come from the
 * differences between samples, kept for the last ten minutes.
 * Report: the page as GET /v2/dashboard/report or the Export button wrote
 * it, with the data in <script id="sip-snapshot"> (and the samples and
 * events the exporting page had in <script id="sip-history">); nothing is
 * fetched. */
(function () {
  'use strict';

  var MAX_SAMPLES = 600;   /* ten minutes at one a second */
  var MAX_EVENTS = 200;
  var POLL_MS = 1000;
  var WINDOW_S = 10;       /* p50/p99 and req/s in the table: the last 10 s */
  /* SIP__DASH_HISTORY_EMPTY (src/http/http_impl.h); split so that this
   * script, inlined in the page, holds no closing script tag. */
  var HISTORY_EMPTY = '<script type="application/json" id="sip-history">null</scr' + 'ipt>';
  var EVENT_TYPES = ['STATE_CHANGE', 'ERROR', 'POOL_LOADED', 'POOL_FAILED', 'POOL_SCALED',
                     'POOL_FAILOVER', 'ALERT'];

  var cur = null;     /* the latest data */
  var samples = [];   /* {t: seconds, pools: {key: sample}} oldest first */
  var events = [];    /* newest last */
  var charts = {};
  var refreshTimer = null, refreshAt = 0, fetching = false;
  var pending = [], flushTimer = null;  /* events not yet shown */
  var streamOpen = false, dataError = null;
  var FLUSH_MS = 150;                   /* events are shown in batches this often */

  function $(id) { return document.getElementById(id); }

  function esc(s) {
    return String(s == null ? '' : s).replace(/[&<>"']/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c];
    });
  }

  function badge(text, cls, attrs) {
    return '<span class="badge s-' + esc(cls || text) + '"' + (attrs || '') + '>' + esc(text) +
           '</span>';
  }

  /* A pool's key: its name, "name:version" for a version other than the default. */
  function poolKey(p) {
    return p.version != null && p.default === false ? p.name + ':' + p.version : p.name;
  }

  function fmt(v, digits) {
    return v == null || !isFinite(v) ? '–' : v.toFixed(digits == null ? 2 : digits);
  }

  function fmtTime(us) {
    var d = new Date(us / 1000);
    return d.toLocaleTimeString([], {hour12: false}) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }

  function fmtDur(s) {
    if (s == null) return '–';
    if (s < 60) return s.toFixed(0) + ' s';
    if (s < 3600) return (s / 60).toFixed(1) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  /* ---- numbers from the data ------------------------------------------- */

  /* The q-quantile of a histogram (bucket upper bounds `le`, the last
   * "+Inf", and counts per bucket, cumulative), linear within a bucket as
   * Prometheus' histogram_quantile; null without observations. */
  function quantile(q, le, cum) {
    var n = cum.length ? cum[cum.length - 1] : 0;
    if (!n) return null;
    var rank = q * n;
    for (var i = 0; i < cum.length; i++) {
      if (cum[i] < rank) continue;
      if (le[i] === '+Inf') return i ? le[i - 1] : null;
      var lo = i ? le[i - 1] : 0, prev = i ? cum[i - 1] : 0, inb = cum[i] - prev;
      return inb ? lo + (le[i] - lo) * (rank - prev) / inb : le[i];
    }
    return null;
  }

  function sum(o) {
    var n = 0;
    for (var k in o) n += o[k];
    return n;
  }

  function sampleOf(d) {
    var s = {t: d.time_us / 1e6, pools: {}, sessions: {}};
    (d.pools || []).forEach(function (p) {
      var tot = (p.latency_us || {}).total || {buckets: []};
      var bs = (p.batch_sizes || {}).buckets || [];
      var states = {};
      (p.sessions || []).forEach(function (x) {
        var st = x.drained ? 'DRAINED' : x.state;
        states[st] = (states[st] || 0) + 1;
        s.sessions[x.id] = st;
      });
      s.pools[poolKey(p)] = {
        count: sum(p.requests || {}), ok: (p.requests || {}).OK || 0,
        le: tot.buckets.map(function (b) { return b[0]; }),
        lat: tot.buckets.map(function (b) { return b[1]; }),
        queued: p.queued_by_priority || {},
        batch_le: bs.map(function (b) { return b[0]; }),
        batch: bs.map(function (b) { return b[1]; }),
        states: states,
        compliance: p.sla && p.sla.compliance != null ? p.sla.compliance : null
      };
    });
    return s;
  }

  /* Rates and quantiles of pool `k` between samples a (older) and b; with
   * no older sample (a null), since the server started. */
  function between(a, b, k, uptime) {
    var pb = b.pools[k];
    if (!pb) return null;
    var pa = a && a.pools[k];
    if (pa && pb.count < pa.count) pa = null;  /* counters restarted (the pool was reloaded) */
    var dt = pa ? b.t - a.t : uptime;
    var lat = pb.lat.map(function (c, i) { return pa && pa.lat[i] != null ? c - pa.lat[i] : c; });
    var dn = pa ? pb.count - pa.count : pb.count;
    var q50 = quantile(0.5, pb.le, lat), q99 = quantile(0.99, pb.le, lat);
    return {
      rps: dt > 0 ? dn / dt : null,
      p50: q50 == null ? null : q50 / 1000,
      p99: q99 == null ? null : q99 / 1000
    };
  }

  /* The sample about WINDOW_S before the last, or null. */
  function windowStart() {
    if (samples.length < 2) return null;
    var last = samples[samples.length - 1];
    for (var i = samples.length - 2; i >= 0; i--)
      if (last.t - samples[i].t >= WINDOW_S || i === 0) return samples[i];
    return null;
  }

  /* ---- tables ------------------------------------------------------------ */

  /* The badge: a report's time, or the live page's stream and data. */
  function renderLink(d, live) {
    var link = $('link');
    if (!live) {
      link.textContent = 'report of ' + new Date(d.time_us / 1000).toLocaleString();
      link.className = 'badge';
    } else if (dataError) {
      link.textContent = 'no data: ' + dataError;
      link.className = 'badge s-down';
    } else {
      link.textContent = streamOpen ? 'live' : 'reconnecting';
      link.className = 'badge ' + (streamOpen ? 's-live' : 's-down');
    }
  }

  function mib(bytes) { return bytes == null ? '–' : fmt(bytes / 1048576, 1); }
  /* Memory (docs/elastic.md): resident, the models' measured, the budget. */
  function memoryText(m) {
    return !m ? '' : ' · memory ' + mib(m.resident_bytes) + ' MiB, models ' + mib(m.models_bytes) +
        ' MiB' + (m.budget_bytes != null ? ' of budget ' + mib(m.budget_bytes) + ' MiB' : '');
  }
  function renderHeader(d, live) {
    $('server-info').textContent = 'version ' + d.version + ' · up ' + fmtDur(d.uptime_s) +
        ' · ' + (d.draining ? 'draining' : d.ready ? 'ready' : 'not ready') + memoryText(d.memory);
    renderLink(d, live);
  }

  function renderAlerts(d) {
    var items = [];
    (d.pools || []).forEach(function (p) {
      var a = p.sla && p.sla.alert;
      if (a && a.level && a.level !== 'none')
        items.push('<li data-alert="' + esc(poolKey(p)) + '">' + badge(a.level) + ' <b>' +
                   esc(poolKey(p)) + '</b>' + (a.since_us ? ' since ' + fmtTime(a.since_us) : '') +
                   (a.reason ? ': ' + esc(a.reason) : '') + '</li>');
    });
    $('alert-list').innerHTML = items.join('');
    $('alerts').hidden = !items.length;
  }

  function renderPools(d) {
    var last = samples[samples.length - 1], from = windowStart();
    var rows = (d.pools || []).map(function (p) {
      var k = poolKey(p);
      var w = last ? between(from, last, k, d.uptime_s) : null;
      var q = p.queued_by_priority || {};
      var req = p.requests || {};
      var ok = req.OK || 0, failed = sum(req) - ok;
      var bs = p.batch_sizes || {};
      var n = (p.sessions || []).length;
      var sla = '–';
      if (p.sla) {
        var lvl = p.sla.alert && p.sla.alert.level ? p.sla.alert.level : 'none';
        sla = (p.sla.compliance != null ? (100 * p.sla.compliance).toFixed(1) + '% ' : '') +
              (lvl !== 'none' ? badge(lvl) : badge('ok'));
      }
      var title = p.error ? ' title="' + esc(p.error) + '"' : '';
      return '<tr id="pool-' + esc(k) + '" data-pool="' + esc(k) + '" data-state="' +
             esc(p.state) + '">' +
             '<td>' + esc(k) + (p.priority ? ' <small>(' + esc(p.priority) + ')</small>' : '') +
             '</td><td class="detail"' + title + '>' + badge(p.state) +
             (p.error ? ' <small class="error">' + esc(p.error) + '</small>' : '') + '</td>' +
             '<td class="num">' + (p.active_sessions != null ? p.active_sessions : 0) + ' / ' + n +
             '</td><td class="num">' + [q.high, q.medium, q.low, q.delayed].map(function (v) {
               return v || 0;
             }).join(' / ') + '</td>' +
             '<td class="num">' + fmt(w && w.p50) + '</td><td class="num">' + fmt(w && w.p99) +
             '</td><td class="num">' + fmt(w && w.rps, 1) + '</td>' +
             '<td class="num">' + ok + '</td><td class="num">' + failed + '</td>' +
             '<td class="num">' + (bs.count ? fmt(bs.sum / bs.count) : '–') + '</td>' +
             '<td class="num" data-memory="' + (p.memory_bytes != null ? p.memory_bytes : '') +
             '" title="per session ' + mib(p.session_memory_bytes) + ' MiB">' + mib(p.memory_bytes) +
             '</td>' +
             '<td>' + sla + '</td></tr>';
    });
    $('pools').tBodies[0].innerHTML =
        rows.join('') || '<tr><td colspan="12" class="empty">no pools</td></tr>';
  }

  function renderPipelines(d) {
    var rows = (d.pipelines || []).map(function (p) {
      var stages = (p.stages || []).map(function (s) {
        return esc(s.name) + (s.pool ? ' (' + esc(s.pool) + ')' : s.operation ? ' [' + esc(s.operation) + ']' : '') +
               (s.ran != null ? ' <small>' + s.ran + ' ran</small>' : '');
      }).join(' → ');
      var req = p.requests || {}, ok = req.OK || 0, lat = p.latency_us || {};
      return '<tr data-pipeline="' + esc(p.name) + '" data-state="' + esc(p.state) + '"><td>' +
             esc(p.name) + '</td><td class="detail">' + badge(p.state || '?') +
             (p.error ? ' <small class="error">' + esc(p.error) + '</small>' : '') + '</td><td>' +
             stages + '</td><td class="num">' + ok + '</td><td class="num">' + (sum(req) - ok) +
             '</td><td class="num">' + (ok && lat.ok != null ? fmt(lat.ok / ok / 1000) : '–') +
             '</td></tr>';
    });
    $('pipelines').tBodies[0].innerHTML = rows.join('');
    $('pipelines-section').hidden = !rows.length;
  }

  function renderRepository(d) {
    var rows = (d.repository || []).filter(function (m) {
      return m.source === 'repository';
    }).map(function (m) {
      return '<tr data-model="' + esc(m.name) + '" data-state="' + esc(m.state) + '"><td>' +
             esc(m.name) + '</td><td>' + esc(m.version || '') + '</td><td>' + badge(m.state) +
             '</td><td class="detail">' + esc(m.reason || '') + '</td></tr>';
    });
    $('repository').tBodies[0].innerHTML = rows.join('');
    $('repository-section').hidden = !rows.length;
  }

  function renderSessions(d) {
    var html = (d.pools || []).map(function (p) {
      var chips = (p.sessions || []).map(function (x) {
        var shown = x.drained ? x.state + ' · drained' : x.state;
        var since = x.since_us ? ' title="since ' + esc(fmtTime(x.since_us)) + '"' : '';
        return '<span class="session badge s-' + esc(x.drained ? 'drained' : x.state) +
               '" data-session="' + esc(x.id) + '" data-state="' + esc(x.state) +
               '" data-drained="' + (x.drained ? 'true' : 'false') + '"' + since + '>' +
               esc(x.id) + ' ' + esc(shown) + '</span>';
      }).join('');
      return '<div class="sessions-pool"><b>' + esc(poolKey(p)) + '</b>' +
             (chips || '<span class="empty">no sessions</span>') + '</div>';
    }).join('');
    $('sessions').innerHTML = html || '<span class="empty">no pools</span>';
  }

  function eventDetail(e) {
    switch (e.event) {
      case 'STATE_CHANGE': return e.old_state + ' → ' + e.new_state + (e.reason ? ' (' + e.reason + ')' : '');
      case 'ERROR': return (e.code || '') + (e.message ? ': ' + e.message : '');
      case 'ALERT': return (e.level || '') + ' ' + (e.state || '') + (e.reason ? ': ' + e.reason : '');
      default: return e.message || e.reason || '';
    }
  }

  function renderEvents() {
    var rows = [];
    for (var i = events.length - 1; i >= 0; i--) {
      var e = events[i];
      rows.push('<tr data-event="' + esc(e.event) + '"><td>' + esc(fmtTime(e.time_us)) +
                '</td><td>' + esc(e.event) + '</td><td>' + esc(e.pool) + '</td><td>' +
                esc(e.session) + '</td><td class="detail">' + esc(eventDetail(e)) + '</td></tr>');
    }
    $('events').tBodies[0].innerHTML =
        rows.join('') || '<tr><td colspan="5" class="empty">no events yet</td></tr>';
    $('footer').textContent = samples.length + ' samples · ' + events.length + ' events';
  }

  /* ---- charts (uPlot) ------------------------------------------------------ */

  var PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
                 '#17becf', '#7f7f7f', '#bcbd22'];

  function chartWidth(el) {
    return Math.max(300, (el.parentNode.clientWidth || 460) - 8);
  }

  /* Creates chart `id`, or updates it; made again when its series change. */
  function plot(id, names, data, opts) {
    var el = $(id);
    var sig = names.join('\u0001');
    var c = charts[id];
    if (c && c.sig === sig) {
      c.u.setData(data);
      return;
    }
    if (c) c.u.destroy();
    el.innerHTML = '';
    var series = [{}].concat(names.map(function (n, i) {
      var s = {label: n, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: false};
      if (opts && opts.bars) {
        s.fill = PALETTE[i % PALETTE.length] + '99';
        s.paths = uPlot.paths.bars({size: [0.6, 60]});
        s.points = {show: false};
      }
      if (opts && opts.dash && opts.dash[i]) s.dash = [6, 4];
      if (opts && opts.stepped) s.paths = uPlot.paths.stepped({align: 1});
      return s;
    }));
    var o = {width: chartWidth(el), height: 200, series: series,
             scales: {x: {time: !(opts && opts.bars)}}, legend: {live: false}};
    if (opts && (opts.xvalues || opts.yvalues))
      o.axes = [opts.xvalues ? {values: opts.xvalues} : {},
                opts.yvalues ? {values: opts.yvalues, size: 90, incrs: [1], space: 12} : {}];
    if (opts && opts.yrange) o.scales.y = {range: opts.yrange};
    charts[id] = {sig: sig, u: new uPlot(o, data, el)};
  }

  /* A time chart with fewer than two samples: a line saying so instead. */
  function noHistory(id) {
    if (charts[id]) {
      charts[id].u.destroy();
      delete charts[id];
    }
    $(id).innerHTML = '<p class="empty">' + (document.getElementById('sip-snapshot')
        ? 'no history in this report: the page records it while open (Export keeps it)'
        : 'waiting for a second sample') + '</p>';
  }

  function renderCharts(d) {
    var keys = (d.pools || []).map(poolKey);
    var timeCharts = ['chart-throughput', 'chart-latency', 'chart-queue', 'chart-sessions',
                      'chart-timeline', 'chart-sla'];
    var xs = [], rps = keys.map(function () { return []; });
    var p50 = keys.map(function () { return []; }), p99 = keys.map(function () { return []; });
    var prios = ['high', 'medium', 'low', 'delayed'], queue = prios.map(function () { return []; });
    var stateNames = {};
    samples.forEach(function (s) {
      keys.forEach(function (k) {
        var st = s.pools[k] && s.pools[k].states;
        for (var n in st) stateNames[n] = 1;
      });
    });
    var stateList = Object.keys(stateNames).sort();
    var states = stateList.map(function () { return []; });
    var slaKeys = keys.filter(function (k) {
      return samples.some(function (s) { return s.pools[k] && s.pools[k].compliance != null; });
    });
    var sla = slaKeys.map(function () { return []; });
    for (var i = 1; i < samples.length; i++) {
      var a = samples[i - 1], b = samples[i];
      xs.push(b.t);
      keys.forEach(function (k, j) {
        var w = a.pools[k] ? between(a, b, k, 0) : null;
        rps[j].push(w ? w.rps : null);
        p50[j].push(w ? w.p50 : null);
        p99[j].push(w ? w.p99 : null);
      });
      prios.forEach(function (pr, j) {
        var n = 0;
        keys.forEach(function (k) { n += b.pools[k] ? b.pools[k].queued[pr] || 0 : 0; });
        queue[j].push(n);
      });
      stateList.forEach(function (st, j) {
        var n = 0;
        keys.forEach(function (k) { n += b.pools[k] ? b.pools[k].states[st] || 0 : 0; });
        states[j].push(n);
      });
      slaKeys.forEach(function (k, j) {
        var c = b.pools[k] && b.pools[k].compliance;
        sla[j].push(c == null ? null : 100 * c);
      });
    }
    $('sla-chart-box').hidden = !slaKeys.length && !(d.pools || []).some(function (p) { return p.sla; });
    renderBatches(d);
    if (samples.length < 2) {
      timeCharts.forEach(noHistory);
      return;
    }
    plot('chart-throughput', keys, [xs].concat(rps));
    var latNames = [], latData = [xs], dash = [];
    keys.forEach(function (k, j) {
      latNames.push(k + ' p50', k + ' p99');
      latData.push(p50[j], p99[j]);
      dash.push(false, true);
    });
    plot('chart-latency', latNames, latData, {dash: dash});
    plot('chart-queue', prios, [xs].concat(queue));
    plot('chart-sessions', stateList, [xs].concat(states));
    renderTimeline();
    if (slaKeys.length) plot('chart-sla', slaKeys.map(function (k) { return k + ' %'; }), [xs].concat(sla));
  }

  /* Batch sizes: executions per bucket over all pools, since the start. */
  function renderBatches(d) {
    var labels = [], counts = [];
    (d.pools || []).forEach(function (p) {
      var prev = 0;
      var bs = (p.batch_sizes || {}).buckets || [];
      bs.forEach(function (bk, i) {
        labels[i] = bk[0] === '+Inf' ? '>' + (i ? bs[i - 1][0] : 0) : '≤' + bk[0];
        counts[i] = (counts[i] || 0) + bk[1] - prev;
        prev = bk[1];
      });
    });
    plot('chart-batch', ['executions'], [labels.map(function (_, i) { return i; }), counts],
         {bars: true, xvalues: function (u, vals) {
           return vals.map(function (v) { return labels[v] != null && v === Math.round(v) ? labels[v] : ''; });
         }});
  }

  /* Each session's state at each sample, one stepped line per session (at
   * most MAX_TIMELINE), on a categorical axis of the states. */
  var TIMELINE_STATES = ['DESTROYED', 'FAILED', 'INIT', 'SUSPENDED', 'DRAINED', 'READY', 'RUNNING'];
  var MAX_TIMELINE = 16;

  function renderTimeline() {
    var ids = {};
    samples.forEach(function (s) {
      for (var id in s.sessions || {}) ids[id] = 1;
    });
    var list = Object.keys(ids).sort().slice(0, MAX_TIMELINE);
    var xs = samples.map(function (s) { return s.t; });
    var ys = list.map(function (id, j) {
      /* Sessions in one state would hide each other: each is drawn a little apart. */
      var off = (j % 8) * 0.07 - 0.25;
      return samples.map(function (s) {
        var st = (s.sessions || {})[id];
        var i = TIMELINE_STATES.indexOf(st);
        return st == null ? null : (i < 0 ? TIMELINE_STATES.length : i) + off;
      });
    });
    plot('chart-timeline', list, [xs].concat(ys), {
      stepped: true,
      yvalues: function (u, vals) {
        return vals.map(function (v) {
          return v === Math.round(v) ? TIMELINE_STATES[v] || (v === TIMELINE_STATES.length ? 'other' : '') : '';
        });
      },
      yrange: [-1, TIMELINE_STATES.length + 1]
    });
  }

  function renderAll(live) {
    if (!cur) return;
    renderHeader(cur, live);
    renderAlerts(cur);
    renderPools(cur);
    renderPipelines(cur);
    renderRepository(cur);
    renderSessions(cur);
    renderEvents();
    renderCharts(cur);
    renderProfilePools(cur);
  }

  /* ---- live ------------------------------------------------------------------ */

  function addSample(d) {
    cur = d;
    samples.push(sampleOf(d));
    if (samples.length > MAX_SAMPLES) samples.shift();
  }

  /* Reads the data after `ms` unless a read comes sooner; one at a time. */
  function scheduleRefresh(ms) {
    var at = Date.now() + ms;
    if (refreshTimer && refreshAt <= at) return;
    if (refreshTimer) clearTimeout(refreshTimer);
    refreshAt = at;
    refreshTimer = setTimeout(refresh, ms);
  }

  function refresh() {
    refreshTimer = null;
    if (fetching) return;  /* the read in flight schedules the next */
    fetching = true;
    fetch('/v2/dashboard/data', {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (d) {
      dataError = null;
      addSample(d);
      renderAll(true);
    }).catch(function (err) {
      dataError = err.message;
      renderLink(cur, true);
    }).then(function () {
      fetching = false;
      scheduleRefresh(POLL_MS);
    });
  }

  /* Events are shown in batches (a burst costs one render) and bring a read
   * of the data soon after. */
  function flushEvents() {
    flushTimer = null;
    var batch = pending;
    pending = [];
    batch.forEach(function (e) {
      events.push(e);
      if (e.event === 'STATE_CHANGE' && cur) {
        /* Shown now; the next read brings the counters. */
        (cur.pools || []).forEach(function (p) {
          (p.sessions || []).forEach(function (x) {
            if (x.id === e.session) {
              x.state = e.new_state;
              x.since_us = e.time_us;
            }
          });
        });
      }
    });
    if (events.length > MAX_EVENTS) events.splice(0, events.length - MAX_EVENTS);
    if (cur) renderSessions(cur);
    renderEvents();
    scheduleRefresh(100);
  }

  function onEvent(e) {
    pending.push(e);
    if (pending.length > MAX_EVENTS) pending.shift();
    if (!flushTimer) flushTimer = setTimeout(flushEvents, FLUSH_MS);
  }

  function connect() {
    var es = new EventSource('/v2/events?exclude=INFERENCE_COMPLETE&executions=0');
    es.onopen = function () {
      streamOpen = true;
      renderLink(cur, true);
    };
    es.onerror = function () {
      /* The browser reconnects by itself; states may have changed meanwhile. */
      streamOpen = false;
      renderLink(cur, true);
      scheduleRefresh(0);
    };
    var handle = function (m) {
      try {
        onEvent(JSON.parse(m.data));
      } catch (err) {
        /* not an event of ours: ignored */
      }
    };
    es.onmessage = handle;
    EVENT_TYPES.forEach(function (t) { es.addEventListener(t, handle); });
  }

  /* ---- operator profile (sip profile, docs/profiling.md) ------------------- */

  var HEAT_BUCKETS = 24, HEAT_OPS = 12;

  /* Pools a profile can run on: the READY ones, kept selected across redraws. */
  function renderProfilePools(d) {
    var sel = $('profile-pool');
    if (!sel) return;
    var names = (d.pools || []).filter(function (p) { return p.state === 'READY'; })
      .map(function (p) { return p.name; });
    var was = sel.value;
    var html = names.map(function (n) {
      return '<option value="' + esc(n) + '">' + esc(n) + '</option>';
    }).join('');
    if (sel.getAttribute('data-names') !== names.join('\u0001')) {
      sel.innerHTML = html;
      sel.setAttribute('data-names', names.join('\u0001'));
      if (names.indexOf(was) >= 0) sel.value = was;
    }
  }

  /* The operators' table and an operator x time heatmap of the trace: each
   * cell is the time that operator's kernels took in that slice of the run,
   * darker for more (the cell's title gives the figure). */
  function renderProfile(p) {
    var ops = (p.operators || []).slice(0, HEAT_OPS);
    var kernels = (p.trace || []).filter(function (e) {
      return e.cat === 'Node' && /_kernel_time$/.test(e.name) && e.dur != null;
    });
    var t0 = Infinity, t1 = -Infinity;
    kernels.forEach(function (e) { t0 = Math.min(t0, e.ts); t1 = Math.max(t1, e.ts + e.dur); });
    var span = t1 > t0 ? t1 - t0 : 1, grid = {}, max = 0;
    kernels.forEach(function (e) {
      var op = (e.args && e.args.op_name) || '?';
      var b = Math.min(HEAT_BUCKETS - 1, Math.floor((e.ts - t0) / span * HEAT_BUCKETS));
      var row = grid[op] || (grid[op] = []);
      row[b] = (row[b] || 0) + e.dur;
      if (row[b] > max) max = row[b];
    });
    var head = '<p>' + esc(p.pool) + ' session ' + esc(p.session) + ': ' + esc(p.executions) +
        ' executions in ' + fmt(p.seconds, 1) + ' s</p>';
    var table = '<table id="profile-ops"><thead><tr><th>operator</th><th class="num">count</th>' +
        '<th class="num">total ms</th><th class="num">mean us</th><th class="num">p99 us</th>' +
        '<th class="num">share</th></tr></thead><tbody>' + ops.map(function (o) {
          return '<tr data-op="' + esc(o.op) + '"><td>' + esc(o.op) + '</td><td class="num">' +
              esc(o.count) + '</td><td class="num">' + fmt(o.total_us / 1000, 3) +
              '</td><td class="num">' + fmt(o.mean_us, 1) + '</td><td class="num">' +
              fmt(o.p99_us, 1) + '</td><td class="num">' + fmt(100 * o.share, 1) + '%</td></tr>';
        }).join('') + '</tbody></table>';
    var heat = '';
    if (kernels.length) {
      heat = '<h3>Operator \u00d7 time (' + fmt(span / 1000, 1) + ' ms of kernels in ' +
          HEAT_BUCKETS + ' slices)</h3><table class="heatmap" id="profile-heatmap"><tbody>' +
          ops.map(function (o) {
            var row = grid[o.op] || [];
            var cells = '';
            for (var b = 0; b < HEAT_BUCKETS; b++) {
              var v = row[b] || 0, a = max ? v / max : 0;
              cells += '<td class="cell" style="background: rgba(13, 63, 122, ' + a.toFixed(3) +
                  ')" title="' + esc(o.op) + ': ' + fmt(v / 1000, 3) + ' ms"></td>';
            }
            return '<tr data-op="' + esc(o.op) + '"><th>' + esc(o.op) + '</th>' + cells + '</tr>';
          }).join('') + '</tbody></table>';
    }
    $('profile-result').innerHTML = head + table + heat;
  }

  function runProfile() {
    var pool = $('profile-pool').value, secs = parseFloat($('profile-seconds').value) || 2;
    if (!pool) return;
    $('profile-run').disabled = true;
    $('profile-status').textContent = 'profiling ' + pool + ' for ' + secs + ' s\u2026';
    fetch('/v2/admin', {method: 'POST', headers: {'Content-Type': 'application/json'},
                        body: JSON.stringify({action: 'profile', pool: pool, seconds: secs})})
      .then(function (r) {
        return r.json().then(function (j) {
          if (!r.ok) throw new Error(j.error || ('HTTP ' + r.status));
          return j;
        });
      }).then(function (j) {
        $('profile-status').textContent = '';
        renderProfile(j);
      }).catch(function (err) {
        $('profile-status').textContent = 'profile failed: ' + err.message;
      }).then(function () { $('profile-run').disabled = false; });
  }

  /* ---- export -------------------------------------------------------------- */

  function exportReport() {
    fetch('/v2/dashboard/report', {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.text();
    }).then(function (html) {
      var hist = JSON.stringify({samples: samples, events: events}).replace(/</g, '\\u003c');
      html = html.replace(HISTORY_EMPTY, function () {
        return '<script type="application/json" id="sip-history">' + hist + '</scr' + 'ipt>';
      });
      var a = document.createElement('a');
      a.href = URL.createObjectURL(new Blob([html], {type: 'text/html'}));
      a.download = 'sip-report-' + new Date().toISOString().replace(/[:.]/g, '-') + '.html';
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(function () { URL.revokeObjectURL(a.href); }, 10000);
    }).catch(function (err) {
      $('link').textContent = 'export failed: ' + err.message;
    });
  }

  window.addEventListener('resize', function () {
    for (var id in charts) charts[id].u.setSize({width: chartWidth($(id)), height: 200});
  });

  var snap = $('sip-snapshot');
  if (snap) {
    /* A report: what it holds, nothing fetched. */
    var hist = null;
    try { hist = JSON.parse(($('sip-history') || {}).textContent || 'null'); } catch (err) { hist = null; }
    var d = JSON.parse(snap.textContent);
    if (hist && hist.samples) samples = hist.samples.slice(-MAX_SAMPLES);
    if (hist && hist.events) events = hist.events.slice(-MAX_EVENTS);
    cur = d;
    /* The snapshot is the last sample unless the history already ends there. */
    var s = sampleOf(d);
    if (!samples.length || samples[samples.length - 1].t < s.t) samples.push(s);
    $('export').hidden = true;
    $('profile-section').hidden = true;
    renderAll(false);
  } else {
    $('export').addEventListener('click', exportReport);
    $('profile-run').addEventListener('click', runProfile);
    connect();
    scheduleRefresh(0);
  }
})();
