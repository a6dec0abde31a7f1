// The worked example, played in the page: the server sends every step once (step_player.py computes
// every number, colour and line of LaTeX); stepping, choosing a head or weight and clicking a cell
// redraw here at once, with no round trip. The step goes into the URL (?step=) and, with the chosen
// cells, into this tab's sessionStorage, so a return to the page opens where the reader was.

// (element, math, loadKatex, select and pairedBars: page_kit.js)

const STORE = "glassbox:worked-example";
const mounted = new WeakMap(); // parentElement -> the player drawn in it
let current = null; // the player the arrow keys move

function remembered() {
  try {
    return JSON.parse(sessionStorage.getItem(STORE)) || {};
  } catch {
    return {};
  }
}

function remember(player) {
  try {
    sessionStorage.setItem(STORE, JSON.stringify({ step: player.step().key, cells: player.cells, panels: player.panels }));
  } catch {
    // storage full or refused: the URL still holds the step
  }
}

// The page's URL holds the step alone (and Streamlit's own embed options): a link from another page
// can arrive carrying that page's parameters, which mean nothing here.
function writeUrl(key) {
  const url = new URL(window.location.href);
  const kept = [...url.searchParams].filter(([name]) => name.startsWith("embed"));
  const search = new URLSearchParams([...kept, ["step", key]]).toString();
  if (url.search === `?${search}`) return;
  url.search = search;
  window.history.replaceState(window.history.state, "", url);
}

// One grid as a table: its title (article name, size, provenance; the engine's name below), the
// column title over the column labels, the row title in the corner, each cell's exact value on hover.
function gridNode(grid, { marks = [], selected = null, onClick = null, scale = true } = {}) {
  const figure = element("figure", "gb-grid");
  figure.dataset.label = grid.label;
  const caption = element("figcaption");
  const title = element("b", "", grid.title);
  if (grid.power) {
    title.append(" ×10");
    title.append(element("sup", "", String(grid.power)));
  }
  caption.append(title, element("span", "gb-size", ` ${grid.size}`));
  if (grid.provenance) caption.append(element("i", "gb-size", ` · ${grid.provenance}`));
  caption.append(element("div", "gb-engine", grid.name));
  const table = element("table");
  const head = element("thead");
  const titles = element("tr");
  const corner = element("th", "gb-corner", grid.row_title ? `${grid.row_title} ↓` : "");
  corner.rowSpan = 2;
  const across = element("th", "gb-coltitle", grid.col_title ? `${grid.col_title} →` : "");
  across.colSpan = grid.cols.length;
  titles.append(corner, across);
  const labels = element("tr");
  for (const col of grid.cols) labels.append(element("th", "gb-col", col));
  head.append(titles, labels);
  const body = element("tbody");
  const marked = (r, c) => marks.some(([mr, mc]) => (mr === null || mr === r) && (mc === null || mc === c));
  grid.rows.forEach((rowLabel, r) => {
    const row = element("tr");
    row.append(element("th", "gb-row", rowLabel));
    grid.cols.forEach((colLabel, c) => {
      const cell = element("td", "", grid.text[r][c]);
      if (grid.fill[r][c]) cell.style.background = grid.fill[r][c];
      cell.style.color = grid.ink[r][c];
      cell.title = `${grid.row_title} ${rowLabel}, ${grid.col_title} ${colLabel}\nexact: ${grid.exact[r][c]}`;
      if (grid.changed && grid.changed[r][c]) cell.classList.add("gb-changed");
      if (marked(r, c)) cell.classList.add("gb-mark");
      if (selected && selected[0] === r && selected[1] === c) cell.classList.add("gb-selected");
      if (onClick) {
        cell.classList.add("gb-clickable");
        cell.dataset.cell = `${r},${c}`;
        cell.addEventListener("click", () => onClick(r, c));
      }
      row.append(cell);
    });
    body.append(row);
  });
  table.append(head, body);
  figure.append(caption, table);
  if (scale && grid.scale) {
    const bar = element("div", "gb-scale");
    bar.append(element("span", "", grid.scale.low_text));
    const ramp = element("span", "gb-ramp");
    ramp.style.background = `linear-gradient(to right, ${grid.scale.stops.join(", ")})`;
    bar.append(ramp, element("span", "", grid.scale.high_text));
    figure.append(bar);
  }
  return figure;
}

