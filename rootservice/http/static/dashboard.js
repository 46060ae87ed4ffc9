// The RootService dashboard: polls GET /api/v1/cluster (the status API of
// the RS, shapes in the module docstring of rootservice/http) every second and redraws the
// page in place, without a reload. Every value from the API reaches the page through
// textContent or setAttribute, never innerHTML, so a server or event value cannot inject
// markup. Stable hooks for tests and scripts: <tr data-server="ip:port"> per server, its
// status cell <td class="status" data-status="ACTIVE|INACTIVE|DELETING"> (with a badge and an
// attribute per state: SUSPECT data-suspect-until="<microseconds>", LAGGING
// data-lagging-since="<microseconds>", DRAINING data-draining="true", MAINTENANCE
// data-maintenance-until="<microseconds>"), <tr data-job-id>
// per job, and on <body> data-polls (successful polls so far), data-connection
// ("connecting" | "ok" | "lost") and data-now-us (now_us of the last snapshot drawn).
"use strict";

(function () {
  // Resolved against the origin, not the document's URL: a page opened as
  // https://user:pw@host/ would otherwise pass the credentials on to the fetch() URL, which
  // fetch refuses ("Request cannot be constructed from a URL that includes credentials").
  // The browser's HTTP authentication cache supplies them instead.
  const API = new URL("/api/v1/cluster", window.location.origin).href;
  const POLL_MS = 1000;
  // A poll that hangs must not hold the next one back for long: the page must notice a lost
  // RS within about two polls.
  const TIMEOUT_MS = 3000;

  let polls = 0;
  let lostSinceMs = null; // wall-clock ms of the first failed poll of the current outage
  let lastError = "";

  // ------------------------------------------------------------------ formatting helpers

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined) continue;
        if (k === "text") node.textContent = String(v);
        else if (k === "className") node.className = v;
        else node.setAttribute(k, String(v));
      }
    }
    for (const c of children || []) {
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function pad(n, w) {
    return String(n).padStart(w || 2, "0");
  }

  // Microseconds since the epoch -> "2026-11-26 03:30:48" in the browser's time zone;
  // "—" for 0 / missing (the API's "never").
  function fmtTime(us) {
    if (!us) return "—";
    const d = new Date(us / 1000);
    return (
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
    );
  }

  // A duration in microseconds -> "350 ms", "1.2 s", "3 min 5 s", "2 h 10 min", "3 d 4 h".
  function fmtAge(us) {
    if (us === null || us === undefined) return "—";
    const neg = us < 0;
    let s = Math.abs(us) / 1e6;
    let out;
    if (s < 1) out = `${Math.round(s * 1000)} ms`;
    else if (s < 60) out = `${s.toFixed(1)} s`;
    else if (s < 3600) out = `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
    else if (s < 86400) out = `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    else out = `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
    return neg ? `-${out}` : out;
  }

  // Bytes -> binary units ("1.5 GiB"), as OceanBase's own views print memory and disk.
  function fmtBytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = Number(n);
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
  }

  function fmtCpu(v) {
    const n = Number(v || 0);
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  // "used / capacity" with a thin bar under it; the bar turns amber at 80 %, red at 95 %.
  function usage(used, capacity, fmt) {
    const pct = capacity > 0 ? Math.min(100, (100 * used) / capacity) : 0;
    const bar = el("div", { className: "meter" }, [
      el("div", {
        className: pct >= 95 ? "fill crit" : pct >= 80 ? "fill warn" : "fill",
        style: `width: ${pct.toFixed(1)}%`,
      }),
    ]);
    return el("td", { className: "usage", title: `${pct.toFixed(1)} %` }, [
      el("span", { text: `${fmt(used)} / ${fmt(capacity)}` }),
      bar,
    ]);
  }

  function badge(value, kind) {
    const v = value || "";
    return el("span", { className: `badge ${kind}-${v.toLowerCase() || "none"}`, text: v || "—" });
  }

  // ------------------------------------------------------------------ the header

  function drawHeader(snap) {
    const rs = snap.root_services || {};
    const members = rs.members || [];
    document.getElementById("rs-self").textContent = snap.self || "—";
    const state = document.getElementById("rs-state");
    state.replaceChildren(badge(snap.state, "state"));
    state.setAttribute("data-state", snap.state || "");
    document.getElementById("rs-leader").textContent = rs.leader || "none";
    document.getElementById("rs-epoch").textContent = rs.epoch === undefined ? "—" : rs.epoch;
    const lease = document.getElementById("rs-lease");
    if (rs.lease_expire_us) {
      const left = rs.lease_expire_us - snap.now_us;
      lease.textContent = `${fmtTime(rs.lease_expire_us)} (${left >= 0 ? "in " + fmtAge(left) : fmtAge(-left) + " ago"})`;
    } else {
      lease.textContent = "—";
    }
    const standbys = members.filter((m) => m.role !== "leader");
    const sb = document.getElementById("rs-standbys");
    if (standbys.length === 0) {
      sb.textContent = "none";
    } else {
      sb.replaceChildren(
        ...standbys.map((m) =>
          el("span", {
            className: "standby",
            "data-rs": m.addr,
            text: `${m.addr} (seen ${fmtAge(snap.now_us - m.last_seen_us)} ago)`,
          })
        )
      );
    }
  }

  // ------------------------------------------------------------------ servers by zone

  function serverRow(s) {
    const r = s.resources || {};
    const status = s.status || "";
    return el("tr", { "data-server": s.server, "data-zone": s.zone }, [
      el("td", { className: "mono", text: s.server, title: `id ${s.id}` }),
      stateCell(s, status),
      el("td", { className: "heartbeat", "data-heartbeat": s.heartbeat_status }, [
        badge(s.heartbeat_status, "hb"),
      ]),
      el("td", { className: "num age", text: fmtAge(s.last_heartbeat_age_us) }),
      usage(Number(r.cpu_assigned || 0), Number(r.cpu_capacity || 0), fmtCpu),
      usage(r.mem_assigned || 0, r.mem_capacity || 0, fmtBytes),
      usage(r.log_disk_assigned || 0, r.log_disk_capacity || 0, fmtBytes),
      usage(r.data_disk_in_use || 0, r.data_disk_capacity || 0, fmtBytes),
      el("td", { className: "num leaders", text: s.leader_count }),
      el("td", { className: "num", text: s.replica_count }),
      el("td", { className: "stop", text: fmtTime(s.stop_time_us) }),
    ]);
  }

  // The states beside the status, which stays ACTIVE: SUSPECT (back
  // after its lease expired; no new leaders and no copies until suspect_end_time_us), LAGGING
  // (heartbeats while its commands or disk do not move; since lagging_time_us, for
  // lag_reasons), DRAINING (a DRAIN SERVER runs on it) and MAINTENANCE (a
  // STOP ... FOR MAINTENANCE window until maintenance_end_time_us). Each is a badge whose
  // title says what it means, and a data- attribute of the cell.
  function stateCell(s, status) {
    const attrs = { className: "status", "data-status": status };
    const parts = [badge(status, "status")];
    function add(name, attr, value, title) {
      attrs[attr] = String(value);
      const b = badge(name, "status");
      b.title = title;
      parts.push(" ", b);
    }
    if (s.suspect) {
      add("SUSPECT", "data-suspect-until", s.suspect_end_time_us,
        `no new leaders and no copies until ${fmtTime(s.suspect_end_time_us)}`);
    }
    if (s.lagging) {
      const why = (s.lag_reasons || []).join(", ") || "unknown";
      add("LAGGING", "data-lagging-since", s.lagging_time_us,
        `LAGGING (${why}) since ${fmtTime(s.lagging_time_us)}: no new leaders, no copies, ` +
          "leaders moved off");
    }
    if (s.draining) {
      add("DRAINING", "data-draining", "true", "a DRAIN SERVER moves its leaders and copies off");
    }
    if (s.maintenance_end_time_us) {
      add("MAINTENANCE", "data-maintenance-until", s.maintenance_end_time_us,
        `stopped for maintenance until ${fmtTime(s.maintenance_end_time_us)}`);
    }
    return el("td", attrs, parts);
  }

  function drawServers(snap) {
    const table = document.getElementById("servers");
    const servers = (snap.servers || []).slice();
    const zones = new Map();
    for (const z of snap.zones || []) zones.set(z.zone, { info: z, servers: [] });
    for (const s of servers) {
      if (!zones.has(s.zone)) zones.set(s.zone, { info: { zone: s.zone }, servers: [] });
      zones.get(s.zone).servers.push(s);
    }
    const names = [...zones.keys()].sort();
    const bodies = names.map((name) => {
      const { info, servers: list } = zones.get(name);
      list.sort((a, b) => (a.svr_ip + a.svr_port).localeCompare(b.svr_ip + b.svr_port, undefined, { numeric: true }));
      const where = [info.region && `region ${info.region}`, info.idc && `idc ${info.idc}`]
        .filter(Boolean)
        .join(", ");
      const active = list.filter((s) => s.status === "ACTIVE").length;
      const head = el("tr", { className: "zone-head" }, [
        el("th", { colspan: 11 }, [
          el("span", { className: "zone-name", text: `Zone ${name}` }),
          " ",
          badge(info.status, "zone"),
          el("span", { className: "zone-meta", text: `${where ? where + " · " : ""}${active}/${list.length} servers active` }),
        ]),
      ]);
      const rows = list.length
        ? list.map(serverRow)
        : [el("tr", { className: "empty" }, [el("td", { colspan: 11, text: "no servers" })])];
      return el("tbody", { className: "zone", "data-zone": name }, [head, ...rows]);
    });
    for (const old of table.querySelectorAll("tbody")) old.remove();
    if (bodies.length === 0) {
      bodies.push(el("tbody", { className: "zone" }, [el("tr", { className: "empty" }, [el("td", { colspan: 11, text: "no servers yet" })])]));
    }
    table.append(...bodies);
    const counts = {};
    for (const s of servers) counts[s.status] = (counts[s.status] || 0) + 1;
    document.getElementById("servers-summary").textContent = servers.length
      ? Object.keys(counts).sort().map((k) => `${counts[k]} ${k}`).join(" · ")
      : "";
  }

  // ------------------------------------------------------------------ jobs and events

  function drawJobs(snap) {
    const jobs = snap.jobs || [];
    const rows = jobs.map((j) => {
      const pct = Math.max(0, Math.min(100, Number(j.progress || 0)));
      return el("tr", { "data-job-id": j.job_id, "data-job-status": j.job_status }, [
        el("td", { className: "num", text: j.job_id }),
        el("td", { text: j.job_type }),
        el("td", { className: "job-status" }, [badge(j.job_status, "job")]),
        el("td", { className: "mono", text: j.server || "—" }),
        el("td", { className: "progress" }, [
          el("progress", { max: 100, value: pct }),
          el("span", { className: "pct", text: `${pct} %` }),
        ]),
        el("td", { className: "eta", text: j.eta || "—" }),
        el("td", { className: j.stalled ? "stalled warn-text" : "stalled", text: j.stalled || "—" }),
        el("td", { text: fmtTime(j.create_time_us) }),
        el("td", { text: fmtTime(j.modify_time_us) }),
      ]);
    });
    if (rows.length === 0) rows.push(el("tr", { className: "empty" }, [el("td", { colspan: 9, text: "no jobs" })]));
    document.getElementById("jobs-body").replaceChildren(...rows);
  }

  // One "name=value" of an event. Event values are strings (value1..value6 of
  // __all_rootservice_event_history); a "*_time" one holding microseconds since the epoch
  // (e.g. lease_expire's last_hb_time) is shown as a time, the raw number in its tooltip.
  function eventValue(k, v) {
    const isTime = /_time$/.test(k) && /^[0-9]{15,17}$/.test(v);
    return el("span", { className: "kv", title: isTime ? v : null }, [
      el("b", { text: k }),
      "=",
      isTime ? fmtTime(Number(v)) : v,
    ]);
  }

  function drawEvents(snap) {
    const events = snap.events || [];
    const rows = events.map((e) =>
      el("tr", { "data-event": e.event }, [
        el("td", { className: "nowrap", text: fmtTime(e.event_time_us) }),
        el("td", { text: e.module }),
        el("td", { text: e.event }),
        el(
          "td",
          { className: "values" },
          Object.entries(e.values || {}).map(([k, v]) => eventValue(k, String(v)))
        ),
        el("td", { className: "mono", text: e.rs || "" }),
      ])
    );
    if (rows.length === 0) rows.push(el("tr", { className: "empty" }, [el("td", { colspan: 5, text: "no events" })]));
    document.getElementById("events-body").replaceChildren(...rows);
  }

  // ------------------------------------------------------------------ polling

  function setConnection(ok, detail) {
    const banner = document.getElementById("connection");
    if (ok) {
      lostSinceMs = null;
      banner.hidden = true;
      banner.textContent = "";
      document.body.setAttribute("data-connection", "ok");
      return;
    }
    if (lostSinceMs === null) lostSinceMs = Date.now();
    lastError = detail;
    banner.hidden = false;
    banner.textContent = `connection lost since ${fmtTime(lostSinceMs * 1000)} (${fmtAge((Date.now() - lostSinceMs) * 1000)}): ${lastError}`;
    document.body.setAttribute("data-connection", "lost");
  }

  async function pollOnce() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const resp = await fetch(API, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
        signal: ctl.signal,
      });
      if (!resp.ok) {
        let msg = `HTTP ${resp.status}`;
        try {
          const body = await resp.json();
          if (body && body.error) msg += ` ${body.error}`;
          // A standby answers 503 with the leader's gRPC address: say where to look.
          if (body && body.leader) msg += ` (leader: ${body.leader})`;
        } catch (_) {
          // Not JSON (a proxy's error page): the status alone says enough.
        }
        throw new Error(msg);
      }
      const snap = await resp.json();
      drawHeader(snap);
      drawServers(snap);
      drawJobs(snap);
      drawEvents(snap);
      polls += 1;
      document.body.setAttribute("data-polls", String(polls));
      document.body.setAttribute("data-now-us", String(snap.now_us));
      document.getElementById("updated").textContent = `updated ${fmtTime(snap.now_us)} · every ${POLL_MS / 1000} s`;
      setConnection(true, "");
    } catch (err) {
      setConnection(false, err.name === "AbortError" ? "timed out" : String(err.message || err));
    } finally {
      clearTimeout(timer);
      // A chain of timeouts rather than setInterval: polls never overlap on a slow RS.
      setTimeout(pollOnce, POLL_MS);
    }
  }

  pollOnce();
})();
