// A lesson's small math answered in the page: the server sends the lesson's fixed numbers once, and a
// slider redraws at once, with no round trip. Each kind's arithmetic is the engine's written again
// (model/course/*.py), and tests/test_course_in_page.py holds it to the engine's (1e-12).
// (element: page_kit.js, which page_kit.py puts before this script)

// softmax of `scores`, its maximum subtracted first (as torch.softmax)
export function softmax(scores) {
  const max = Math.max(...scores);
  const e = scores.map((s) => Math.exp(s - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

// The Frobenius norm of diag(p) − p·pᵀ for p = softmax(scale · scores): model/course/dot_product_scale.py's jacobian_norm
export function jacobianNorm(scores, scale) {
  const p = softmax(scores.map((s) => scale * s));
  let sum = 0;
  for (let i = 0; i < p.length; i++)
    for (let j = 0; j < p.length; j++) {
      const entry = (i === j ? p[i] : 0) - p[i] * p[j];
      sum += entry * entry;
    }
  return Math.sqrt(sum);
}

// A number as app/components/labels.py's `number` writes it: 0 as "0", never "-0.0000"; a nonzero value
// too small for `digits` decimals as two significant figures (1.1e-10)
export function numberText(value, digits = 4) {
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "∞" : "−∞";
  if (value === 0) return "0";
  const written = value.toFixed(digits);
  if (Number(written) === 0) {
    const [mantissa, exponent] = value.toExponential(1).split("e"); // Python's .2g: 1.1e-10
    return `${mantissa.replace(/\.0$/, "")}e${exponent[0]}${exponent.slice(1).padStart(2, "0")}`;
  }
  return written;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A line chart on a log x axis: `curve` ([x], [y]) as a line, `point` [x, y] as a marker; both axes titled
function logChart({ xs, ys, point, xTitle, yTitle }) {
  const W = 640, H = 300, left = 64, right = 16, top = 12, bottom = 52;
  const [x0, x1] = [Math.log10(xs[0]), Math.log10(xs[xs.length - 1])];
  const yMax = 1.08 * Math.max(...ys, point[1]);
  const X = (x) => left + ((Math.log10(x) - x0) / (x1 - x0)) * (W - left - right);
  const Y = (y) => top + (1 - y / yMax) * (H - top - bottom);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "gb-lesson-chart", role: "img" });
  const grid = svg("g", { class: "gb-grid" });
  for (const tick of [0.1, 0.3, 1, 3, 10, 30].filter((t) => t >= xs[0] && t <= xs[xs.length - 1])) {
    grid.append(svg("line", { x1: X(tick), x2: X(tick), y1: top, y2: H - bottom }));
    grid.append(svg("text", { x: X(tick), y: H - bottom + 16, "text-anchor": "middle" }, String(tick)));
  }
  const step = yMax > 0.5 ? 0.1 : yMax > 0.2 ? 0.05 : 0.02;
  for (let tick = 0; tick <= yMax; tick += step) {
    grid.append(svg("line", { x1: left, x2: W - right, y1: Y(tick), y2: Y(tick) }));
    grid.append(svg("text", { x: left - 6, y: Y(tick) + 4, "text-anchor": "end" }, tick.toFixed(2)));
  }
  chart.append(grid);
  chart.append(svg("text", { x: (left + W - right) / 2, y: H - 10, "text-anchor": "middle", class: "gb-axis-title" }, xTitle));
  chart.append(svg("text", { x: 14, y: (top + H - bottom) / 2, "text-anchor": "middle", class: "gb-axis-title",
                             transform: `rotate(-90 14 ${(top + H - bottom) / 2})` }, yTitle));
  chart.append(svg("polyline", { points: xs.map((x, i) => `${X(x)},${Y(ys[i])}`).join(" "), class: "gb-curve" }));
  const marker = svg("circle", { cx: X(point[0]), cy: Y(point[1]), r: 7, class: "gb-point" });
  marker.append(svg("title", {}, `c = ${point[0]}: ${numberText(point[1], 6)}`));
  chart.append(marker);
  return chart;
}

function slider(label, { min, max, step, value }, format) {
  const box = element("label", "gb-slider");
  const head = element("span", "gb-slider-head");
  const shown = element("span", "gb-value", format(value));
  head.append(element("span", "", label), shown);
  const input = element("input");
  Object.assign(input, { type: "range", min, max, step, value });
  input.setAttribute("aria-label", label);
  box.append(head, input);
  return { box, input, shown };
}

// sqrt-dk: the score multiplier c, the Jacobian's norm along c (the server's curve) and at the chosen c (computed here)
function saturation(root, data) {
  const control = slider(data.label, data.slider, (c) => Number(c).toFixed(2));
  const chart = element("div", "gb-lesson-plot");
  const side = element("div", "gb-lesson-side");
  const body = element("div", "gb-lesson-row");
  body.append(chart, side);
  root.append(control.box, body);
  function draw() {
    const c = Number(control.input.value);
    const norm = jacobianNorm(data.scores, c);
    control.shown.textContent = c.toFixed(2);
    chart.replaceChildren(logChart({ xs: data.scales, ys: data.curve, point: [c, norm], xTitle: data.x_title,
                                     yTitle: data.y_title }));
    const p = softmax(data.scores.map((s) => c * s));
    side.replaceChildren(element("div", "gb-metric-label", "Jacobian norm"),
                         element("div", "gb-metric-value", numberText(norm, 6)),
                         element("div", "gb-caption", `softmax: (${p.map((x) => numberText(x, 4)).join(", ")})`));
    root.dataset.value = String(c);
    root.dataset.drawn = numberText(norm, 6); // what a test or benchmark waits on
  }
  control.input.addEventListener("input", draw);
  draw();
}

// --- attention by hand (model/course/attention_by_hand.py's attend and similarity, written again) ---

function queryVector(angle, length) {
  const radians = (angle * Math.PI) / 180;
  return [length * Math.cos(radians), length * Math.sin(radians)];
}

// Token `position` attending with the query of `angle` (degrees) and `length`: it sees itself and the
// tokens before it (the later ones' scaled scores −∞, weights 0)
export function attend(keys, values, dK, position, angle, length) {
  const query = queryVector(angle, length);
  const scores = keys.map(([x, y]) => x * query[0] + y * query[1]);
  const scaled = scores.map((s, j) => (j > position ? -Infinity : s / Math.sqrt(dK)));
  const seen = softmax(scaled.slice(0, position + 1));
  const weights = scaled.map((_, j) => (j > position ? 0 : seen[j]));
  const output = [0, 1].map((d) => weights.reduce((sum, w, j) => sum + w * values[j][d], 0));
  return { position, query, scores, scaled, weights, output };
}

// q_i·k_j: row i is token i's own query (`queries`: [angle, length] each) against every key
export function similarity(keys, queries) {
  return queries.map(([angle, length]) => {
    const q = queryVector(angle, length);
    return keys.map(([x, y]) => x * q[0] + y * q[1]);
  });
}

// A score or weight as the table writes it: −∞ where masked, else as labels.py's `number`
export function scoreText(value) {
  return value === -Infinity ? "−∞ (masked)" : numberText(value);
}

// A cell's text as labels.py's `cell_text` writes it with two decimals: rounding noise as 0, never "-0.00"
export function cellText(value, largest, negligible) {
  if (value === -Infinity) return "−∞";
  if (Math.abs(value) < negligible * largest) return "0";
  const written = value.toFixed(2);
  return written.startsWith("-") && Number(written) === 0 ? written.slice(1) : written;
}

// Labels at the vectors' tips, none over another, a marker, an arrow's shaft or the plot's edge:
// app/course/attention_by_hand.py's placement before this page drew the plot (a label's box in plot
// units from its text's length, `g`: CHAR, LINE, PAD, MARKER, SHAFT, SHAFT_STEPS, SPAN)
function labelBox(g, x, y, text, position) {
  const [v, h] = position.split(" ");
  const width = g.CHAR * [...text].length + 0.1;
  const left = { right: x + g.PAD, left: x - g.PAD - width, center: x - width / 2 }[h];
  const bottom = { top: y + g.PAD, bottom: y - g.PAD - g.LINE, middle: y - g.LINE / 2 }[v];
  return [left, bottom, left + width, bottom + g.LINE];
}

const overlaps = (a, b) => !(a[2] <= b[0] || a[0] >= b[2] || a[3] <= b[1] || a[1] >= b[3]);
const inside = (g, box) => -g.SPAN <= box[0] && box[2] <= g.SPAN && -g.SPAN <= box[1] && box[3] <= g.SPAN;
const same = (a, b) => a.every((v, i) => v === b[i]);

// Where to write a label at its tip: beyond it, away from the origin, else another side; null where none fits
function outward(g, x, y, text, placed) {
  const vertical = y >= 0 ? ["top", "bottom"] : ["bottom", "top"];
  const horizontal = Math.abs(x) < 0.3 ? ["center"] : x > 0 ? ["right", "left"] : ["left", "right"];
  const sides = [];
  for (const v of vertical) for (const h of horizontal.length > 1 ? [...horizontal, "center"] : horizontal) sides.push(`${v} ${h}`);
  for (const h of x >= 0 ? ["right", "left"] : ["left", "right"]) sides.push(`middle ${h}`);
  const own = [x - g.MARKER, y - g.MARKER, x + g.MARKER, y + g.MARKER];
  for (const position of sides) {
    const box = labelBox(g, x, y, text, position);
    if (inside(g, box) && !placed.some((b) => !same(b, own) && overlaps(box, b))) {
      placed.push(box);
      return position;
    }
  }
  return null;
}

// Where to centre a label that could not sit at its tip: further out, on a leader line; null where nowhere
function leaderSpot(g, x, y, text, placed) {
  const width = g.CHAR * [...text].length + 0.1;
  const away = x !== 0 || y !== 0 ? Math.atan2(y, x) : Math.PI / 2;
  const turns = [...Array(16).keys()].sort((a, b) => Math.min(a, 16 - a) - Math.min(b, 16 - b));
  for (const distance of [0.5, 0.8, 1.1, 1.5])
    for (const turn of turns) {
      const angle = away + (turn * Math.PI) / 8;
      const cx = x + distance * Math.cos(angle), cy = y + distance * Math.sin(angle);
      const box = [cx - width / 2, cy - g.LINE / 2, cx + width / 2, cy + g.LINE / 2];
      if (inside(g, box) && !placed.some((b) => overlaps(box, b))) {
        placed.push(box);
        return [cx, cy];
      }
    }
  return null;
}

// Every point of the plot with its label's place: [{x, y, text, colour, symbol, position | spot | neither}];
// the query and the output first, the keys next, the values last (their labels may be left to the hover)
export function vectorLabels(data, token, result) {
  const g = data.geometry, c = data.colours;
  const points = [{ x: result.query[0], y: result.query[1], text: `q(${token})`, colour: c.query, symbol: "circle" },
                  { x: result.output[0], y: result.output[1], text: "output", colour: c.output, symbol: "square" }];
  data.keys.forEach(([x, y], j) => {
    const visible = j <= result.position;
    points.push({ x, y, text: `k(${data.tokens[j]})` + (visible ? "" : " masked"), colour: visible ? c.key : c.hidden,
                  symbol: "circle" });
  });
  data.values.forEach(([x, y], j) => points.push({ x, y, text: `v(${data.tokens[j]})`, colour: c.value, symbol: "diamond" }));
  const placed = points.map(({ x, y }) => [x - g.MARKER, y - g.MARKER, x + g.MARKER, y + g.MARKER]);
  const tips = [result.query, result.output, ...data.keys];
  for (const [x, y] of tips)
    for (const t of g.SHAFT_STEPS) placed.push([t * x - g.SHAFT, t * y - g.SHAFT, t * x + g.SHAFT, t * y + g.SHAFT]);
  for (const point of points) {
    point.position = outward(g, point.x, point.y, point.text, placed);
    if (!point.position && point.symbol !== "diamond") point.spot = leaderSpot(g, point.x, point.y, point.text, placed);
  }
  return points;
}

// The labels of `token`'s plot at a query's `angle` and `length`, and the arrows' tips (what a test checks)
export function attentionLabels(data, token, angle, length) {
  const result = attend(data.keys, data.values, data.d_k, data.tokens.indexOf(token), angle, length);
  return { points: vectorLabels(data, token, result), arrows: [result.query, result.output, ...data.keys] };
}

function vectorPlot(data, token, result) {
  const g = data.geometry, c = data.colours;
  const size = 400, left = 56, top = 34, W = left + size + 14, H = top + size + 44;
  const unit = size / (2 * g.SPAN);
  const X = (x) => left + (x + g.SPAN) * unit, Y = (y) => top + (g.SPAN - y) * unit;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "gb-lesson-chart gb-vectors", role: "img" });
  const defs = svg("defs");
  for (const colour of new Set(Object.values(c))) {
    const head = svg("marker", { id: `gb-head-${colour.slice(1)}`, viewBox: "0 0 10 10", refX: 9, refY: 5,
                                 markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse" });
    head.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: colour }));
    defs.append(head);
  }
  chart.append(defs);
  chart.append(svg("text", { x: left, y: 18, class: "gb-chart-heading" }, `Keys, values, the query of “${token}” and its output`));
  const grid = svg("g", { class: "gb-grid" });
  for (let tick = -3; tick <= 3; tick++) {
    grid.append(svg("line", { x1: X(tick), x2: X(tick), y1: top, y2: top + size, class: tick === 0 ? "gb-zero" : "" }));
    grid.append(svg("line", { x1: left, x2: left + size, y1: Y(tick), y2: Y(tick), class: tick === 0 ? "gb-zero" : "" }));
    grid.append(svg("text", { x: X(tick), y: top + size + 15, "text-anchor": "middle" }, String(tick)));
    grid.append(svg("text", { x: left - 6, y: Y(tick) + 4, "text-anchor": "end" }, String(tick)));
  }
  chart.append(grid);
  chart.append(svg("text", { x: left + size / 2, y: H - 8, "text-anchor": "middle", class: "gb-axis-title" }, "first coordinate"));
  chart.append(svg("text", { x: 14, y: top + size / 2, "text-anchor": "middle", class: "gb-axis-title",
                             transform: `rotate(-90 14 ${top + size / 2})` }, "second coordinate"));
  const arrow = ([x, y], colour, width) => chart.append(svg("line", {
    x1: X(0), y1: Y(0), x2: X(x), y2: Y(y), stroke: colour, "stroke-width": width, "marker-end": `url(#gb-head-${colour.slice(1)})` }));
  data.keys.forEach((key, j) => arrow(key, j <= result.position ? c.key : c.hidden, 1.5));
  arrow(result.query, c.query, 3);
  arrow(result.output, c.output, 3);
  for (const p of vectorLabels(data, token, result)) {
    const hover = `${p.text}: (${p.x.toFixed(3)}, ${p.y.toFixed(3)})`;
    const r = p.symbol === "circle" ? 3 : 5;
    const mark = p.symbol === "diamond"
      ? svg("path", { d: `M ${X(p.x)} ${Y(p.y) - r} l ${r} ${r} l ${-r} ${r} l ${-r} ${-r} z`, fill: p.colour })
      : p.symbol === "square" ? svg("rect", { x: X(p.x) - r, y: Y(p.y) - r, width: 2 * r, height: 2 * r, fill: p.colour })
        : svg("circle", { cx: X(p.x), cy: Y(p.y), r, fill: p.colour });
    mark.append(svg("title", {}, hover));
    chart.append(mark);
    let centre = null;
    if (p.position) {
      const box = labelBox(g, p.x, p.y, p.text, p.position);
      centre = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2];
    } else if (p.spot) {
      centre = p.spot;
      chart.append(svg("line", { x1: X(p.x), y1: Y(p.y), x2: X(p.spot[0]), y2: Y(p.spot[1]), stroke: p.colour, "stroke-width": 1 }));
    }
    if (centre) chart.append(svg("text", { x: X(centre[0]), y: Y(centre[1]), "text-anchor": "middle",
                                           "dominant-baseline": "central", fill: p.colour, class: "gb-vector-label" }, p.text));
  }
  return chart;
}

