// The playground's last generation, played in the page: the server sends every step once (the
// playground computes and formats every figure); choosing a step, by its chip or its button, redraws
// here at once, with no message to the server. This tab's sessionStorage keeps the step of the
// generation shown, for reruns and returns. The explorer link goes back as a trigger, followed by
// the server so the session stays (a new tab opens its address).
// (element, math, loadKatex and pairedBars: page_kit.js, which page_kit.py puts before this script)

const STORE = "glassbox:generation";

function rememberedStep(id) {
  try {
    const kept = JSON.parse(sessionStorage.getItem(STORE));
    return kept && kept.id === id ? kept.step : 0; // a new generation opens on its first step
  } catch {
    return 0;
  }
}

function remember(id, step) {
  try {
    sessionStorage.setItem(STORE, JSON.stringify({ id, step }));
  } catch {
    // storage refused: a rerun opens the first step
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

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const kept = Number(rememberedStep(data.id));
  let step = Number.isInteger(kept) ? Math.min(Math.max(kept, 0), data.steps.length - 1) : 0;
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
  const chips = element("div", "gb-chips");
  const buttons = element("div", "gb-steps");
  buttons.setAttribute("role", "group");
  buttons.setAttribute("aria-label", "Step");
  const shown = element("div");
  root.append(heading, chips, buttons, shown);
  data.steps.forEach((s, i) => {
    const chip = element("button", "gb-chip", chipText(s.token));
    chip.type = "button";
    chip.title = `step ${i + 1}: p = ${s.p.toFixed(3)}`;
    chip.style.background = `hsl(${Math.round(120 * s.p)},70%,82%)`; // green when drawn with a high p, red when low
    chip.addEventListener("click", () => choose(i));
    chips.append(chip);
    const button = element("button", "gb-step", `${i + 1}: ${s.label}`);
    button.type = "button";
    button.addEventListener("click", () => choose(i));
    buttons.append(button);
  });

  function choose(i) {
    step = i;
    remember(data.id, step);
    draw();
  }

  function draw() {
    const s = data.steps[step];
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
    const explore = element("a", "gb-explore", "Open this step's full trace in the explorer");
    explore.href = s.href;
    explore.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return; // a new tab: the browser's
      event.preventDefault();
      setTriggerValue("explore", step); // the server follows it, within this session
    });
    left.append(chart, element("div", "gb-caption", s.entropy), explore);
    columns.append(left, kvSection(s.kv));
    shown.replaceChildren(columns);
    root.dataset.step = String(step); // what a test or benchmark waits on
  }

  draw();
}
