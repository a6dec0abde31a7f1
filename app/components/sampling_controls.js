// The playground's sampling settings and the next-token distribution they give, computed and drawn
// in the page: moving a slider redraws at once, with no round trip to the server. The server sends
// the logits once per prompt (float64, most likely first); `distributions` is the engine's
// (model/engine/sampling.py) written again step for step, and a test holds them equal (1e-12).
// When a slider is let go, the settings go back to the server (for Generate and the URL).
// (element and pairedBars: page_kit.js, which page_kit.py puts before this script)

// (before, after) for logits sorted most likely first: the model's softmax, and what is sampled from
// after temperature, then top-k, then top-p, renormalised (one-hot on the first at temperature 0).
export function distributions(logits, { temperature, top_k, top_p }) {
  const n = logits.length;
  const max = logits[0];
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(logits[i] - max);
  const before = new Float64Array(n);
  for (let i = 0; i < n; i++) before[i] = Math.exp(logits[i] - max) / sum;
  const after = new Float64Array(n);
  if (temperature === 0) {
    after[0] = 1;
    return { before, after };
  }
  // softmax(log_softmax(logits) / T): the log-softmax has its maximum subtracted first
  const logSum = Math.log(sum);
  const top = (logits[0] - max - logSum) / temperature;
  let sum2 = 0;
  const probs = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    probs[i] = Math.exp((logits[i] - max - logSum) / temperature - top);
    sum2 += probs[i];
  }
  for (let i = 0; i < n; i++) probs[i] /= sum2;
  let keep = top_k ? Math.min(top_k, n) : n;
  if (top_p < 1) {
    let head = 0;
    for (let i = 0; i < keep; i++) head += probs[i];
    let cumulative = 0;
    let count = 0;
    for (let i = 0; i < keep; i++) {
      const p = probs[i] / head;
      cumulative += p;
      if (cumulative - p < top_p) count++; // the mass of the tokens ranked above it
    }
    keep = Math.max(1, count);
  }
  let kept = 0;
  for (let i = 0; i < keep; i++) kept += probs[i];
  for (let i = 0; i < keep; i++) after[i] = probs[i] / kept;
  return { before, after };
}

export function decodeFloat64(base64) {
  return new Float64Array(base64Bytes(base64).buffer);
}

const SLIDERS = [
  ["temperature", "Temperature", 0.05, 2.0, 0.05, "Divides the logits: below 1 sharpens the distribution, above 1 flattens it."],
  ["top_k", "top-k (0 = off)", 0, null, 1, "Keep only the k most likely tokens, then renormalise."],
  ["top_p", "top-p", 0.01, 1.0, 0.01, "Keep the smallest set of most likely tokens whose probability adds up to p, then renormalise."],
];

const mounted = new WeakMap(); // parentElement -> the logits and the redraw of what is on screen
// The settings the reader last set in this page, and every setting this page has shown. The server
// learns settings from here, so where it sends one the page has shown before, it is stale (a rerun
// already under way when a slider moved, or a remount) and the page's win; one the page never
// showed is new (a link's settings, a limit the server applied) and the server's win.
let pageSettings = null;
const shown = new Set();
const settingsKey = (s) => JSON.stringify([Number(s.temperature), Number(s.top_k), Number(s.top_p), Boolean(s.greedy)]);

