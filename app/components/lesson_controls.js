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

const KINDS = { saturation };
const mounted = new WeakMap(); // parentElement -> what it was sent: a rerun with the same data keeps the learner's value

export default function (component) {
  const { data, parentElement } = component;
  const sent = JSON.stringify(data);
  if (mounted.get(parentElement) === sent && parentElement.querySelector(".gb-lesson")) return;
  mounted.set(parentElement, sent);
  const root = element("div", `gb-lesson gb-lesson-${data.kind}`);
  parentElement.querySelector(".gb-lesson")?.remove(); // ours only: the CSS is a sibling
  parentElement.appendChild(root);
  KINDS[data.kind](root, data);
}