function table(head, rows) {
  const node = element("table", "gb-table");
  const top = element("tr");
  for (const cell of head) top.append(element("th", "", cell));
  node.append(top);
  for (const cells of rows) {
    const row = element("tr");
    cells.forEach((cell, i) => row.append(element(i ? "td" : "th", "", cell)));
    node.append(row);
  }
  return node;
}

function similarityGrid(data, matrix, chosen) {
  const largest = Math.max(...matrix.flat().map(Math.abs));
  const grid = element("table", "gb-table gb-similarity");
  const head = element("tr");
  head.append(element("th", "", "query of ↓ · key of →"));
  for (const t of data.tokens) head.append(element("th", "", `k(${t})`));
  grid.append(head);
  matrix.forEach((row, i) => {
    const line = element("tr", i === chosen ? "gb-chosen" : "");
    line.append(element("th", "", `q(${data.tokens[i]})`));
    row.forEach((v, j) => {
      const cell = element("td", "", cellText(v, largest, data.negligible));
      const colour = data.palette[Math.round(((v + largest) / (2 * largest || 1)) * (data.palette.length - 1))];
      cell.style.background = colour;
      const [r, g, b] = [1, 3, 5].map((k) => parseInt(colour.slice(k, k + 2), 16));
      cell.style.color = 0.299 * r + 0.587 * g + 0.114 * b < 140 ? "#ffffff" : "#1b1d24";
      cell.title = `q(${data.tokens[i]}) · k(${data.tokens[j]}) = ${v.toFixed(4)}`;
      line.append(cell);
    });
    grid.append(line);
  });
  return grid;
}

