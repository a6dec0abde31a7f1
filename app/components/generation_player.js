// The playground's last generation, played in the page: the server sends every step once (the
// playground computes and formats every figure); choosing a step, by its chip or its button, redraws
// here at once, with no message to the server. This tab's sessionStorage keeps the step of the
// generation shown, for reruns and returns. The explorer link goes back as a trigger, followed by
// the server so the session stays (a new tab opens its address).
// (element, math, loadKatex and pairedBars: page_kit.js, which page_kit.py puts before this script)

const STORE = "glassbox:generation";

function remembered(id) {
  try {
    const kept = JSON.parse(sessionStorage.getItem(STORE));
    return kept && kept.id === id ? kept : null; // a new generation (or a new path) opens where the server says
  } catch {
    return null;
  }
}

function remember(id, path, step) {
  try {
    sessionStorage.setItem(STORE, JSON.stringify({ id, path, step }));
  } catch {
    // storage refused: a rerun opens where the server says
  }
}

function chipText(token) {
  return token.replace(/ /g, "\u00a0").replace(/\n/g, "↵");
}

function kvSection(kv) {
  const box = element("div", "gb-kv");
  const sentence = element("p");
  sentence.append(element("b", "", "KV cache"), ` ${kv.sentence}`);
  box.append(sentence);
  for (const latex of kv.latex || []) box.append(math(latex));
  if (kv.columns) {
    const table = element("table");
    const head = element("tr");
    for (const column of kv.columns) head.append(element("th", "", column));
    table.append(head);
    for (const row of kv.rows) {
      const line = element("tr");
      for (const cell of row) line.append(element("td", "", cell));
      table.append(line);
    }
    box.append(table);
  }
  if (kv.measured) box.append(element("div", "gb-caption", kv.measured));
  return box;
}

const COLUMN = 74; // px per new token in the tree drawing
const ROW = 34;
const LABEL = 170; // the paths' labels, left of the first column

// Each path in drawing order: a path under the one it leaves, after that one's earlier children
function drawingOrder(paths) {
  const children = paths.map(() => []);
  const roots = [];
  paths.forEach((p, i) => (p.parent === null || p.parent === undefined ? roots : children[p.parent]).push(i));
  const order = [];
  const visit = (i) => {
    order.push(i);
    children[i].forEach(visit);
  };
  roots.forEach(visit);
  return order;
}

// The tree: a row per path, its own tokens from where it leaves its parent (the shared prefix is the
// parent's row), an elbow from the parent's token before it; `onChoose(path, step)` on a click
function treeDrawing(tree, chosen, onChoose) {
  const box = element("div", "gb-tree");
  const order = drawingOrder(tree.paths);
  const n = Math.max(...tree.paths.map((p) => p.steps.length));
  const width = LABEL + (n + 1) * COLUMN;
  const inner = element("div", "gb-tree-inner");
  inner.style.width = `${width}px`;
  inner.style.height = `${order.length * ROW + 4}px`;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(order.length * ROW + 4));
  svg.classList.add("gb-tree-lines");
  inner.append(svg);
  const rowOf = new Map(order.map((path, row) => [path, row]));
  const centre = (row) => row * ROW + ROW / 2;
  const prompt = element("div", "gb-tree-node gb-tree-prompt", "prompt");
  prompt.style.left = `${LABEL}px`;
  prompt.style.top = `${centre(rowOf.get(order[0])) - 12}px`;
  prompt.title = tree.prompt;
  inner.append(prompt);
  order.forEach((index, row) => {
    const path = tree.paths[index];
    const label = element("div", "gb-tree-label");
    label.append(element("b", "", path.label), element("span", "", ` ${path.how}`));
    label.style.top = `${centre(row) - 15}px`;
    label.title = `${path.label}: ${path.how}`;
    label.classList.toggle("gb-chosen", index === chosen.path);
    label.addEventListener("click", () => onChoose(index, path.from < path.steps.length ? path.from : 0));
    inner.append(label);
    if (path.parent !== null && path.parent !== undefined) {
      const parentRow = rowOf.get(path.parent);
      const x = LABEL + path.from * COLUMN + COLUMN / 2; // the parent's token before the parting (or the prompt)
      const line = document.createElementNS("http://www.w3.org/2000/svg", "path");
      line.setAttribute("d", `M ${x} ${centre(parentRow) + 12} V ${centre(row)} H ${x + COLUMN / 2 - 2}`);
      svg.append(line);
    }
    path.steps.forEach((step, i) => {
      if (i < path.from) return; // the parent's row draws the shared tokens
      const node = element("button", "gb-tree-node", chipText(step.token));
      node.type = "button";
      node.style.left = `${LABEL + (i + 1) * COLUMN}px`;
      node.style.top = `${centre(row) - 12}px`;
      node.style.background = `hsl(${Math.round(120 * step.p)},70%,82%)`;
      node.title = `${path.label}, position ${step.position}: “${step.label}” p = ${step.p.toFixed(3)}${step.forced ? " (forced)" : ""}`;
      node.classList.toggle("gb-forced", step.forced);
      node.classList.toggle("gb-chosen", index === chosen.path && i === chosen.step);
      node.dataset.path = String(index);
      node.dataset.step = String(i);
      node.addEventListener("click", () => onChoose(index, i));
      inner.append(node);
    });
  });
  box.append(inner);
  return box;
}

