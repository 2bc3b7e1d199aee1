// agl dashboard: one page, routed by the URL's hash, reading the store's HTTP API (/v1/...)
// and the dashboard's views (/v1/views/...). Read-only: it only ever sends GET requests.
// Every value from the store is put on the page as text (never as HTML).

const main = document.getElementById("main");
const PAGE = 50;
const STATUSES = ["queuing", "preparing", "running", "succeeded", "failed", "cancelled", "requeuing"];
let refresh = null; // the current page's live refresh, when it has one

// --- plumbing ---------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function token() {
  return sessionStorage.getItem("agl-token");
}

let asking = null; // one question for every request refused meanwhile

function askToken() {
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  asking = new Promise((resolve) => {
    document.getElementById("token-form").onsubmit = () => {
      sessionStorage.setItem("agl-token", input.value);
      input.value = "";
      asking = null;
      resolve();
    };
    if (!dialog.open) dialog.showModal();
  });
  return asking;
}

async function api(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    for (const one of [value].flat()) {
      if (one !== undefined && one !== null && one !== "") query.append(key, one);
    }
  }
  const url = query.toString() ? `${path}?${query}` : path;
  for (;;) {
    const headers = { Accept: "application/json" };
    if (token()) headers.Authorization = `Bearer ${token()}`;
    const response = await fetch(url, { headers });
    if (response.status === 401) {
      sessionStorage.removeItem("agl-token");
      await askToken();
      continue;
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const message = body && body.error ? body.error.message : response.statusText;
      throw new HttpError(response.status, message);
    }
    return body;
  }
}

function seg(text) {
  return encodeURIComponent(text);
}

function when(seconds) {
  if (seconds === null || seconds === undefined) return "";
  return new Date(seconds * 1000).toLocaleString();
}

function ago(seconds) {
  if (!seconds) return "never";
  const delta = Date.now() / 1000 - seconds;
  if (delta < 60) return `${delta.toFixed(0)} s ago`;
  if (delta < 3600) return `${(delta / 60).toFixed(0)} min ago`;
  if (delta < 86400) return `${(delta / 3600).toFixed(1)} h ago`;
  return `${(delta / 86400).toFixed(1)} days ago`;
}

function duration(start, end) {
  if (!start) return "";
  const seconds = (end || Date.now() / 1000) - start;
  return seconds < 1 ? `${(seconds * 1000).toFixed(0)} ms` : `${seconds.toFixed(2)} s`;
}

function num(value, digits = 3) {
  return typeof value === "number" ? Number(value.toFixed(digits)).toString() : value ?? "";
}

function badge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

function table(headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", {}, name)))),
    h("tbody", {}, rows),
  );
}

function hashParams() {
  const [path, query] = location.hash.slice(1).split("?");
  return { path: path || "/", params: new URLSearchParams(query || "") };
}

function go(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") query.set(key, value);
  }
  location.hash = query.toString() ? `${path}?${query}` : path;
}

// --- rollouts ---------------------------------------------------------------------------------