// attention: a token, its query's angle and length (each token keeps its own), the course's walk-through
const attentionState = new WeakMap(); // parentElement -> {token, queries}: kept across the server's reruns
function attention(root, data, parentElement) {
  const state = attentionState.get(parentElement)
    ?? { token: data.walkthrough.token, queries: Object.fromEntries(data.tokens.map((t) => [t, [...data.queries[t]]])) };
  attentionState.set(parentElement, state);
  const controls = element("div", "gb-lesson-controls");
  const tokens = element("div", "gb-radios");
  tokens.setAttribute("role", "radiogroup");
  tokens.setAttribute("aria-label", "Token");
  tokens.append(element("span", "gb-radios-label", "Token"));
  const radios = data.tokens.map((t) => {
    const box = element("label", "gb-radio");
    const input = element("input");
    Object.assign(input, { type: "radio", name: "gb-attention-token", value: t });
    box.append(input, element("span", "", t));
    tokens.append(box);
    input.addEventListener("change", () => { state.token = t; setSliders(); draw(); });
    return input;
  });
  const angle = slider("Angle of its query (degrees)", data.angle, (v) => String(v));
  const length = slider("Length of its query", data.length, (v) => Number(v).toFixed(1));
  const preset = element("button", "gb-action", "The course's walk-through");
  preset.type = "button";
  preset.title = `“${data.walkthrough.token}” with the query that gives the course's scores`;
  controls.append(tokens, angle.box, length.box, preset);
  const plot = element("div", "gb-lesson-plot");
  const side = element("div", "gb-lesson-side");
  const body = element("div", "gb-lesson-row gb-attention-row");
  body.append(plot, side);
  const similar = element("div", "gb-lesson-similarity");
  root.append(controls, body, similar);

  function setSliders() {
    const [a, l] = state.queries[state.token];
    angle.input.value = a;
    length.input.value = l;
    radios.forEach((r) => (r.checked = r.value === state.token));
  }
  function draw() {
    const token = state.token, position = data.tokens.indexOf(token);
    const [a, l] = state.queries[token];
    angle.shown.textContent = String(a);
    length.shown.textContent = l.toFixed(1);
    const result = attend(data.keys, data.values, data.d_k, position, a, l);
    plot.replaceChildren(vectorPlot(data, token, result),
      element("div", "gb-caption", data.caption));
    const rows = data.tokens.map((t, j) => [t, scoreText(result.scores[j]), scoreText(result.scaled[j]),
                                            numberText(result.weights[j])]);
    const terms = data.tokens.slice(0, position + 1).map((t, j) => `${numberText(result.weights[j])}·v(${t})`).join(" + ");
    const later = data.tokens.slice(position + 1).map((t) => `“${t}”`).join(" and ");
    const verbs = data.tokens.length - position - 1 === 1 ? "comes later and is" : "come later and are";
    const output = element("div", "gb-output", `output = ${terms} = `);
    output.append(element("b", "", `(${numberText(result.output[0])}, ${numberText(result.output[1])})`));
    side.replaceChildren(element("div", "gb-side-title", `What “${token}” computes`),
      table(["token", "q·k", `q·k / √${data.d_k}`, "weight (softmax)"], rows), output,
      element("div", "gb-caption", position === 0
        ? `“${token}” comes first: it can see only itself, so its weight is 1 whatever its query.`
        : `“${token}” sees itself and the tokens before it` + (later ? `; ${later} ${verbs} masked: score −∞, weight 0.` : ".")));
    const matrix = similarity(data.keys, data.tokens.map((t) => state.queries[t]));
    similar.replaceChildren(element("div", "gb-chart-title", "Similarity qᵢ·kⱼ (the row outlined is the token chosen above)"),
                            similarityGrid(data, matrix, position));
    root.dataset.drawn = JSON.stringify({ token, angle: a, length: l, weights: rows.map((r) => r[3]) });
  }
  angle.input.addEventListener("input", () => { state.queries[state.token][0] = Number(angle.input.value); draw(); });
  length.input.addEventListener("input", () => { state.queries[state.token][1] = Number(length.input.value); draw(); });
  preset.addEventListener("click", () => {
    state.token = data.walkthrough.token;
    state.queries[state.token] = [data.walkthrough.angle, data.walkthrough.length];
    setSliders();
    draw();
  });
  setSliders();
  draw();
}