// The sampler's alternatives at a step, each with a Force button (`onForce(tokenId)`)
function alternativesSection(step, onForce) {
  const box = element("div", "gb-alternatives");
  box.append(element("div", "gb-chart-title", `Alternatives at position ${step.position}`));
  const table = element("table");
  const head = element("tr");
  for (const column of ["token", "sampled from", "model", ""]) head.append(element("th", "", column));
  table.append(head);
  for (const a of step.alternatives) {
    const line = element("tr");
    line.append(element("td", "gb-word-cell", a.label), element("td", "", probabilityLabel(a.p)), element("td", "", probabilityLabel(a.p_model)));
    const cell = element("td");
    if (a.label === step.labels[step.bold]) cell.append(element("span", "gb-caption", step.forced ? "forced" : "drawn"));
    else if (onForce) {
      const force = element("button", "gb-force", "Force");
      force.type = "button";
      force.title = `Put ${a.label} here and draw the rest again (same settings and seed)`;
      force.addEventListener("click", () => onForce(a.token_id));
      cell.append(force);
    }
    line.append(cell);
    table.append(line);
  }
  box.append(table);
  box.append(element("div", "gb-caption", "sampled from: after temperature, top-k and top-p; model: the softmax of the logits"));
  return box;
}

// The logit lens at a step: after each block, the probability of its token and the most likely one there
function lensSection(step) {
  const lens = step.lens;
  const box = element("div", "gb-lens");
  box.append(element("div", "gb-chart-title", `Logit lens for position ${step.position}: how early “${step.label}” was chosen (read at position ${step.position - 1}, which predicts it)`));
  const table = element("table");
  const head = element("tr");
  for (const column of ["residual stream", `p(“${step.label}”)`, "most likely there"]) head.append(element("th", "", column));
  table.append(head);
  const largest = Math.max(...lens.p, 1e-12);
  lens.labels.forEach((label, j) => {
    const line = element("tr");
    const cell = element("td", "gb-lens-p");
    const bar = element("span", "gb-bar");
    bar.style.width = `${(60 * lens.p[j]) / largest}px`;
    bar.style.background = "#2f9e44";
    cell.append(bar, element("span", "gb-number", ` ${probabilityLabel(lens.p[j])}`));
    line.append(element("td", "", label), cell, element("td", lens.top[j] === step.label ? "gb-word-cell gb-target" : "gb-word-cell", lens.top[j]));
    table.append(line);
  });
  box.append(table);
  const last = lens.labels[lens.labels.length - 1];
  const said =
    lens.committed === null
      ? "Even the model's own output does not rank it first: the sampler drew a less likely token."
      : lens.committed === last
        ? "It becomes the most likely token only at the model's own output."
        : `It is the most likely token from ${lens.committed} on.`;
  box.append(element("div", "gb-caption", `The final norm and the head applied to the stream at each point. ${said}`));
  return box;
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const tree = data.tree;
  const pathSteps = (p) => (tree ? tree.paths[p].steps : data.steps);
  const kept = remembered(data.id);
  const start = kept || (tree ? { path: tree.path, step: tree.step } : { path: 0, step: 0 });
  let path = tree && Number.isInteger(start.path) && start.path >= 0 && start.path < tree.paths.length ? start.path : tree ? tree.path : 0;
  let step = Number.isInteger(start.step) ? Math.min(Math.max(start.step, 0), pathSteps(path).length - 1) : 0;
  const root = element("div", "gb-generation");
  parentElement.querySelector(".gb-generation")?.remove();
  parentElement.appendChild(root);
  loadKatex(data.katex);

  const heading = element("div");
  if (data.seq2seq) {
    const source = element("div", "gb-prompt");
    source.append("Source: ", element("span", "", data.prompt));
    heading.append(source, element("div", "gb-prompt", "Target:"));
  } else heading.append(element("div", "gb-prompt", data.prompt));
  const drawing = element("div");
  const chips = element("div", "gb-chips");
  const buttons = element("div", "gb-steps");
  buttons.setAttribute("role", "group");
  buttons.setAttribute("aria-label", "Step");
  const shown = element("div");
  root.append(drawing, heading, chips, buttons, shown);

  function drawPath() {
    chips.replaceChildren();
    buttons.replaceChildren();
    pathSteps(path).forEach((s, i) => {
      const chip = element("button", "gb-chip", chipText(s.token));
      chip.type = "button";
      chip.title = `step ${i + 1}: p = ${s.p.toFixed(3)}${s.forced ? " (forced)" : ""}`;
      chip.style.background = `hsl(${Math.round(120 * s.p)},70%,82%)`; // green when drawn with a high p, red when low
      chip.classList.toggle("gb-forced", Boolean(s.forced));
      chip.addEventListener("click", () => choose(path, i));
      chips.append(chip);
      const button = element("button", "gb-step", `${i + 1}: ${s.label}`);
      button.type = "button";
      button.addEventListener("click", () => choose(path, i));
      buttons.append(button);
    });
  }

  function choose(p, i) {
    const newPath = p !== path;
    path = p;
    step = i;
    remember(data.id, path, step);
    if (newPath) drawPath();
    draw();
  }

  function exploreLink(text, href, value) {
    const link = element("a", "gb-explore", text);
    link.href = href;
    link.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return; // a new tab: the browser's
      event.preventDefault();
      setTriggerValue("explore", value); // the server follows it, within this session
    });
    return link;
  }

  function draw() {
    const s = pathSteps(path)[step];
    if (tree && tree.paths.length > 1) {
      const caption = "Every path: a row each, drawn from where it parts from the path above (the line); a forced token is underlined. Click a token.";
      drawing.replaceChildren(element("div", "gb-caption", caption), treeDrawing(tree, { path, step }, choose));
    }
    else if (tree && !tree.static) drawing.replaceChildren(element("div", "gb-caption", "One path so far: Force an alternative below, or sample again with another seed, to branch it."));
    for (const group of [chips, buttons]) {
      [...group.children].forEach((node, i) => {
        node.classList.toggle("gb-chosen", i === step);
        node.setAttribute("aria-pressed", String(i === step));
      });
    }
    const columns = element("div", "gb-step-columns");
    const left = element("div");
    const chart = pairedBars({
      title: s.title, labels: s.labels, bold: s.bold, format: probabilityLabel,
      series: [{ name: "model (softmax of the logits)", colour: "#9db4d0", values: s.before },
               { name: "sampled from (after the settings)", colour: "#d9480f", values: s.after }],
      axis: "probability (bar length; each value written at its end) · candidate next token",
    });
    left.append(chart, element("div", "gb-caption", s.entropy), exploreLink("Open this step's full trace in the explorer", s.href, step));
    if (tree) {
      const p = tree.paths[path];
      const query = new URLSearchParams({ ...p.explore, pos: String(s.position) });
      left.append(element("br"), exploreLink(`Open ${p.label} in the explorer at this token (position ${s.position})`, `explore?${query}`, { path, step }));
    }
    columns.append(left, kvSection(s.kv));
    const parts = [columns];
    if (tree) {
      const more = element("div", "gb-step-columns");
      more.append(
        alternativesSection(s, tree.static ? null : (tokenId) => setTriggerValue("branch", { path, step, token_id: tokenId })),
        lensSection(s),
      );
      parts.push(more);
    }
    shown.replaceChildren(...parts);
    root.dataset.step = String(step); // what a test or benchmark waits on
    root.dataset.path = String(path);
    root.dataset.paths = String(tree ? tree.paths.length : 1);
  }

  drawPath();
  draw();
}