async function rolloutsPage(params) {
  const filters = {
    status: params.get("status") || "",
    mode: params.get("mode") || "",
    worker: params.get("worker") || "",
    search: params.get("search") || "",
    window: params.get("window") || "",
  };
  const page = Number(params.get("page") || 0);
  const counts = h("div", { class: "counts", "data-testid": "status-counts" });
  const body = h("div", { "data-testid": "rollouts" }, "Loading…");
  const set = (key) => (event) => go("/", { ...filters, [key]: event.target.value, page: 0 });
  const form = h(
    "form",
    { class: "filters", onsubmit: (event) => event.preventDefault() },
    h("label", {}, "status ",
      h("select", { name: "status", onchange: set("status"), "data-testid": "filter-status" },
        h("option", { value: "" }, "any"),
        STATUSES.map((s) => h("option", { value: s, selected: s === filters.status }, s)))),
    h("label", {}, "mode ",
      h("select", { name: "mode", onchange: set("mode") },
        ["", "train", "val", "test"].map((m) =>
          h("option", { value: m, selected: m === filters.mode }, m || "any")))),
    h("label", {}, "worker ",
      h("input", { name: "worker", value: filters.worker, list: "workers", onchange: set("worker"),
        placeholder: "any" })),
    h("datalist", { id: "workers" }),
    h("label", {}, "enqueued ",
      h("select", { name: "window", onchange: set("window") },
        [["", "any time"], ["900", "last 15 min"], ["3600", "last hour"], ["86400", "last day"]]
          .map(([v, label]) => h("option", { value: v, selected: v === filters.window }, label)))),
    h("label", {}, "id ",
      h("input", { name: "search", value: filters.search, placeholder: "search by id",
        onchange: set("search"), "data-testid": "filter-search" })),
  );
  main.replaceChildren(h("h1", {}, "Rollouts"), counts, form, body);
  api("/v1/workers").then((data) => {
    form.querySelector("#workers").replaceChildren(
      ...data.workers.map((w) => h("option", { value: w.worker_id })));
  }).catch(() => {});

  async function load() {
    const since = filters.window ? Date.now() / 1000 - Number(filters.window) : undefined;
    const [stats, result] = await Promise.all([
      api("/v1/statistics"),
      api("/v1/rollouts", {
        status: filters.status || undefined,
        mode: filters.mode || undefined,
        worker_id: filters.worker || undefined,
        search: filters.search || undefined,
        since,
        order: "newest",
        limit: PAGE,
        offset: page * PAGE,
      }),
    ]);
    counts.replaceChildren(
      h("a", { href: "#/", class: "count" }, `all ${stats.rollouts}`),
      ...Object.entries(stats.rollouts_by_status).map(([status, count]) =>
        h("a", { href: `#/?status=${status}`, class: `count s-${status}`,
          "data-testid": `count-${status}` }, `${status} ${count}`)),
    );
    const pages = Math.max(1, Math.ceil(result.total / PAGE));
    const rows = result.rollouts.map((r) =>
      h("tr", { "data-testid": "rollout-row" },
        h("td", {}, h("a", { href: `#/rollout/${seg(r.rollout_id)}` }, r.rollout_id)),
        h("td", {}, badge(r.status)),
        h("td", {}, r.mode),
        h("td", {}, r.num_attempts),
        h("td", {}, when(r.enqueue_time)),
        h("td", {}, duration(r.start_time, r.end_time)),
        h("td", {}, r.resources_id ? h("a", { href: `#/resources/${seg(r.resources_id)}` },
          r.resources_id) : "")));
    const pager = h("div", { class: "pager" },
      h("button", { disabled: page === 0, onclick: () => go("/", { ...filters, page: page - 1 }) },
        "← newer"),
      h("span", { "data-testid": "page-info" },
        ` page ${page + 1} of ${pages} · ${result.total} rollouts `),
      h("button", { disabled: result.next_offset === null,
        onclick: () => go("/", { ...filters, page: page + 1 }) }, "older →"));
    body.replaceChildren(
      table(["rollout", "status", "mode", "attempts", "enqueued", "took", "resources"], rows,
        { class: "list" }),
      pager);
  }
  await load();
  refresh = load;
}

// --- one rollout ------------------------------------------------------------------------------

