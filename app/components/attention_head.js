// One block's heads, played in the page: the server sends every head's scores, pattern, queries and
// keys once per block (attention_head.py); choosing a head, a query or a key redraws the maps, the
// dot product written out (KaTeX) and where the query looks, at once. The choice goes back to the
// server (for the URL and its own charts); a choice the server makes itself comes with a new `pick`.
// (element, math, loadKatex and select: page_kit.js, which page_kit.py puts before this script)

const mounted = new WeakMap(); // parentElement -> {id, pick} of what is drawn in it
// id -> {pick, chosen}: the reader's last choice for what was sent, kept when the element is drawn
// again (a return to the view); the server's own choices come with a new pick and win
const choices = new Map();
let sent = 0;

const signed = (v) => (v >= 0 ? g(v, 3) : `(${g(v, 3)})`);

// numpy's float64 sum of a contiguous array (pairwise, eight accumulators), so the figure is the server's
export function pairwiseSum(a, start = 0, n = a.length) {
  if (n < 8) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += a[start + i];
    return sum;
  }
  if (n <= 128) {
    const r = [];
    for (let j = 0; j < 8; j++) r.push(a[start + j]);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += a[start + i + j];
    let sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) sum += a[start + i];
    return sum;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return pairwiseSum(a, start, half) + pairwiseSum(a, start + half, n - half);
}

// Whether query `i` sees key `j`: the model's mask (hook_scores_masked is −∞ where it does not)
export function sees(block, i, j) {
  return (!block.causal || j <= i) && (block.window === null || i - j < block.window);
}

// The score of (query, key) written out, as app/explore/attention.py's server-drawn version writes it
export function pair(block, head, query, key) {
  const d = block.d_head;
  const q = Float64Array.from(head.qs.subarray(query * d, (query + 1) * d));
  const k = Float64Array.from(head.ks.subarray(key * d, (key + 1) * d));
  const products = q.map((v, i) => v * k[i]);
  const dot = pairwiseSum(products);
  const uncapped = dot * block.scale;
  const score = block.softcap === null ? uncapped : block.softcap * Math.tanh(uncapped / block.softcap);
  return { q, k, products, dot, uncapped, score };
}

export function pairLatex(block, query, key, p) {
  const shown = Math.min(p.q.length, 5);
  const terms = [];
  for (let i = 0; i < shown; i++) terms.push(`${signed(p.q[i])}\\cdot${signed(p.k[i])}`);
  const more = p.q.length > shown ? `\\dots\\ (${p.q.length - shown}\\text{ more terms})\\ ` : "";
  const lines = [`q_{${query}}\\cdot k_{${key}} = ${terms.join(" + ")}`, `${more ? "+ " + more : ""}= ${g(p.dot)}`,
    `q_{${query}}\\cdot k_{${key}} \\times ${g(block.scale, 4)} = ${g(p.dot)} \\times ${g(block.scale, 4)} = ${g(p.uncapped)}`];
  if (block.softcap !== null) {
    lines.push(`\\text{score} = ${g(block.softcap)}\\tanh\\left(\\frac{${g(p.uncapped)}}{${g(block.softcap)}}\\right) = ${g(p.score)}`);
  }
  return lines;
}

// What the model's mask leaves of a head's scores: each, or −∞ where the query does not see the key
export function maskedScores(block, scores, out = new Float64Array(scores.length)) {
  const T = block.labels.length;
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) out[i * T + j] = sees(block, i, j) ? scores[i * T + j] : -Infinity;
  return out;
}

// A head's scores and pattern computed here from its sent queries and keys, for prompts too long to
// send them (attention_head.py: `computed`): score = q·k × scale (soft-capped where the model caps),
// then the softmax of each row over the keys the mask lets through, all in float64
export function computeHead(block, head) {
  const T = block.labels.length;
  const d = block.d_head;
  const { qs, ks } = head;
  const s = new Float64Array(T * T);
  const p = new Float64Array(T * T);
  for (let i = 0; i < T; i++) {
    const qi = i * d;
    let top = -Infinity;
    for (let j = 0; j < T; j++) {
      const kj = j * d;
      let dot = 0;
      for (let c = 0; c < d; c++) dot += qs[qi + c] * ks[kj + c];
      let score = dot * block.scale;
      if (block.softcap !== null) score = block.softcap * Math.tanh(score / block.softcap);
      s[i * T + j] = score;
      if (sees(block, i, j) && score > top) top = score;
    }
    let sum = 0;
    for (let j = 0; j < T; j++) {
      const e = sees(block, i, j) ? Math.exp(s[i * T + j] - top) : 0;
      p[i * T + j] = e;
      sum += e;
    }
    for (let j = 0; j < T; j++) p[i * T + j] /= sum;
  }
  let zmax = 0; // the colour scale's end, as attention_head.py's abs_max of sent scores
  for (const v of s) if (Number.isFinite(v)) zmax = Math.max(zmax, Math.abs(v));
  return { s, p, zmax: zmax || 1 };
}

