// ctape serve: the little script the pages need. No inline script anywhere (CSP script-src 'self');
// all HTML inserted here was rendered and escaped by the server.
"use strict";

(function () {
  const POLL_MS = 500;

  const CHUNK = 500000; // characters a "show more" asks for (the server's CHUNK)

  // a clipped block: fetch the rest of its text a slice at a time (from data-shown on),
  // into the <pre> itself, or, under clipped markdown, into a <pre> added after it
  function showAll(link) {
    let pre = link.previousElementSibling;
    if (!pre || pre.tagName !== "PRE") {
      const rest = document.createElement("pre");
      rest.className = "out rest";
      link.parentNode.insertBefore(rest, link);
      pre = rest;
    }
    const label = link.textContent;
    link.textContent = "loading…";
    const sep = link.dataset.src.includes("?") ? "&" : "?";
    const url = link.dataset.src + sep + "from=" + link.dataset.shown + "&size=" + CHUNK;
    fetch(url, { headers: { Accept: "text/plain" } })
      .then((r) => (r.ok ? r.text().then((text) => [r, text]) : Promise.reject(new Error(r.status))))
      .then(([r, text]) => {
        pre.textContent += text;
        const end = Number(r.headers.get("X-Ctape-End"));
        const total = Number(r.headers.get("X-Ctape-Total"));
        if (!(end < total)) {
          pre.classList.remove("clipped");
          link.remove();
          return;
        }
        link.dataset.shown = String(end);
        link.textContent = total - end <= CHUNK ? "show the rest (" + (total - end).toLocaleString("en") + " chars)"
          : "show more (" + end.toLocaleString("en") + " of " + total.toLocaleString("en") + " chars shown)";
      })
      .catch(() => { link.textContent = label + ": could not load it"; });
  }

  document.addEventListener("click", (ev) => {
    const link = ev.target.closest("a.show-all");
    if (link) {
      ev.preventDefault();
      showAll(link);
    }
  });

  // a conversation opens at its newest entry (the bottom, as a chat does), unless the
  // link names an entry (#h-...) or the browser restores where the reader was (back, reload)
  function openAtNewest() {
    if (location.hash || !document.getElementById("entries")) return;
    const nav = performance.getEntriesByType("navigation")[0];
    if (nav && nav.type !== "navigate") return;
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  // a deep link to an entry folded inside a tool call or a hidden run: unfold it
  function revealTarget() {
    if (!location.hash) return;
    const el = document.getElementById(location.hash.slice(1));
    if (!el) return;
    for (let d = el; d; d = d.parentElement) if (d.tagName === "DETAILS") d.open = true;
    el.classList.add("target");
    el.scrollIntoView({ block: "center" });
  }

  // a result that arrived after its call was drawn goes inside that call: the nearest call
  // before it with its id that no result answered yet, as the server pairs them (agents
  // reuse ids: the first call with the id is not always the one answered)
  function pairResults(root) {
    root.querySelectorAll(".orphan[data-call-id]").forEach((res) => {
      const id = res.dataset.callId;
      if (!id) return;
      const waiting = Array.from(document.querySelectorAll('details.tool[data-call-id="' + CSS.escape(id) + '"]')).filter(
        (c) => !c.querySelector(":scope > .result") && (c.compareDocumentPosition(res) & Node.DOCUMENT_POSITION_FOLLOWING));
      const call = waiting[waiting.length - 1];
      if (!call) return;
      res.classList.remove("orphan");
      res.classList.add("result");
      call.appendChild(res);
      const badge = call.querySelector("summary .badge");
      const isErr = res.classList.contains("error");
      if (badge) {
        badge.textContent = isErr ? "error" : "done";
        badge.className = "badge " + (isErr ? "err" : "ok");
      }
    });
  }

  function relabel(decorations) {
    // every entry shown loses its branch and tag labels, then gets those it has now: a
    // message's are in its .meta line (before the time), a tool call's in its summary
    // (before the hash)
    const places = [["#entries [data-hash] > .meta", "time"], ["#entries details.tool[data-hash] > summary", "a.hash"]];
    places.forEach(([where, before]) => document.querySelectorAll(where).forEach((line) => {
      line.querySelectorAll(":scope > .ref").forEach((r) => r.remove());
      // a call's summary names its result's labels too: the result is inside the fold
      const result = line.tagName === "SUMMARY" ? line.parentElement.querySelector(":scope > .result[data-hash]") : null;
      const html = (decorations[line.parentElement.dataset.hash] || "") + (result ? decorations[result.dataset.hash] || "" : "");
      if (html) {
        const at = line.querySelector(":scope > " + before);
        const tmp = document.createElement("span");
        tmp.innerHTML = html;
        Array.from(tmp.childNodes).forEach((n) => line.insertBefore(n, at));
      }
    }));
  }

  // the branch tree's width is the server's guess of its labels' (it knows no font): made
  // as wide as what the browser drew, so that no label is cut at its right edge
  function fitTree() {
    const svg = document.querySelector("svg.tree");
    if (!svg || !svg.getBBox) return;
    const box = svg.getBBox();
    const need = Math.ceil(box.x + box.width) + 8;
    const height = svg.height.baseVal.value;
    if (need > svg.width.baseVal.value) {
      svg.setAttribute("width", String(need));
      svg.setAttribute("viewBox", "0 0 " + need + " " + height);
    }
  }

  function live() {
    const body = document.body;
    const session = body.dataset.session;
    if (!session) return;
    const base = "/s/" + encodeURIComponent(session);
    let busy = false;

    async function tick() {
      if (busy) return;
      busy = true;
      try {
        const r = await fetch(base + "/head", { cache: "no-store" });
        if (r.status === 404) {
          // the session is gone (`ctape session rm`): say so once, and stop asking
          clearInterval(timer);
          const note = document.createElement("p");
          note.className = "badge err gone";
          note.textContent = "this session was removed from the tape; what the page shows is what it held";
          const header = document.getElementById("session-header");
          if (header) header.appendChild(note);
          return;
        }
        if (!r.ok) return;
        const info = await r.json();
        const moved = info.sig !== body.dataset.sig;  // the refs or the entries changed
        if (moved) {
          const at = body.dataset.at;
          const t = await fetch(base + "/tree" + (at ? "?at=" + encodeURIComponent(at) : ""), { cache: "no-store" });
          if (t.ok) {
            document.getElementById("tree-svg").innerHTML = await t.text();
            fitTree();
            body.dataset.sig = info.sig;
          }
        }
        if (body.dataset.follow === "1" && (moved || (info.head && info.head !== body.dataset.head))) {
          const a = await fetch(base + "/after?after=" + encodeURIComponent(body.dataset.head || ""), { cache: "no-store" });
          if (!a.ok) return;
          const got = await a.json();
          // the header and the labels as a reload would show them (a checkout, a new branch
          // or tag, a branch's label moving to the entry just appended)
          const header = document.getElementById("session-header");
          if (header && got.header !== undefined) header.innerHTML = got.header;
          if (got.reset) {
            document.getElementById("conversation").innerHTML = got.html;
          } else if (got.html) {
            const box = document.getElementById("entries");
            const tmp = document.createElement("div");
            tmp.innerHTML = got.html;
            const added = Array.from(tmp.children);
            // a reader at the bottom (within 400 px of it) stays at the bottom, as a chat
            // does; one scrolled up keeps the place
            const atBottom = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 400;
            added.forEach((n) => { n.classList.add("fresh"); box.appendChild(n); });
            pairResults(box);
            if (added.length && atBottom) window.scrollTo(0, document.documentElement.scrollHeight);
          }
          relabel(got.decorations || {});
          body.dataset.head = got.head || "";
        }
      } catch (e) {
        // the server stopped or the network hiccuped: try again at the next tick
      } finally {
        busy = false;
      }
    }
    const timer = setInterval(tick, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    fitTree();
    openAtNewest();
    revealTarget();
    live();
  });
})();