async function rolloutPage(id, params) {
  const view = await api(`/v1/views/rollouts/${seg(id)}`, { attempt_id: params.get("attempt") });
  const r = view.rollout;
  show(
    h("p", {}, h("a", { href: "#/" }, "← rollouts")),
    h("h1", {}, "Rollout ", h("code", { "data-testid": "rollout-id" }, r.rollout_id), " ",
      badge(r.status)),
    h("div", { class: "facts" },
      fact("mode", r.mode), fact("enqueued", when(r.enqueue_time)),
      fact("took", duration(r.start_time, r.end_time)), fact("attempts", r.num_attempts),
      fact("resources", r.resources_id ? h("a", { href: `#/resources/${seg(r.resources_id)}` },
        r.resources_id) : "none"),
      fact("reward", view.rewards.length ? num(view.rewards[view.rewards.length - 1].value) : "none")),
    view.error ? h("p", { class: "error", "data-testid": "rollout-error" }, view.error) : null,
    h("details", {}, h("summary", {}, "input and metadata"), json({ input: r.input,
      metadata: r.metadata })),
    section("Attempts", timeline(view, r)),
    section(`Spans (${view.spans_total})`, spanTree(view)),
    section(`LLM calls (${view.calls.length})`, ...view.calls.map((c) => callCard(r, view, c))),
    view.rewards.length
      ? section("Rewards", table(["value", "span", "time"], view.rewards.map((w) =>
          h("tr", {}, h("td", {}, num(w.value)), h("td", {}, w.span_id), h("td", {}, when(w.time))))))
      : null,
    trainingSection(r),
  );
}

function show(...parts) {
  main.replaceChildren(...parts.filter((part) => part !== null && part !== undefined));
}

function fact(label, value) {
  return h("div", { class: "fact" }, h("span", {}, label), h("strong", {}, value));
}

function timeline(view, rollout) {
  const attempts = view.attempts;
  if (!attempts.length) return h("p", {}, "No attempt yet: the rollout is queued.");
  const start = rollout.enqueue_time;
  const end = Math.max(...attempts.map((a) => a.end_time || a.last_heartbeat_time || a.start_time),
    Date.now() / 1000 * (rollout.end_time ? 0 : 1), rollout.end_time || 0);
  const span = Math.max(end - start, 1e-3);
  const rows = attempts.map((a) => {
    const left = ((a.start_time - start) / span) * 100;
    const width = Math.max((((a.end_time || end) - a.start_time) / span) * 100, 0.5);
    return h("div", { class: "attempt", "data-testid": "attempt" },
      h("a", { href: `#/rollout/${seg(rollout.rollout_id)}?attempt=${seg(a.attempt_id)}`,
        class: a.attempt_id === view.attempt_id ? "chosen" : "" }, `#${a.sequence}`),
      h("div", { class: "track" },
        h("div", { class: `bar s-${a.status}`, style: `left:${left}%;width:${width}%`,
          title: `${a.status} on ${a.worker_id || "?"}` })),
      h("span", {}, badge(a.status), ` ${a.worker_id || "no worker"} · `,
        duration(a.start_time, a.end_time),
        a.last_heartbeat_time ? ` · heartbeat ${ago(a.last_heartbeat_time)}` : "",
        a.reason ? h("span", { class: "error" }, ` · ${a.reason}`) : ""));
  });
  return h("div", { class: "timeline" }, rows);
}

function spanTree(view) {
  const children = new Map();
  const ids = new Set(view.spans.map((s) => s.span_id));
  for (const span of view.spans) {
    const parent = span.parent_id && ids.has(span.parent_id) ? span.parent_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(span);
  }
  const calls = new Map(view.calls.map((c) => [c.span_id, c]));
  function node(span) {
    const kids = children.get(span.span_id) || [];
    const call = calls.get(span.span_id);
    return h("li", {},
      h("details", { "data-testid": "span", "data-span-type": span.type || "" },
        h("summary", {},
          h("span", { class: `kind k-${span.type || "other"}` }, span.type || "span"), " ",
          span.name, " ", h("small", {}, duration(span.start, span.end)),
          span.status === "error" ? h("span", { class: "error" },
            ` error: ${span.status_message || ""}`) : "",
          call ? h("a", { href: `#call-${call.index}`, class: "tag" }, `call ${call.index}`) : ""),
        table(["attribute", "value"], Object.entries(span.attributes).map(([k, v]) =>
          h("tr", {}, h("td", {}, k), h("td", {}, h("pre", {}, typeof v === "string" ? v
            : JSON.stringify(v)))))),
        span.events.length ? json(span.events) : null),
      kids.length ? h("ul", {}, kids.map(node)) : null);
  }
  const roots = children.get(null) || [];
  const note = view.spans_total > view.spans.length
    ? h("p", {}, `Showing the first ${view.spans.length} of ${view.spans_total} spans.`) : null;
  return h("div", {}, note, roots.length ? h("ul", { class: "tree" }, roots.map(node))
    : h("p", {}, "No spans."));
}