// A head's scores and pattern: as sent, or computed (once, for the last few heads looked at)
const computed = new Map(); // "id/block/head" -> {s, p}
function headMaps(data, block, index) {
  const head = block.heads[index];
  if (head.s) return { s: head.s, p: head.p, zmax: head.zmax };
  const name = `${data.id}/${block.layer}/${index}`;
  if (!computed.has(name)) {
    if (computed.size >= 4) computed.delete(computed.keys().next().value); // ~4 MB a head at 512 tokens
    computed.set(name, computeHead(block, head));
  }
  return computed.get(name);
}

export function pairLines(block, head, query, key) {
  return pairLatex(block, query, key, pair(block, head, query, key));
}

// Where the query looks: the query on the left, a line to each key it may see, as thick and dark
// as its weight (under 1% left out where over 40 keys, but for the five strongest: a nearly even row
// has none over 1%), the weights written on the right; as attention.py's lines()
export function lineKeys(block, pattern, query) {
  const T = block.labels.length;
  const last = block.causal ? query + 1 : T; // an encoder's query sees the keys after it too
  const order = Array.from({ length: last }, (_, j) => j);
  order.sort((a, b) => pattern[query * T + b] - pattern[query * T + a] || a - b); // strongest first, ties by position
  const strongest = new Set(order.slice(0, 5));
  const keys = [];
  for (let j = 0; j < last; j++) if (pattern[query * T + j] >= 0.01 || last <= 40 || strongest.has(j)) keys.push(j);
  return keys;
}

// The positions written beside the lines (null: a gap), as attention.py's line_rows: every one from
// the first drawn to the last, or past 40 the query and the keys alone
export function lineRows(keys, query) {
  const ends = [...new Set([...keys, query])].sort((a, b) => a - b);
  if (ends[ends.length - 1] - ends[0] < 40) return Array.from({ length: ends[ends.length - 1] - ends[0] + 1 }, (_, i) => ends[0] + i);
  const rows = [];
  ends.forEach((i, n) => {
    if (n && i - ends[n - 1] > 1) rows.push(null);
    rows.push(i);
  });
  return rows;
}

function linesNode(block, pattern, query) {
  const labels = block.labels;
  const T = labels.length;
  const weights = pattern.subarray(query * T, (query + 1) * T);
  const keys = lineKeys(block, pattern, query);
  const rows = lineRows(keys, query);
  const rowOf = new Map(rows.map((i, r) => [i, r]));
  let top = 0;
  for (const j of keys) top = Math.max(top, weights[j]);
  top = top || 1;
  const row = 20;
  const height = rows.length * row + 10;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", "700");
  svg.setAttribute("height", String(height));
  const y = (i) => rowOf.get(i) * row + row / 2 + 5;
  const text = (x, r, content, anchor, strong, grey) => {
    const node = document.createElementNS(ns, "text");
    Object.entries({ x, y: r * row + row / 2 + 5, "text-anchor": anchor, "dominant-baseline": "middle", "font-size": 12,
      fill: grey ? "#aaa" : "#000", "font-weight": strong ? 700 : 400 }).forEach(([k, v]) => node.setAttribute(k, v));
    node.textContent = content;
    svg.append(node);
  };
  for (const j of keys) {
    const line = document.createElementNS(ns, "line");
    Object.entries({ x1: 230, y1: y(query), x2: 430, y2: y(j), stroke: "#1f6feb", "stroke-width": 1 + 9 * weights[j] / top,
      opacity: 0.1 + 0.9 * weights[j] / top }).forEach(([k, v]) => line.setAttribute(k, v));
    const hover = document.createElementNS(ns, "title");
    hover.textContent = `${labels[query]} → ${labels[j]}: ${weights[j].toFixed(4)}`;
    line.append(hover);
    svg.append(line);
  }
  rows.forEach((i, r) => {
    if (i === null) { // positions left out between two written ones
      text(222, r, "⋮", "end", false, true);
      text(438, r, "⋮", "start", false, true);
      return;
    }
    text(222, r, labels[i], "end", i === query, i !== query);
    const seen = keys.includes(i);
    text(438, r, seen ? `${labels[i]}  ${pattern[query * T + i].toFixed(3)}` : labels[i], "start", false, !seen);
  });
  const box = element("div", "gb-lines");
  box.append(element("div", "gb-map-title",
    `Where “${labels[query]}” looks: row ${query} of the pattern, as lines (query on the left, keys and weights on the right)`), svg);
  return box;
}