// --- positions: the sinusoidal table and its rotations (model/course/positional_signals.py, written again) ---

// Python's format(v, ".{p}g"): p significant figures, trailing zeros dropped, exponent from 1e-4 and 10^p
export function gFormat(value, p) {
  if (value === 0) return "0";
  const [mantissa, exponent] = value.toExponential(p - 1).split("e");
  const e = Number(exponent);
  const strip = (t) => (t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t);
  if (e < -4 || e >= p) return `${strip(mantissa)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return strip(value.toFixed(Math.max(0, p - 1 - e)));
}

// Python's format(v, ".{p}e"): the exponent with its sign and at least two digits
export function eFormat(value, p) {
  const [mantissa, exponent] = value.toExponential(p).split("e");
  const e = Number(exponent);
  return `${mantissa}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
}

const omega = (base, i, d) => base ** (-(2 * i) / d); // ω_i = 1/base^(2i/d)

// PE(pos, 2i) = sin(pos·ω_i), PE(pos, 2i + 1) = cos(pos·ω_i): `positions` rows of d
export function sinusoidalTable(base, positions, d) {
  const table = [];
  for (let pos = 0; pos < positions; pos++) {
    const row = new Float64Array(d);
    for (let i = 0; i < d / 2; i++) {
      row[2 * i] = Math.sin(pos * omega(base, i, d));
      row[2 * i + 1] = Math.cos(pos * omega(base, i, d));
    }
    table.push(row);
  }
  return table;
}