function message(m) {
  const content = typeof m.content === "string" ? m.content
    : m.content === null || m.content === undefined ? "" : JSON.stringify(m.content);
  return h("div", { class: `msg r-${m.role}`, "data-testid": "message" },
    h("b", {}, m.role), h("pre", {}, content),
    m.tool_calls ? m.tool_calls.map((t) => h("pre", { class: "tool" },
      `→ ${t.function ? t.function.name : t.name}(${t.function ? t.function.arguments : ""})`))
      : null);
}

function callCard(rollout, view, c) {
  const tokens = h("div", { class: "tokens" });
  const show = async () => {
    const ids = await api(`/v1/views/rollouts/${seg(rollout.rollout_id)}/calls/${c.index}/tokens`,
      { attempt_id: view.attempt_id });
    tokens.replaceChildren(
      h("div", {}, h("b", {}, "prompt ids "), h("code", { "data-testid": "prompt-ids" },
        JSON.stringify(ids.prompt_ids))),
      h("div", {}, h("b", {}, "response ids "), h("code", { "data-testid": "response-ids" },
        JSON.stringify(ids.response_ids))),
      ids.logprobs ? h("div", {}, h("b", {}, "logprobs "), h("code", {},
        JSON.stringify(ids.logprobs.map((x) => num(x, 4))))) : null);
  };
  return h("article", { class: "call", id: `call-${c.index}`, "data-testid": "call" },
    h("h3", {}, `Call ${c.index}`, c.agent ? ` · agent ${c.agent}` : "", c.model ? ` · ${c.model}` : ""),
    h("div", { class: "facts" },
      fact("latency", c.latency_ms === null ? "" : `${num(c.latency_ms, 1)} ms`),
      fact("prompt tokens", h("span", { "data-testid": "prompt-tokens" }, c.prompt_tokens ?? "not recorded")),
      fact("response tokens", h("span", { "data-testid": "response-tokens" }, c.response_tokens ?? "not recorded")),
      fact("usage", c.usage ? `${c.usage.prompt_tokens ?? "?"} + ${c.usage.completion_tokens ?? "?"}` : ""),
      fact("finish", c.finish_reason || ""), fact("weights", c.weight_version ?? ""),
      c.step_rewards.length ? fact("step rewards", c.step_rewards.map((x) => num(x)).join(", ")) : null),
    h("div", { class: "messages" }, (c.messages || []).map(message),
      c.reply ? message({ ...c.reply, role: c.reply.role || "assistant" }) : null),
    c.prompt_tokens !== null ? h("button", { onclick: show, "data-testid": "show-ids" },
      "show token ids") : null,
    tokens);
}

