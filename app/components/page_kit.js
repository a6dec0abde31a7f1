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