// max over pos < positions and every dimension of |PE(pos + k) − M_k·PE(pos)|, M_k turning each pair by k·ω_i
export function largestShiftError(base, k, d, positions) {
  const table = sinusoidalTable(base, positions + k, d);
  let largest = 0;
  for (let i = 0; i < d / 2; i++) {
    const angle = k * omega(base, i, d), c = Math.cos(angle), s = Math.sin(angle);
    for (let pos = 0; pos < positions; pos++) {
      const [sin, cos] = [table[pos][2 * i], table[pos][2 * i + 1]];
      largest = Math.max(largest, Math.abs(table[pos + k][2 * i] - (c * sin + s * cos)),
                         Math.abs(table[pos + k][2 * i + 1] - (-s * sin + c * cos)));
    }
  }
  return largest;
}

// The pairs drawn on dials (the fastest, one an eighth of the way, the slowest), each pair's ω, and
// where position k's arrow points: (cos kω, sin kω)
export function dials(base, d, k) {
  return [0, d / 8, d / 2 - 1].map((pair) => {
    const w = omega(base, pair, d);
    return { pair, omega: w, tip: [Math.cos(k * w), Math.sin(k * w)],
             title: [`pair ${pair} (dimensions ${2 * pair}, ${2 * pair + 1}): ω = ${gFormat(w, 3)}`,
                     `k·ω = ${gFormat(k * w, 3)} rad = ${gFormat((k * w * 180) / Math.PI, 3)}°`] };
  });
}