function trainingSection(rollout) {
  const out = h("div", { "data-testid": "training" });
  const controls = h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
    h("label", {}, "credit ", h("select", { name: "credit" },
      ["final", "step", "discounted"].map((v) => h("option", { value: v }, v)))),
    h("label", {}, "advantage ", h("select", { name: "advantage" },
      ["grpo", "rloo", "reinforce"].map((v) => h("option", { value: v }, v)))),
    h("label", {}, h("input", { type: "checkbox", name: "trajectory" }), " trajectory"),
    h("button", { type: "button", onclick: () => load() }, "recompute"));
  async function load() {
    const form = new FormData(controls);
    out.replaceChildren("Building transitions…");
    try {
      const view = await api(`/v1/views/rollouts/${seg(rollout.rollout_id)}/training`, {
        credit: form.get("credit"), advantage: form.get("advantage"),
        trajectory: form.get("trajectory") ? "true" : "false",
      });
      const reasons = new Map(view.dropped_calls.map((d) => [`${d.rollout_id}/${d.call_index}`,
        d.reason]));
      const mismatches = view.prefix_mismatch;
      const rerendered = new Map(mismatches.map((m) => [`${m.rollout_id}/${m.call_index}`,
        m.position]));
      out.replaceChildren(
        h("p", {}, `Group ${view.group ?? "(this rollout alone)"}: ${view.summary}.`),
        mismatches.length ? h("p", { class: "warning", "data-testid": "prefix-mismatch" },
          h("span", { class: "badge warn" }, `prefix_mismatch ${mismatches.length}`),
          ` ${mismatches.length} call(s) re-rendered their conversation's history: the messages `
          + "continue the agent's previous call, the prompt token ids do not extend its prompt + "
          + "response (reasoning dropped, a compacted history, an edited tool result). Each is "
          + "trained on its own, never merged: ",
          mismatches.flatMap((m, i) => [i ? ", " : "",
            h("a", { href: `#/rollout/${seg(m.rollout_id)}` }, m.rollout_id),
            ` call ${m.call_index} from token ${m.position}`]), ".") : null,
        h("h3", {}, "The group, side by side"),
        table(["rollout", "status", "reward", "calls", "transitions", "kept?"],
          view.rollouts.map((m) => h("tr", { class: m.rollout_id === rollout.rollout_id ? "me" : "" },
            h("td", {}, h("a", { href: `#/rollout/${seg(m.rollout_id)}` }, m.rollout_id)),
            h("td", {}, badge(m.status)), h("td", {}, num(m.reward)), h("td", {}, m.calls),
            h("td", {}, m.transitions, m.prefix_mismatch ? h("span", { class: "badge warn tag" },
              `prefix_mismatch ${m.prefix_mismatch}`) : null),
            h("td", {}, m.dropped ? h("span", { class: "error" }, `dropped: ${m.dropped}`)
              : "kept")))),
        h("h3", {}, "Transitions of this rollout"),
        table(["call", "agent", "reward", "advantage", "weight", "prompt", "response", "weights"],
          view.transitions.filter((t) => t.rollout_id === rollout.rollout_id).map((t) =>
            h("tr", { "data-testid": "transition" }, h("td", {}, t.call_index,
              rerendered.has(`${t.rollout_id}/${t.call_index}`) ? h("span", {
                class: "badge warn tag", "data-testid": "rerendered",
                title: `history re-rendered: ids part from token ${
                  rerendered.get(`${t.rollout_id}/${t.call_index}`)}` }, "re-rendered") : null),
              h("td", {}, t.agent ?? ""), h("td", {}, num(t.reward)),
              h("td", { "data-testid": "advantage" }, num(t.advantage, 4)), h("td", {}, num(t.weight)),
              h("td", {}, t.prompt_tokens), h("td", {}, t.response_tokens),
              h("td", {}, t.weight_version ?? "")))
            .concat([...reasons].filter(([key]) => key.startsWith(`${rollout.rollout_id}/`))
              .map(([key, reason]) => h("tr", { class: "dropped" },
                h("td", {}, key.split("/").pop()), h("td", { colspan: 7, class: "error" },
                  `dropped: ${reason}`)))),
          { "data-testid": "transitions" }));
    } catch (error) {
      out.replaceChildren(h("p", { class: "error" }, error.message));
    }
  }
  load();
  return section("What training sees (LightningRL)", controls, out);
}

// --- resources --------------------------------------------------------------------------------

