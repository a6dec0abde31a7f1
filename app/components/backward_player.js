// The explorer's backward steps, played in the page (backward_player.py): ◀ ▶ (or ← →) and the step list draw
// another step's gradients at once where the page has it, else once fetched from the server's route
// (app/served.py), and the next step is fetched ahead while the reader looks at this one. The step
// goes back to the server once drawn (the URL, and its part below: head, zoom, checks, a cell's
// arithmetic); a click on a cell of an exact map sends that cell. A step the server chooses itself
// comes with a new `pick`. (element, select, mapNode, decodeFloats, g: page_kit.js, put before this)

const mounted = new WeakMap(); // parentElement -> {id, pick, url} of what is drawn in it
const choices = new Map(); // id -> {pick, step}: the reader's last step, kept when the element is drawn again
let sent = 0;
let current = null; // {root, step(offset)}: the player ← and → step (page_kit.js: arrowKeys)

// A step as sent (base64) with its maps' numbers decoded, once
function decodedStep(step) {
  for (const grid of step.grids) if (!grid.v) grid.v = decodeFloats(grid.values, grid.bytes);
  return step;
}

// Steps the page fetched itself, the last few (a step's maps are at most 160 × 256 block means each)
const fetchedSteps = new Map(); // "id/index" -> step
const pending = new Map(); // "id/index" -> its fetch under way
function fetchStep(id, url, index) {
  const name = `${id}/${index}`;
  if (fetchedSteps.has(name)) return Promise.resolve(fetchedSteps.get(name));
  if (!pending.has(name)) {
    pending.set(name, fetch(`${url}/${index}`, { cache: "no-store" }).then(async (answer) => {
      if (!answer.ok) throw new Error(`step ${index}: ${answer.status}`);
      const step = decodedStep(await answer.json());
      if (fetchedSteps.size >= 8) fetchedSteps.delete(fetchedSteps.keys().next().value);
      fetchedSteps.set(name, step);
      return step;
    }).finally(() => pending.delete(name)));
  }
  return pending.get(name);
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const previous = mounted.get(parentElement);
  if (previous && previous.id === data.id && previous.pick === data.pick) { // its own choice, echoed
    previous.url = data.url; // a new trace of the same numbers: fetched from it
    return;
  }
  const sentStep = decodedStep(data.step);
  const kept = choices.get(data.id);
  let chosen = kept && kept.pick === data.pick ? kept.step : data.chosen;
  const here = { id: data.id, pick: data.pick, url: data.url };
  mounted.set(parentElement, here);
  const marks = new Map(); // step index -> {name, row, col}: the cell last clicked in it
  const have = (i) => (i === sentStep.index ? sentStep : fetchedSteps.get(`${data.id}/${i}`));
  const root = element("div", "gb-backward");
  parentElement.querySelector(".gb-backward")?.remove();
  parentElement.appendChild(root);

  // The chosen step drawn: at once where the page has it, else once fetched; resolves to whether it
  // was drawn (false: the page could not fetch it)
  function show() {
    if (have(chosen)) {
      draw();
      return Promise.resolve(true);
    }
    if (!here.url) return Promise.resolve(false);
    const wanted = chosen;
    return fetching(root, String(wanted), () => fetchStep(data.id, here.url, wanted), () => {
      if (wanted === chosen && mounted.get(parentElement) === here) draw();
    });
  }

  // The step sent back once drawn (a rerun drawn meanwhile would hold up the page's own drawing),
  // with the element's id and pick (the server ignores a step sent for an element it has replaced);
  // then the next one fetched ahead, so that Next ▶ draws at once
  function send(drawn) {
    sent += 1; // each choice a new value: the same step chosen again, after the server's, still goes back
    const message = { step: chosen, id: data.id, pick: data.pick, sent };
    setStateValue("chosen", drawn ? message : { ...message, unfetched: true });
    if (drawn) ahead();
  }

  function ahead() {
    const next = chosen + 1;
    if (here.url && next < data.titles.length && !have(next)) fetchStep(data.id, here.url, next).catch(() => {});
  }

  function choose(index) {
    index = Math.max(0, Math.min(data.titles.length - 1, index));
    if (index === chosen) return; // ← at the first step, → at the last
    chosen = index;
    choices.set(data.id, { pick: data.pick, step: chosen });
    const wanted = chosen;
    show().then((drawn) => { // unless another step was chosen meanwhile, or the element replaced
      if (wanted === chosen && mounted.get(parentElement) === here) send(drawn);
    });
  }

  function draw() {
    const step = have(chosen);
    const controls = element("div", "gb-controls");
    const back = element("button", "gb-button", "◀ Previous");
    const next = element("button", "gb-button gb-primary", "Next ▶");
    back.type = next.type = "button";
    back.disabled = chosen === 0;
    next.disabled = chosen === data.titles.length - 1;
    back.addEventListener("click", () => choose(chosen - 1));
    next.addEventListener("click", () => choose(chosen + 1));
    const list = select("Backward step", data.titles, chosen, (i) => choose(i));
    list.classList.add("gb-step-list");
    controls.append(back, list, next);
    const sentence = element("p", "gb-sentence");
    sentence.append(element("b", "", `${step.title}.`), ` ${step.sentence}`);
    const parts = [controls, sentence];
    for (const name of step.missing) parts.push(element("div", "gb-caption", `${name}: not on this loss's path (no gradient).`));
    const room = parentElement.clientWidth || 900;
    const mark = marks.get(chosen);
    for (const grid of step.grids) {
      const marked = mark && mark.name === grid.name ? [mark.row - grid.r0, mark.col - grid.c0] : null;
      const map = mapNode({ title: grid.title, name: grid.label, values: grid.v, rows: grid.rows, cols: grid.cols,
        zmin: -grid.zmax, zmax: grid.zmax, palette: data.palette, rowTitle: grid.row_title, colTitle: grid.col_title,
        width: Math.min(room, 1200), mark: marked, minRow: Math.min(18, 400 / grid.rows.length),
        onPick: grid.cell ? (r, c) => pick(grid, r, c) : undefined, hint: "click: its arithmetic below" });
      map.dataset.name = grid.name; // what a test clicks
      parts.push(map, element("div", "gb-caption", grid.size));
    }
    root.replaceChildren(...parts);
    root.dataset.step = String(chosen); // what a test or benchmark waits on
  }

  // A cell of an exact map clicked: outlined here, and sent for the server to write its arithmetic
  function pick(grid, r, c) {
    const cell = { name: grid.name, row: grid.r0 + r, col: grid.c0 + c };
    marks.set(chosen, cell);
    draw();
    sent += 1;
    setStateValue("cell", { ...cell, step: chosen, id: data.id, pick: data.pick, sent });
  }

  current = { root, step: (offset) => choose(chosen + offset) };
  arrowKeys("__glassboxBackwardKeys", () => current);
  show().then((drawn) => {
    if (mounted.get(parentElement) !== here) return;
    if (drawn) ahead();
    else send(false);
  });
}