export default function (component) {
  const { data, parentElement, setStateValue, setTriggerValue } = component;
  const previous = mounted.get(parentElement);
  const server = settingsKey(data.settings);
  const page = pageSettings && settingsKey(pageSettings);
  const stale = page !== null && server !== page && shown.has(server);
  if (previous && previous.sent === data.logits && previous.drawnId === data.drawn && (server === page || stale)) {
    // the server's rerun after a slider was let go: the page already shows these settings (or newer
    // ones, mid-gesture); rebuilding would take the focus from the slider being moved. Where the
    // server's are older, send the page's again (once for each).
    if (stale && previous.resent !== page) {
      previous.resent = page;
      setStateValue("settings", { ...pageSettings });
    }
    return;
  }
  const logits = decodeFloat64(data.logits);
  const settings = { ...(stale ? pageSettings : data.settings) };
  if (stale) setStateValue("settings", { ...pageSettings });
  pageSettings = { ...settings };
  shown.add(settingsKey(settings));
  const root = element("div", "gb-sampling");
  const controls = element("div", "gb-controls");
  const chart = element("div", "gb-chart");
  root.append(controls, chart);
  // a rebuild while a slider is in use (a rerun bringing new settings) keeps the focus on it
  const focused = parentElement.querySelector(".gb-sampling :focus")?.dataset.setting;
  parentElement.querySelector(".gb-sampling")?.remove(); // ours only: the CSS is a sibling
  parentElement.appendChild(root);

  const inputs = {};
  for (const [key, name, min, max, step, help] of SLIDERS) {
    const box = element("label", "gb-slider");
    box.title = help;
    const head = element("span", "gb-slider-head");
    const value = element("span", "gb-value");
    head.append(element("span", "", name), value);
    const input = element("input");
    Object.assign(input, { type: "range", min, max: max ?? data.top_k_max, step, value: settings[key] });
    input.dataset.setting = key;
    box.append(head, input);
    controls.append(box);
    inputs[key] = { input, value };
  }
  const greedyBox = element("label", "gb-greedy");
  greedyBox.title = "Always take the most likely token (temperature 0).";
  const greedy = element("input");
  Object.assign(greedy, { type: "checkbox", checked: settings.greedy });
  greedy.dataset.setting = "greedy";
  greedyBox.append(greedy, element("span", "", "Greedy"));
  controls.append(greedyBox);
  // Generate (or Fill) sends the settings it is drawn with: what is sampled is what the chart shows,
  // whatever became of a slider's own message to the server
  const action = element("button", "gb-action", data.action);
  action.type = "button";
  if (data.blocked) {  // no room for a new token: the button says why instead of sending a run that fails
    action.disabled = true;
    action.title = data.blocked;
  }
  action.addEventListener("click", () => {
    read();
    setTriggerValue("action", { ...settings });
  });
  controls.append(action);

  function read() {
    settings.temperature = Number(inputs.temperature.input.value);
    settings.top_k = Number(inputs.top_k.input.value);
    settings.top_p = Number(inputs.top_p.input.value);
    settings.greedy = greedy.checked;
    pageSettings = { ...settings };
    shown.add(settingsKey(settings));
  }

  function draw() {
    inputs.temperature.input.disabled = settings.greedy;
    inputs.temperature.value.textContent = settings.temperature.toFixed(2);
    inputs.top_k.value.textContent = String(settings.top_k);
    inputs.top_p.value.textContent = settings.top_p.toFixed(2);
    const { before, after } = distributions(logits, {
      temperature: settings.greedy ? 0 : settings.temperature, top_k: settings.top_k, top_p: settings.top_p,
    });
    let drawable = 0;
    for (let i = 0; i < after.length; i++) drawable += after[i] > 0;
    const shown = data.labels.length;
    chart.replaceChildren(pairedBars({
      title: `${data.title}: ${drawable} of ${after.length} tokens can be drawn`,
      labels: data.labels, bold: data.ids.indexOf(data.drawn), format: probabilityLabel,
      series: [{ name: "model (softmax of the logits)", colour: "#9db4d0", values: before.subarray(0, shown) },
               { name: "sampled from (after the settings)", colour: "#d9480f", values: after.subarray(0, shown) }],
      axis: "probability (bar length; each value written at its end)",
    }));
    chart.dataset.drawn = JSON.stringify({ ...settings, drawable }); // what a test or benchmark waits on
  }

  mounted.set(parentElement, { sent: data.logits, drawnId: data.drawn, settings });
  controls.addEventListener("input", () => { read(); draw(); });
  controls.addEventListener("change", () => { read(); setStateValue("settings", { ...settings }); });
  draw();
  if (focused) controls.querySelector(`[data-setting="${focused}"]`)?.focus();
}