async function resourcesPage(params) {
  const page = Number(params.get("page") || 0);
  const result = await api("/v1/resources", { limit: PAGE, offset: page * PAGE });
  main.replaceChildren(
    h("h1", {}, "Resources"),
    h("p", {}, `${result.total} versions, newest first.`),
    table(["version", "id", "published", "resources"], result.resources.map((r) =>
      h("tr", { "data-testid": "resources-row" }, h("td", {}, r.version),
        h("td", {}, h("a", { href: `#/resources/${seg(r.resources_id)}` }, r.resources_id)),
        h("td", {}, when(r.create_time)),
        h("td", {}, Object.entries(r.resources).map(([n, v]) => `${n} (${v.type})`).join(", "))))),
    h("div", { class: "pager" },
      h("button", { disabled: page === 0, onclick: () => go("/resources", { page: page - 1 }) },
        "← newer"),
      h("button", { disabled: result.next_offset === null,
        onclick: () => go("/resources", { page: page + 1 }) }, "older →")));
}

async function resourcePage(id, params) {
  const against = params.get("against") || undefined;
  const [diff, versions] = await Promise.all([
    api(`/v1/views/resources/${seg(id)}/diff`, { against }),
    api("/v1/resources", { limit: 200 }),
  ]);
  const picker = h("select", { "data-testid": "against",
    onchange: (e) => go(`/resources/${seg(id)}`, { against: e.target.value }) },
    h("option", { value: "" }, "the previous version"),
    versions.resources.filter((v) => v.resources_id !== id).map((v) =>
      h("option", { value: v.resources_id, selected: v.resources_id === diff.against && against },
        `v${v.version} · ${v.resources_id}`)));
  const versionPicker = h("select", { "data-testid": "version",
    onchange: (e) => go(`/resources/${seg(e.target.value)}`) },
    versions.resources.map((v) => h("option", { value: v.resources_id,
      selected: v.resources_id === id }, `v${v.version} · ${v.resources_id}`)));
  main.replaceChildren(
    h("p", {}, h("a", { href: "#/resources" }, "← resources")),
    h("h1", {}, `Resources v${diff.version} `, h("code", {}, id)),
    h("p", {}, "version ", versionPicker, " compared with ", picker,
      diff.against ? ` (v${diff.against_version})` : " (none: this is the first)"),
    ...diff.resources.map((r) => section(`${r.name} · ${r.type}${r.changed ? " · changed" : ""}`,
      r.text_after !== null ? h("pre", { class: "prompt", "data-testid": `prompt-${r.name}` },
        r.text_after) : json(r.after),
      r.diff.length ? h("pre", { class: "diff", "data-testid": `diff-${r.name}` },
        r.diff.map((line) => h("span", { class: line.startsWith("+") ? "add"
          : line.startsWith("-") ? "del" : "" }, `${line}\n`))) : h("p", {}, "unchanged"),
      candidates(r.after))));
}

function candidates(resource) {
  // A resource that keeps scored candidates (a prompt optimizer's state) gets a table of them.
  const list = resource && Array.isArray(resource.candidates) ? resource.candidates : null;
  if (!list || !list.length || typeof list[0].score !== "number") return null;
  const sorted = [...list].sort((a, b) => b.score - a.score);
  return h("div", {}, h("h3", {}, "Candidates"),
    table(["id", "round", "score", "origin", "text"], sorted.map((c) =>
      h("tr", {}, h("td", {}, c.id), h("td", {}, c.round ?? ""), h("td", {}, num(c.score)),
        h("td", {}, c.origin ?? ""),
        h("td", {}, h("pre", {}, Object.values(c.templates || {}).join("\n---\n")))))));
}

// --- workers and statistics -------------------------------------------------------------------

async function workersPage() {
  async function load() {
    const [workers, stats] = await Promise.all([api("/v1/workers"), api("/v1/statistics")]);
    main.replaceChildren(
      h("h1", {}, "Workers & store"),
      section("Store", h("div", { class: "facts" }, fact("rollouts", stats.rollouts),
        fact("attempts", stats.attempts), fact("spans", stats.spans),
        fact("resource versions", stats.resources), fact("workers", stats.workers),
        ...Object.entries(stats.rollouts_by_status).map(([s, n]) => fact(s, n)))),
      section("Workers", table(["worker", "last heartbeat", "first seen", "last claim", "claimed"],
        workers.workers.map((w) => h("tr", { "data-testid": "worker-row" },
          h("td", {}, h("a", { href: `#/?worker=${seg(w.worker_id)}` }, w.worker_id)),
          h("td", {}, ago(w.last_seen_time)), h("td", {}, when(w.first_seen_time)),
          h("td", {}, ago(w.last_dequeue_time)), h("td", {}, w.num_claimed))))));
  }
  await load();
  refresh = load;
}