function heatmapCanvas(data, table, d) {
  const box = element("div", "gb-heatmap");
  const cell = Math.max(4, Math.floor(640 / d)), rowHeight = 12;
  const canvas = element("canvas");
  canvas.width = cell * d;
  canvas.height = rowHeight * table.length;
  const context = canvas.getContext("2d");
  table.forEach((row, pos) => row.forEach((v, j) => {
    context.fillStyle = data.palette[Math.round(((v + 1) / 2) * (data.palette.length - 1))];
    context.fillRect(j * cell, pos * rowHeight, cell - (d <= 64 ? 1 : 0), rowHeight - 1);
  }));
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", `PE(pos, ·), positions 0–${table.length - 1}, d = ${d}`);
  canvas.addEventListener("mousemove", (event) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.floor(((event.clientX - r.left) / r.width) * d), pos = Math.floor(((event.clientY - r.top) / r.height) * table.length);
    if (table[pos] && j >= 0 && j < d) canvas.title = `position ${pos}, ${j}: ${table[pos][j].toFixed(4)}`;
  });
  const plot = element("div", "gb-heatmap-plot");
  const rows = element("div", "gb-heatmap-rows");
  for (const pos of [0, 8, 16, 24, table.length - 1]) {
    const tick = element("span", "", String(pos));
    tick.style.top = `${((pos + 0.5) / table.length) * 100}%`;
    rows.append(tick);
  }
  plot.append(element("div", "gb-axis-side", "position"), rows, canvas);
  box.append(element("div", "gb-chart-title", `PE(pos, ·), positions 0–${table.length - 1}, d = ${d}`), plot,
             element("div", "gb-axis", "dimension (even: sin, odd: cos); colour: the value, from −1 (blue) to 1 (red)"));
  return box;
}

