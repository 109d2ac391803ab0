// koboi console: the live view of a run, from the server's SSE stream of the session.
// Loaded as a file (the content-security policy allows no inline script). Everything the
// stream says is put on the page as text (textContent), never as HTML.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live) {
    return;
  }
  const list = document.getElementById("events");
  const state = document.getElementById("live-state");
  const meta = document.querySelector('meta[name="koboi-csrf"]');
  const csrf = meta ? meta.content : "";
  const statusUrl = live.dataset.statusUrl || "";
  const finalStatuses = ["completed", "failed", "cancelled", "waiting_input"];
  // Streamed text per model call: the step_started event it belongs to, and per step.
  const byCall = new Map();
  const byStep = new Map();
  const approvals = new Map();
  let source = null;

  function setState(text, kind) {
    state.textContent = text;
    state.className = "live-state" + (kind ? " live-" + kind : "");
  }

  function show(value) {
    if (value === undefined || value === null || value === "") {
      return null;
    }
    const pre = document.createElement("pre");
    pre.textContent = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    return pre;
  }

  function item(kind, title, body) {
    const li = document.createElement("li");
    li.className = "event event-" + kind;
    const head = document.createElement("span");
    head.className = "kind";
    head.textContent = kind.replace(/_/g, " ");
    li.appendChild(head);
    if (title) {
      const t = document.createElement("span");
      t.className = "title";
      t.textContent = title;
      li.appendChild(t);
    }
    const pre = show(body);
    if (pre) {
      li.appendChild(pre);
    }
    list.appendChild(li);
    li.scrollIntoView({ block: "nearest" });
    return li;
  }

  function randomKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function hidden(form, name, value) {
    const input = document.createElement("input");
    input.type = "hidden";
    input.name = name;
    input.value = value;
    form.appendChild(input);
  }

  function decisionForm(data) {
    const form = document.createElement("form");
    form.method = "post";
    form.action = live.dataset.decideUrl.replace("{approval_id}", encodeURIComponent(data.approval_id));
    form.className = "decide";
    hidden(form, "csrf_token", csrf);
    hidden(form, "idempotency_key", randomKey());
    hidden(form, "next", live.dataset.here);
    for (const [value, label] of [["approve", "Approve"], ["deny", "Deny"]]) {
      const button = document.createElement("button");
      button.type = "submit";
      button.name = "decision";
      button.value = value;
      button.className = value;
      button.textContent = label;
      form.appendChild(button);
    }
    return form;
  }

  function refreshStatus(untilFinal) {
    if (!statusUrl) {
      return;
    }
    let tries = 0;
    const poll = () => {
      fetch(statusUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => (r.ok ? r.json() : null))
        .then((job) => {
          if (!job) {
            return;
          }
          const badge = document.getElementById("job-status");
          if (badge) {
            badge.textContent = job.status;
            badge.className = "status status-" + job.status;
          }
          const cancel = document.getElementById("cancel-job");
          if (cancel && finalStatuses.includes(job.status) && job.status !== "waiting_input") {
            cancel.closest("form").remove();
          }
          tries += 1;
          if (untilFinal && !finalStatuses.includes(job.status) && tries < 60) {
            setTimeout(poll, 500);
          }
        })
        .catch(() => undefined);
    };
    poll();
  }

  const handlers = {
    run_started(d) {
      item("run_started", d.kind === "tool_call" ? "a direct tool call" : "input", d.input);
    },
    run_resumed(d) {
      item("run_resumed", "after event " + d.after_event_id, d.reply);
    },
    step_started(d) {
      const li = item("step_started", "step " + d.step, null);
      const pre = document.createElement("pre");
      pre.className = "streamed";
      li.appendChild(pre);
      const entry = { pre: pre, shown: 0 };
      byCall.set(d.event_id, entry);
      byStep.set(d.step, entry);
    },
    text_delta(d) {
      const entry = byCall.get(d.after_event_id);
      if (!entry) {
        return;
      }
      const end = d.offset + d.text.length;
      if (end > entry.shown) {
        entry.pre.textContent += d.text.slice(Math.max(0, entry.shown - d.offset));
        entry.shown = end;
      }
    },
    step(d) {
      const entry = byStep.get(d.step);
      if (entry && d.text) {
        entry.pre.textContent = d.text;
        entry.shown = d.text.length;
      } else if (d.text) {
        item("step", "step " + d.step, d.text);
      }
    },
    tool_call(d) {
      item("tool_call", d.name, d.arguments);
    },
    tool_result(d) {
      const title = d.name + (d.refused_by ? " (refused by " + d.refused_by + ")" : "");
      item(d.is_error ? "tool_error" : "tool_result", title, d.content);
    },
    pending_approval(d) {
      if (approvals.has(d.approval_id)) {
        return;
      }
      const li = item("pending_approval", d.tool + " asks for approval (risk: " + d.risk + ")", d.arguments);
      li.id = "live-approval-" + d.approval_id;
      li.appendChild(decisionForm(d));
      approvals.set(d.approval_id, li);
      refreshStatus(false);
    },
    approval_decided(d) {
      const li = approvals.get(d.approval_id);
      if (li) {
        const form = li.querySelector("form");
        if (form) {
          form.remove();
        }
      }
      item("approval_decided", (d.approved ? "approved" : "denied") + " by " + d.decided_by, d.reason);
      refreshStatus(false);
    },
    final(d) {
      item("final", d.outcome, d.output || d.error);
      setState("finished: " + d.outcome, "done");
      source.close();
      refreshStatus(true);
    },
    idle() {
      setState("idle: nothing runs in this session", "done");
      source.close();
      refreshStatus(true);
    },
  };
  const others = [
    "step_failed", "tool_suspended", "provider_event", "budget_exceeded", "context_added",
    "answer_replaced", "run_continued", "side_call_started", "side_call_finished",
    "side_call_failed", "tools_changed", "plugin_event", "child_event", "journal",
  ];

  function listen(name, handle) {
    source.addEventListener(name, (event) => {
      let data = {};
      try {
        data = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      setState("live", "live");
      handle(data);
    });
  }

  source = new EventSource(live.dataset.eventsUrl);
  source.onopen = () => setState("live", "live");
  for (const [name, handle] of Object.entries(handlers)) {
    listen(name, handle);
  }
  for (const name of others) {
    listen(name, (d) => item(name, d.type || d.name || "", d.data || d));
  }
  // "error" is both the server's terminal event (with data) and the browser's signal of
  // a lost connection (without): the browser reconnects by itself with Last-Event-ID.
  source.addEventListener("error", (event) => {
    if (!event.data) {
      setState("reconnecting…", "waiting");
      return;
    }
    let data = {};
    try {
      data = JSON.parse(event.data);
    } catch (e) {
      data = { code: "error", message: String(event.data) };
    }
    item("error", data.code, data.message);
    if (data.code !== "shutting_down" && data.code !== "store_unavailable") {
      setState("ended: " + data.code, "error");
      source.close();
    }
  });
})();