// A block's heads as sent (base64) decoded into arrays, once
function decoded(block) {
  for (const head of block.heads) {
    if (head.qs || head.p) continue;
    if (block.patterns_only) { // given patterns alone (gb.widgets.attention_patterns): no scores, queries or keys
      head.p = decodeFloats(head.pattern, block.bytes);
      continue;
    }
    if (!block.computed) {
      head.s = decodeFloats(head.scores, block.bytes);
      head.p = decodeFloats(head.pattern, block.bytes);
    }
    head.qs = decodeFloats(head.q, block.bytes);
    head.ks = decodeFloats(head.k, block.bytes);
  }
  return block;
}

// Blocks the page fetched itself (`data.fetch`: app/served.py's route), the last few: 3 MB each at 512 tokens
const fetchedBlocks = new Map(); // "id/layer" -> block
async function fetchBlock(id, url, layer) {
  const name = `${id}/${layer}`;
  if (!fetchedBlocks.has(name)) {
    const answer = await fetch(`${url}/${layer}`, { cache: "no-store" });
    if (!answer.ok) throw new Error(`block ${layer}: ${answer.status}`);
    if (fetchedBlocks.size >= 4) fetchedBlocks.delete(fetchedBlocks.keys().next().value);
    fetchedBlocks.set(name, decoded(await answer.json()));
  }
  return fetchedBlocks.get(name);
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const previous = mounted.get(parentElement);
  if (previous && previous.id === data.id && previous.pick === data.pick) { // its own choice, echoed
    previous.url = data.fetch && data.fetch.url; // a new trace of the same numbers: fetched from it
    return;
  }
  loadKatex(data.katex);
  data.blocks.forEach(decoded);
  const kept = choices.get(data.id);
  const chosen = { ...(kept && kept.pick === data.pick ? kept.chosen : data.chosen) };
  const here = { id: data.id, pick: data.pick, url: data.fetch && data.fetch.url };
  mounted.set(parentElement, here);
  const have = (layer) => data.blocks.find((b) => b.layer === layer) || fetchedBlocks.get(`${data.id}/${layer}`);
  const root = element("div", "gb-attention");
  parentElement.querySelector(".gb-attention")?.remove();
  parentElement.appendChild(root);
  const T = data.blocks[0].labels.length;
  const masked = new Float64Array(T * T);
  const blockNames = data.fetch ? data.fetch.blocks : data.blocks.map((b) => b.block);

  // The chosen block drawn: at once where the page has it, else once fetched; resolves to whether
  // it was drawn (false: the page could not fetch it, its trace gone from the server)
  function show() {
    if (have(chosen.block)) {
      draw();
      return Promise.resolve(true);
    }
    return fetching(root, String(chosen.block), () => fetchBlock(data.id, here.url, chosen.block), (block) => {
      if (block.layer === chosen.block && mounted.get(parentElement) === here) draw();
    });
  }

  // The choice sent back once drawn (a rerun drawn by the browser meanwhile would hold up the
  // page's own drawing); a block the page could not fetch is the server's to send
  function send(drawn) {
    sent += 1; // each choice a new value: the same choice made again, after the server's, still goes back
    setStateValue("chosen", drawn ? { ...chosen, sent } : { ...chosen, sent, unfetched: true });
  }

  function choose(change) {
    Object.assign(chosen, change);
    choices.set(data.id, { pick: data.pick, chosen: { ...chosen } });
    show().then(send);
  }

  function draw() {
    const block = have(chosen.block) || data.blocks[0];
    const head = block.heads[chosen.head];
    const { s, p: pattern, zmax } = block.patterns_only ? { p: head.p } : headMaps(data, block, chosen.head);
    const { query, key } = chosen;
    const controls = element("div", "gb-controls");
    if (blockNames.length > 1) { // every block sent, or fetched when chosen: the block is chosen here too
      const index = data.fetch ? block.layer : data.blocks.indexOf(block);
      controls.append(select("Block", blockNames, index, (i) => choose({ block: data.fetch ? i : data.blocks[i].layer })));
    }
    const pills = element("div", "gb-heads");
    pills.setAttribute("role", "group");
    pills.setAttribute("aria-label", "Head");
    block.heads.forEach((h, i) => {
      const pill = element("button", i === chosen.head ? "gb-head gb-chosen" : "gb-head", h.label);
      pill.type = "button";
      pill.setAttribute("aria-pressed", String(i === chosen.head));
      pill.addEventListener("click", () => choose({ head: i }));
      pills.append(pill);
    });
    controls.append(pills, select("Query position", block.labels, query, (i) => choose({ query: i })),
      select("Key position", block.labels, key, (i) => choose({ key: i })));
    const heading = element("h3", "gb-head-title", `${block.block[0].toUpperCase()}${block.block.slice(1)}, ${head.label}`);
    const room = parentElement.clientWidth || 900; // three maps side by side, as wide as the page lets them
    if (block.patterns_only) { // the pattern given, and where the chosen query looks
      const map = mapNode({ width: Math.min(room, 520), rows: block.labels, cols: block.labels, mark: [query, key], rowTitle: "query",
        colTitle: "key", onPick: (r, c) => choose({ query: r, key: c }), zmin: 0, zmax: 1, palette: block.palettes.sequential,
        title: "Pattern (as given)", name: `${head.label}[query, key]`, values: head.p });
      const weight = element("div", "gb-caption", `“${block.labels[query]}” → “${block.labels[key]}”: weight ${g(head.p[query * T + key])}. Patterns given without queries or keys: no scores to show.`);
      root.replaceChildren(controls, heading, map, weight, linesNode(block, head.p, query));
      root.dataset.chosen = `${chosen.head},${query},${key}`;
      root.dataset.block = String(block.layer);
      return;
    }
    maskedScores(block, s, masked);
    const maps = element("div", "gb-maps");
    const common = { width: Math.max(160, Math.floor((room - 24) / 3)), rows: block.labels, cols: block.labels, mark: [query, key], rowTitle: "query", colTitle: "key",
      onPick: (r, c) => choose({ query: r, key: c }) };
    const diverging = { zmin: -zmax, zmax, palette: block.palettes.diverging };
    const at = `[${chosen.head}]`;
    const maskTitle = block.window !== null // as attention.py's mask_title
      ? `After ${block.causal ? "the causal mask and " : ""}the ${block.window}-position window (blank: −∞)`
      : block.causal ? "After the causal mask (blank: −∞)" : "After the mask: none here, every key is seen";
    maps.append(
      mapNode({ ...common, ...diverging, title: "Scores q·k × scale", name: `${block.prefix}hook_scores${at}`, values: s }),
      mapNode({ ...common, ...diverging, title: maskTitle, name: `${block.prefix}hook_scores_masked${at}`, values: masked }),
      mapNode({ ...common, zmin: 0, zmax: 1, palette: block.palettes.sequential, title: "Pattern: softmax of each row",
        name: `${block.prefix}hook_pattern${at}`, values: pattern }));
    const sentence = element("p", "gb-sentence");
    sentence.append(element("b", "", `“${block.labels[query]}” asks, “${block.labels[key]}” answers.`),
      ` The score is the dot product of the query and key vectors times ${g(block.scale, 4)}${block.scale_note}`
      + head.how.map((h) => "; " + h).join("") + ".");
    const arithmetic = element("div", "gb-arithmetic");
    arithmetic.dataset.pair = `${chosen.head},${query},${key}`; // what a test or benchmark waits on
    for (const line of pairLines(block, head, query, key)) arithmetic.append(math(line));
    const weight = pattern[query * T + key];
    const note = !sees(block, query, key)
      ? (block.causal && key > query ? `Key ${key} is after query ${query}: the mask sets it to −∞ and its weight is exactly 0.`
        : `Key ${key} is outside query ${query}'s window of ${block.window} positions: the mask sets it to −∞ and its weight is exactly 0.`)
      : `After the mask and the softmax over row ${query}: weight ${g(weight)}.`;
    const source = block.computed // a long prompt: the maps are the page's own product of the q and k sent
      ? `The maps are computed in this page from the ${T} queries and keys sent (float64; within 1e-5 of the largest score of the model's own ${block.prefix}hook_scores, and the weights within 1e-5 of hook_pattern's).`
      : `Recorded in ${block.prefix}hook_scores: ${g(s[query * T + key])} (recomputed above in float64).`;
    const caption = element("div", "gb-caption", `${source} ${note}`);
    const dims = Array.from({ length: block.d_head }, (_, i) => String(i));
    const p = pair(block, head, query, key);
    const products = new Float64Array(3 * block.d_head);
    products.set(p.q, 0);
    products.set(p.k, block.d_head);
    products.set(p.products, 2 * block.d_head);
    let largest = 0;
    for (const v of products) largest = Math.max(largest, Math.abs(v));
    const productMap = mapNode({ title: "The dot product, dimension by dimension",
      name: `${block.prefix}${block.q_name}[${chosen.head}, ${query}] · ${block.prefix}${block.k_name}[${head.kv}, ${key}]`,
      values: products, rows: [`q (${block.q_name})`, `k (${block.k_name})`, "q·k per dimension"], cols: dims,
      zmin: -(largest || 1), zmax: largest || 1, palette: block.palettes.diverging, rowTitle: "", colTitle: "d_head", minRow: 14,
      width: room });
    root.replaceChildren(controls, heading, maps, sentence, arithmetic, caption, productMap, linesNode(block, pattern, query));
    root.dataset.chosen = arithmetic.dataset.pair;
    root.dataset.block = String(block.layer); // what a test or benchmark waits on
  }

  show().then((drawn) => drawn || send(false));
}