function dialsPlot(data, d, k) {
  const row = element("div", "gb-dials");
  for (const dial of dials(data.base, d, k)) {
    const R = 80, C = 115, W = 250;
    const X = (x) => C + R * x, Y = (y) => C - R * y;
    const chart = svg("svg", { viewBox: `0 0 ${W} ${W + 10}`, class: "gb-lesson-chart gb-dial", role: "img" });
    chart.append(svg("circle", { cx: C, cy: C, r: R, class: "gb-ring" }));
    for (let pos = 0; pos < data.positions; pos++) {
      const dot = svg("circle", { cx: X(Math.cos(pos * dial.omega)), cy: Y(Math.sin(pos * dial.omega)), r: 3, class: "gb-trail" });
      dot.append(svg("title", {}, `position ${pos}`));
      chart.append(dot);
    }
    for (const [[x, y], colour, width] of [[[1, 0], data.colours.first, 2], [dial.tip, data.colours.later, 3]])
      chart.append(svg("line", { x1: C, y1: C, x2: X(x), y2: Y(y), stroke: colour, "stroke-width": width,
                                 "marker-end": `url(#gb-dial-${colour.slice(1)})` }));
    const defs = svg("defs");
    for (const colour of [data.colours.first, data.colours.later]) {
      const head = svg("marker", { id: `gb-dial-${colour.slice(1)}`, viewBox: "0 0 10 10", refX: 9, refY: 5,
                                   markerWidth: 4, markerHeight: 4, orient: "auto-start-reverse" });
      head.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: colour }));
      defs.append(head);
    }
    chart.append(defs);
    chart.append(svg("text", { x: X(1.22 * dial.tip[0]), y: Y(1.22 * dial.tip[1]), "text-anchor": "middle",
                               "dominant-baseline": "central", fill: data.colours.later }, `pos ${k}`));
    chart.append(svg("text", { x: X(1.12), y: Y(-0.28), "text-anchor": "middle", fill: data.colours.first }, "pos 0"));
    chart.append(svg("text", { x: C, y: W + 4, "text-anchor": "middle", class: "gb-axis-title" }, "x: cos(pos·ω), y: sin(pos·ω)"));
    const panel = element("div", "gb-dial-panel");
    panel.append(element("div", "gb-dial-title", dial.title[0]), element("div", "gb-dial-title", dial.title[1]), chart);
    row.append(panel);
  }
  return row;
}