// A link to another page of the app, followed by the server (st.switch_page) so the session, and
// whatever the reader did in it, stays; a click with a modifier key opens it as a plain link would.
function pageLink({ label, href, page }, navigate) {
  const link = element("a", "gb-link", label);
  link.href = href;
  link.target = "_self";
  link.addEventListener("click", (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(page);
  });
  return link;
}

function afterUpdate(after, navigate) {
  const box = element("section", "gb-payoff");
  const lead = element("p");
  lead.append(element("b", "", "What the step bought."), " The same forward pass again, now with every W_new:");
  box.append(lead);
  const columns = element("div", "gb-after-columns");
  const left = element("div");
  const metrics = element("div", "gb-metrics");
  for (const metric of after.metrics) {
    const card = element("div", "gb-metric");
    card.append(element("div", "gb-metric-label", metric.label), element("div", "gb-metric-value", metric.value),
      element("div", metric.good ? "gb-metric-delta gb-good" : "gb-metric-delta gb-bad", metric.delta));
    metrics.append(card);
  }
  left.append(metrics, element("p", "", after.sentence), pageLink(after.train, navigate));
  const chart = pairedBars({
    title: "Next-word probabilities at the last position", labels: after.words, bold: after.target,
    series: [{ name: "before the update", colour: "#9db4d0", values: after.before },
             { name: "after the update", colour: "#2f9e44", values: after.after }],
    axis: "probability (bar length; the value written at its end) · next word",
  });
  columns.append(left, chart);
  box.append(columns);
  return box;
}

class Player {
  constructor(parent, data, navigate) {
    this.navigate = navigate;
    this.root = element("div", "gb-player");
    parent.querySelector(".gb-player")?.remove();
    parent.append(this.root);
    const saved = remembered();
    this.cells = saved.cells || {}; // "step|panel" -> [output, row, column]
    this.panels = saved.panels || {}; // step -> panel index
    this.load(data, data.step || saved.step);
  }

  load(data, key) {
    this.data = data;
    this.sentStep = data.step;
    const index = data.steps.findIndex((s) => s.key === key);
    this.index = Math.max(index, 0);
    this.draw();
  }

  step() {
    return this.data.steps[this.index];
  }

  go(index) {
    const next = Math.min(Math.max(index, 0), this.data.steps.length - 1);
    if (next === this.index) return;
    this.index = next;
    this.draw();
  }

  draw() {
    const step = this.step();
    writeUrl(step.key);
    remember(this);
    const nav = element("div", "gb-nav");
    const previous = element("button", "gb-button", "◀ Previous");
    previous.disabled = this.index === 0;
    previous.title = "Keyboard: ←";
    previous.addEventListener("click", () => this.go(this.index - 1));
    const next = element("button", "gb-button gb-primary", "Next ▶");
    next.disabled = this.index === this.data.steps.length - 1;
    next.title = "Keyboard: →";
    next.addEventListener("click", () => this.go(this.index + 1));
    const n = this.data.steps.length;
    const list = select("Step", this.data.steps.map((s, i) => `${i + 1}/${n} · ${s.phase} · ${s.title}`), this.index,
      (i) => this.go(i));
    list.title = "Jump to any step. The URL holds the step, so it can be shared.";
    nav.append(previous, list, next);

    const pipeline = element("div", "gb-pipeline");
    pipeline.innerHTML = step.pipeline; // the server's own markup of fixed stage names, no user text
    const heading = element("div", "gb-heading");
    const badge = element("span", "gb-badge", step.phase);
    badge.style.background = step.colour;
    heading.append(badge, element("h3", "gb-title", step.title));
    const formula = element("div", "gb-formula");
    for (const line of step.formula) formula.append(math(line));
    const parts = [nav, pipeline, heading, element("p", "gb-sentence", step.sentence), formula];

    const panelIndex = Math.min(this.panels[step.key] || 0, step.panels.length - 1);
    if (step.panels.length > 1) parts.push(this.panelChooser(step, panelIndex));
    parts.push(this.panelNode(step, step.panels[panelIndex]));
    if (step.after) parts.push(afterUpdate(step.after, this.navigate));
    if (step.lessons.length) {
      const lessons = element("div", "gb-lessons");
      lessons.append(element("span", "gb-caption", "The idea, in the course:"));
      for (const lesson of step.lessons) lessons.append(pageLink(lesson, this.navigate));
      parts.push(lessons);
    }
    this.root.replaceChildren(...parts);
    this.root.dataset.step = step.key;
  }

