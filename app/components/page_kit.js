// What the in-page components share (prepended to each one's script by page_kit.py): elements whose
// text is set as text, never parsed as markup, and LaTeX typeset with Streamlit's own KaTeX.

let katex = null; // Streamlit's own KaTeX module, once loaded
let katexLoading = null;

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text; // every label is text (tokens are the model's): never markup
  return node;
}

// Base64 as bytes: the browser's own decoder where it has one (Chromium 140+: 5 ms for 3 MB), else
// a loop (Uint8Array.from with a function per character took 150 ms for the same)
function base64Bytes(base64) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(base64);
  const text = atob(base64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function loadKatex(path) {
  if (!katexLoading) {
    katexLoading = import(new URL(path, document.baseURI).href).then((module) => {
      katex = module.default;
      for (const node of document.querySelectorAll(".gb-math[data-pending]")) typeset(node);
    });
  }
  return katexLoading;
}

function typeset(node) {
  delete node.dataset.pending;
  katex.render(node.dataset.latex, node, { displayMode: true, throwOnError: false });
}

function math(latex) {
  const node = element("div", "gb-math");
  node.dataset.latex = latex;
  if (katex) typeset(node);
  else {
    node.dataset.pending = "";
    node.textContent = latex; // until KaTeX has loaded
  }
  return node;
}

// A probability as written at its bar's end: three decimals, or where it is under 0.001 (its bar
// too thin to see) its first figures, so that no drawn bar goes without its number
function probabilityLabel(p) {
  return p >= 0.001 ? p.toFixed(3) : p > 0 ? p.toExponential(1) : "0";
}

// Paired horizontal bars, a group per label: `series` is [{name, colour, values}], each value written
// at its bar's end (`format`; "" leaves it to the bar's tooltip); `bold`: the label drawn in bold (or -1).
function pairedBars({ labels, series, title, axis, bold = -1, format = (v) => v.toFixed(3) }) {
  const chart = element("div", "gb-bars");
  if (title) chart.append(element("div", "gb-chart-title", title));
  const legend = element("div", "gb-legend");
  for (const { name, colour } of series) {
    const key = element("span", "gb-key");
    const swatch = element("span", "gb-swatch");
    swatch.style.background = colour;
    key.append(swatch, element("span", "", name));
    legend.append(key);
  }
  let largest = 0;
  for (const { values } of series) for (let i = 0; i < labels.length; i++) largest = Math.max(largest, values[i]);
  const rows = element("div", "gb-bar-rows"); // one grid: the labels' column is as wide as the widest
  labels.forEach((label, i) => {
    const row = element("div", "gb-bar-row");
    row.append(element("span", i === bold ? "gb-word gb-target" : "gb-word", label));
    const bars = element("span", "gb-bar-pair");
    for (const { name, colour, values } of series) {
      const line = element("span", "gb-bar-line");
      const bar = element("span", "gb-bar");
      bar.style.background = colour;
      bar.style.width = `${(100 * values[i]) / (1.18 * largest || 1)}%`;
      bar.title = `${label}, ${name}: ${values[i].toPrecision(6)}`;
      line.append(bar, element("span", "gb-number", format(values[i])));
      bars.append(line);
    }
    row.append(bars);
    rows.append(row);
  });
  chart.append(legend, rows, element("div", "gb-axis", axis));
  return chart;
}

// A labelled list of `options`, `chosen` (an index) selected; `onChange(index)` when another is chosen
function select(label, options, chosen, onChange) {
  const box = element("label", "gb-select");
  box.append(element("span", "", label));
  const input = element("select");
  options.forEach((text, i) => {
    const option = element("option", "", text);
    option.value = String(i);
    input.append(option);
  });
  input.value = String(chosen);
  input.setAttribute("aria-label", label);
  input.addEventListener("change", () => onChange(Number(input.value)));
  box.append(input);
  return box;
}

// ← and → step the player `player()` returns ({root, step(offset)}, or null) while it is on the
// page, unless the reader is typing in a field; one listener per page (`flag`), however often drawn
function arrowKeys(flag, player) {
  if (window[flag]) return;
  window[flag] = true;
  document.addEventListener("keydown", (event) => {
    const current = player();
    if (!current || !current.root.isConnected || event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.target.closest && event.target.closest("input, select, textarea, [contenteditable]")) return;
    if (event.key === "ArrowRight") current.step(1);
    else if (event.key === "ArrowLeft") current.step(-1);
    else return;
    event.preventDefault();
  });
}

// What a page fetched itself (`load()`: a promise), with `root` marked as fetching `what` meanwhile;
// `then(answer)` once it has come. Resolves to whether it came (false: the server's to send).
function fetching(root, what, load, then) {
  root.dataset.fetching = what;
  return load().then(
    (answer) => {
      delete root.dataset.fetching;
      then(answer);
      return true;
    },
    () => {
      delete root.dataset.fetching;
      return false;
    });
}

const FONT = "11px 'Source Sans Pro', sans-serif";

// The numbers as sent: float64 for a float64 model, else float32 (`size`: bytes per number)
export function decodeFloats(base64, size) {
  const bytes = base64Bytes(base64);
  return size === 8 ? new Float64Array(bytes.buffer) : new Float32Array(bytes.buffer);
}

// Python's format(v, ".{p}g"), which the server's pages use for these figures: JavaScript rounds an
// exact tie up (1.125 to 1.13), Python to the even digit (1.12), so ties are found and rounded so
export function g(v, p = 6) {
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  if (v === 0) return Object.is(v, -0) ? "-0" : "0";
  const sign = v < 0 ? "-" : "";
  let [mantissa, exponent] = Math.abs(v).toExponential(p - 1).split("e");
  let digits = mantissa.replace(".", "");
  let e = Number(exponent);
  const [exactMantissa, exactExponent] = Math.abs(v).toExponential(99).split("e"); // 100 digits: exact for a tie
  const exact = exactMantissa.replace(".", "");
  if (exact[p] === "5" && /^0*$/.test(exact.slice(p + 1)) && Number(exact[p - 1]) % 2 === 0) {
    digits = exact.slice(0, p); // a tie whose last kept digit is even: kept as it is
    e = Number(exactExponent);
  }
  const strip = (s) => (s.includes(".") ? s.replace(/\.?0+$/, "") : s);
  if (e < -4 || e >= p) {
    const shown = strip(digits[0] + "." + digits.slice(1));
    return `${sign}${shown}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  const whole = e >= 0 ? digits.slice(0, e + 1).padEnd(e + 1, "0") : "0";
  const fraction = e >= 0 ? digits.slice(e + 1) : "0".repeat(-e - 1) + digits;
  return sign + strip(fraction ? `${whole}.${fraction}` : whole);
}

function colour(palette, t) {
  return palette[Math.max(0, Math.min(255, Math.round(t * 255)))];
}

// A map of `values` (rows × cols) on a canvas, one colour per cell, labels beside it, the exact
// value on hover; `mark`: [row, col] outlined (its row too); `onPick(row, col)` on a click, which
// the hover says (`hint`).
function mapNode({ title, name, values, rows, cols, zmin, zmax, palette, mark, onPick, rowTitle, colTitle, width, minRow = 0,
  hint = "click: this pair" }) {
  const nRows = rows.length;
  const nCols = cols.length;
  const figure = element("figure", "gb-map");
  figure.append(element("div", "gb-map-title", title), element("div", "gb-engine", name));
  const canvas = element("canvas");
  const ctx = canvas.getContext("2d");
  ctx.font = FONT;
  let widest = 0;
  for (const label of rows) widest = Math.max(widest, ctx.measureText(label).width);
  const titled = rowTitle ? 16 : 0; // room for the rows' title, written upwards at the far left
  const left = titled + Math.min(130, Math.ceil(widest) + 10); // row labels beside the map, cut with … past 120 px
  const room = (width - left - 8) / nCols; // under a pixel a cell where a long prompt's map is scaled down
  const cell = Math.min(40, room >= 1 ? Math.floor(room) : Math.max(0.25, room));
  const tall = Math.max(cell, minRow); // a row's height: `minRow` where every row is labelled (the dot product's three)
  let tallest = 0;
  for (const label of cols) tallest = Math.max(tallest, Math.min(80, ctx.measureText(label).width));
  const bottom = Math.ceil(tallest * Math.SQRT1_2) + 16 + (colTitle ? 14 : 0); // the column labels at 45°, their title
  const ratio = window.devicePixelRatio || 1;
  const w = left + cell * nCols + 8;
  const h = tall * nRows + bottom;
  canvas.width = w * ratio;
  canvas.height = h * ratio;
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  ctx.scale(ratio, ratio);
  const pixels = new ImageData(nCols, nRows);
  for (let r = 0; r < nRows; r++) {
    for (let c = 0; c < nCols; c++) {
      const v = values[r * nCols + c];
      const at = 4 * (r * nCols + c);
      if (!Number.isFinite(v)) continue; // −∞ (masked): left blank
      const [red, green, blue] = colour(palette, (v - zmin) / (zmax - zmin || 1));
      pixels.data.set([red, green, blue, 255], at);
    }
  }
  const bitmap = document.createElement("canvas");
  bitmap.width = nCols;
  bitmap.height = nRows;
  bitmap.getContext("2d").putImageData(pixels, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.fillStyle = "#f6f7f9";
  ctx.fillRect(left, 0, cell * nCols, tall * nRows);
  ctx.drawImage(bitmap, left, 0, cell * nCols, tall * nRows);
  ctx.font = FONT;
  ctx.fillStyle = "#31333f";
  const every = Math.ceil(13 / tall); // labels never overlap: every n-th where cells are small
  const everyColumn = Math.ceil(19 / cell); // at 45° a label needs 19 px along the axis to clear the next
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  for (let r = 0; r < nRows; r += every) ctx.fillText(clip(ctx, rows[r], left - 6), left - 4, (r + 0.5) * tall);
  ctx.textAlign = "right";
  for (let c = 0; c < nCols; c += everyColumn) {
    ctx.save();
    ctx.translate(left + (c + 0.5) * cell, nRows * tall + 4);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(clip(ctx, cols[c], 80), 0, 0);
    ctx.restore();
  }
  ctx.fillStyle = "#6b6f7b";
  ctx.textAlign = "center";
  if (colTitle) ctx.fillText(colTitle, left + (cell * nCols) / 2, h - 8);
  if (rowTitle) {
    ctx.save();
    ctx.translate(7, (tall * nRows) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(rowTitle, 0, 0);
    ctx.restore();
  }
  ctx.fillStyle = "#31333f";
  if (cell >= 34 && nRows <= 24) { // the values written in, where they fit, to the map's largest's thousandth
    let largest = 0;
    for (const v of values) if (Number.isFinite(v)) largest = Math.max(largest, Math.abs(v));
    const decimals = Math.max(0, Math.min(3, 2 - Math.floor(Math.log10(largest || 1))));
    ctx.textAlign = "center";
    for (let r = 0; r < nRows; r++) {
      for (let c = 0; c < nCols; c++) {
        const v = values[r * nCols + c];
        if (!Number.isFinite(v)) continue;
        const t = (v - zmin) / (zmax - zmin || 1);
        ctx.fillStyle = Math.abs(t - (zmin < 0 ? 0.5 : 0)) > 0.3 ? "white" : "#31333f";
        // as labels.py's cell_text: an exact 0 as "0", a small negative one rounded to nothing without its sign
        const text = v === 0 ? "0" : v.toFixed(decimals).replace(/^-(0\.?0*)$/, "$1");
        ctx.fillText(text, left + (c + 0.5) * cell, (r + 0.5) * tall);
      }
    }
  }
  if (mark) {
    ctx.strokeStyle = "#1f6feb";
    ctx.lineWidth = 1;
    ctx.strokeRect(left + 0.5, mark[0] * tall + 0.5, cell * nCols - 1, tall - 1);
    ctx.strokeStyle = "#f5b800";
    ctx.lineWidth = 2;
    ctx.strokeRect(left + mark[1] * cell - 1, mark[0] * tall - 1, cell + 2, tall + 2);
  }
  canvas.dataset.geometry = JSON.stringify({ left, cell, tall }); // where each cell is: what a test points at
  const tip = element("div", "gb-tip");
  const box = element("div", "gb-map-box");
  box.append(canvas, tip);
  const where = (event) => {
    const bounds = canvas.getBoundingClientRect();
    const c = Math.floor((event.clientX - bounds.left - left) / cell);
    const r = Math.floor((event.clientY - bounds.top) / tall);
    return r >= 0 && r < nRows && c >= 0 && c < nCols ? [r, c] : null;
  };
  canvas.addEventListener("mousemove", (event) => {
    const at = where(event);
    if (!at) {
      tip.style.display = "none";
      return;
    }
    const v = values[at[0] * nCols + at[1]];
    tip.textContent = `${rowTitle} ${rows[at[0]]} · ${colTitle} ${cols[at[1]]}\n${Number.isFinite(v) ? g(v, 9) : "−∞ (masked)"}`
      + (onPick ? `\n${hint}` : "");
    tip.style.display = "block";
    tip.style.left = `${event.offsetX + 14}px`;
    tip.style.top = `${event.offsetY + 10}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  if (onPick) {
    canvas.classList.add("gb-clickable");
    canvas.addEventListener("click", (event) => {
      const at = where(event);
      if (at) onPick(at[0], at[1]);
    });
  }
  const scale = element("div", "gb-scale");
  scale.style.marginLeft = `${left}px`;
  scale.append(element("span", "", g(zmin, 3)), element("span", "gb-ramp"), element("span", "", g(zmax, 3)));
  scale.children[1].style.background = `linear-gradient(to right, ${[0, 64, 128, 192, 255].map((i) => `rgb(${palette[i].join(",")})`).join(",")})`;
  figure.append(box, scale);
  return figure;
}

function clip(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let shown = text;
  while (shown.length > 1 && ctx.measureText(shown + "…").width > room) shown = shown.slice(0, -1);
  return shown + "…";
}