// positions: d (the table's width) and the offset k; the table, the pairs turning on dials, and the rotation's error
function positions(root, data) {
  const state = { d: data.d.value, k: data.k.value };
  const top = element("div", "gb-lesson-controls gb-two");
  top.append(select("d (dimensions)", data.d.options.map(String), data.d.options.indexOf(state.d), (i) => {
    state.d = data.d.options[i];
    draw();
  }));
  const table = element("div");
  const between = element("p", "gb-between", data.between);
  const offset = slider("Offset k", data.k, (v) => String(v));
  offset.input.value = state.k;
  const turning = element("div");
  root.append(top, table, between, offset.box, turning);
  function draw() {
    const { d, k } = state;
    offset.shown.textContent = String(k);
    table.replaceChildren(heatmapCanvas(data, sinusoidalTable(data.base, data.positions, d), d));
    const error = largestShiftError(data.base, k, d, data.positions);
    const metric = element("div", "gb-metric");
    metric.append(element("div", "gb-metric-label", `largest |PE(pos + ${k}) − M_${k}·PE(pos)| over positions 0–${data.positions - 1}`),
                  element("div", "gb-metric-value", eFormat(error, 2)));
    const title = element("div", "gb-chart-title", `Each pair turns by ω per position: grey dots at positions 0–${data.positions - 1}`);
    turning.replaceChildren(title, dialsPlot(data, d, k), metric, element("div", "gb-caption", data.caption));
    root.dataset.drawn = JSON.stringify({ d, k, error: eFormat(error, 2) });
  }
  offset.input.addEventListener("input", () => { state.k = Number(offset.input.value); draw(); });
  draw();
}

const KINDS = { saturation, attention, positions };
const mounted = new WeakMap(); // parentElement -> what it was sent: a rerun with the same data keeps the learner's value

export default function (component) {
  const { data, parentElement } = component;
  const sent = JSON.stringify(data);
  if (mounted.get(parentElement) === sent && parentElement.querySelector(".gb-lesson")) return;
  mounted.set(parentElement, sent);
  const root = element("div", `gb-lesson gb-lesson-${data.kind}`);
  parentElement.querySelector(".gb-lesson")?.remove(); // ours only: the CSS is a sibling
  parentElement.appendChild(root);
  KINDS[data.kind](root, data, parentElement);
}