  panelChooser(step, chosen) {
    const box = element("div", "gb-panels");
    box.setAttribute("role", "radiogroup");
    box.append(element("span", "gb-caption", step.panels.length <= 4 ? "Head" : "Weight"));
    step.panels.forEach((panel, i) => {
      const button = element("button", i === chosen ? "gb-pill gb-on" : "gb-pill", panel.label);
      button.setAttribute("role", "radio");
      button.setAttribute("aria-checked", String(i === chosen));
      button.addEventListener("click", () => {
        this.panels[step.key] = i;
        this.draw();
      });
      box.append(button);
    });
    return box;
  }

  panelNode(step, panel) {
    const id = `${step.key}|${panel.label}`;
    const [out, row, col] = this.cells[id] || [0, ...panel.first];
    const target = panel.outputs[Math.min(out, panel.outputs.length - 1)];
    const cell = target.cells ? target.cells[Math.min(row, target.rows.length - 1)][Math.min(col, target.cols.length - 1)] : null;
    const uses = {};
    for (const [label, r, c] of cell ? cell.uses : []) (uses[label] ||= []).push([r, c]);
    const choose = (o, r, c) => {
      this.cells[id] = [o, r, c];
      this.draw();
    };
    const box = element("div", "gb-panel");
    if (panel.inputs.length) {
      box.append(element("div", "gb-section", "In"));
      const row_ = element("div", "gb-grids");
      for (const grid of panel.inputs) row_.append(gridNode(grid, { marks: uses[grid.label] || [] }));
      box.append(row_);
    }
    box.append(element("div", "gb-section", "Out — click a cell to see its arithmetic"));
    const outs = element("div", "gb-grids");
    panel.outputs.forEach((grid, o) => {
      outs.append(gridNode(grid, {
        selected: grid === target ? [row, col] : null,
        onClick: grid.cells ? (r, c) => choose(o, r, c) : null,
      }));
    });
    box.append(outs);
    if (panel.changed) box.append(element("div", "gb-caption", panel.changed));
    if (cell) {
      const heading = element("div", "gb-section");
      heading.append("Arithmetic of one cell (outlined in ", element("span", "gb-gold", "gold"), ", with the cells it reads)");
      const pickers = element("div", "gb-pickers");
      if (panel.outputs.length > 1) {
        pickers.append(select("Tensor", panel.outputs.map((g) => g.title), panel.outputs.indexOf(target),
          (o) => choose(o, row, col)));
      }
      pickers.append(select("Row", target.rows, row, (r) => choose(panel.outputs.indexOf(target), r, col)),
        select("Column", target.cols, col, (c) => choose(panel.outputs.indexOf(target), row, c)));
      const arithmetic = element("div", "gb-arithmetic");
      arithmetic.dataset.cell = `${target.label},${row},${col}`;
      for (const line of cell.lines) arithmetic.append(math(line));
      box.append(heading, pickers, arithmetic);
    }
    if (panel.compared.length) {
      const beside = element("p", "gb-sentence");
      beside.append(element("b", "", "Beside the article."), " The article rounded each intermediate to 3 decimals " +
        "before using it in the next step; Glassbox computes exactly, so some figures differ by a few thousandths.");
      box.append(beside);
      for (const compared of panel.compared) {
        if (compared.sentence) box.append(element("div", "gb-caption", compared.sentence));
        const trio = element("div", "gb-grids");
        // one scale for the three, drawn under the computed grid (whose units it is in)
        compared.grids.forEach((grid, i) => trio.append(gridNode(grid, { scale: i === 0 })));
        box.append(trio);
      }
    }
    return box;
  }
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const navigate = (page) => setTriggerValue("navigate", page);
  loadKatex(data.katex);
  arrowKeys("__glassboxStepKeys", () => current && { root: current.root, step: (offset) => current.go(current.index + offset) });
  let player = mounted.get(parentElement);
  if (!player || !player.root.isConnected) {
    player = new Player(parentElement, data, navigate);
    mounted.set(parentElement, player);
  } else if (player.data.id !== data.id) {
    player.load(data, player.step().key); // other weights (this session's training run): the same step
  } else if (data.step && data.step !== player.sentStep) {
    player.load(data, data.step); // a link to a step followed while the page was open
  }
  current = player;
}