// --- curves -----------------------------------------------------------------------------------

function chart(title, points) {
  const width = 560, height = 220, pad = 36;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (width - 2 * pad);
  const sy = (y) => height - pad - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * pad);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("data-testid", `chart-${title}`);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "));
  svg.append(line);
  for (const [text, x, y, anchor] of [[num(y1), 2, pad, "start"], [num(y0), 2, height - pad, "start"],
    [`step ${x0}`, pad, height - 8, "start"], [`step ${x1}`, width - pad, height - 8, "end"]]) {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", x);
    label.setAttribute("y", y);
    label.setAttribute("text-anchor", anchor);
    label.textContent = text;
    svg.append(label);
  }
  return h("figure", {}, h("figcaption", {}, title), svg);
}

async function curvesPage(params) {
  const runs = (await api("/v1/metrics/runs")).runs;
  const run = params.get("run") || runs[runs.length - 1];
  if (!run) {
    main.replaceChildren(h("h1", {}, "Curves"),
      h("p", {}, "No run has logged metrics into this store yet."));
    return;
  }
  const rows = [];
  for (let offset = 0; offset !== null;) {
    const page = await api("/v1/metrics", { run, limit: 10000, offset });
    rows.push(...page.rows);
    offset = page.next_offset;
  }
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r.values)))];
  // re-rendered histories, charted as soon as a step had one
  const troubled = keys.filter((k) => /prefix_mismatch$/.test(k) && rows.some((r) => r.values[k]));
  const wanted = [...new Set(keys.filter((k) => /reward\/mean$|loss$|^val\//.test(k))
    .concat(troubled))];
  main.replaceChildren(
    h("h1", {}, "Curves"),
    h("p", {}, "run ", h("select", { onchange: (e) => go("/curves", { run: e.target.value }) },
      runs.map((r) => h("option", { value: r, selected: r === run }, r))),
      ` · ${rows.length} steps logged`),
    h("div", { class: "charts" }, (wanted.length ? wanted : keys.slice(0, 6)).map((key) =>
      chart(key, lastPerStep(rows, key)))));
}

function lastPerStep(rows, key) {
  // A resumed run logs its redone steps again: the last row of a step is the one that counts.
  const byStep = new Map();
  for (const row of rows) if (key in row.values) byStep.set(row.step, row.values[key]);
  return [...byStep].sort((a, b) => a[0] - b[0]);
}

// --- router -----------------------------------------------------------------------------------

async function route() {
  refresh = null;
  const { path, params } = hashParams();
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const nav = parts[0] === "rollout" || !parts.length ? "rollouts" : parts[0];
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("here", link.dataset.nav === nav);
  }
  try {
    if (!parts.length) await rolloutsPage(params);
    else if (parts[0] === "rollout") await rolloutPage(parts[1], params);
    else if (parts[0] === "resources" && parts[1]) await resourcePage(parts[1], params);
    else if (parts[0] === "resources") await resourcesPage(params);
    else if (parts[0] === "workers") await workersPage();
    else if (parts[0] === "curves") await curvesPage(params);
    else main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `No page ${path}.`));
  } catch (error) {
    main.replaceChildren(h("h1", {}, "Could not load this page"),
      h("p", { class: "error", "data-testid": "page-error" }, error.message));
  }
}

window.addEventListener("hashchange", route);
setInterval(() => {
  if (refresh && document.getElementById("live").checked && !document.hidden) {
    refresh().catch(() => {});
  }
}, 2000);
route();
