"""The widgets: an in-page component's script (app/components/*.js, after page_kit.js, as the app
sends it) and its payload (built by the app's own builders), in one HTML fragment. The fragment's
script imports the component from a Blob URL and calls its default export as Streamlit would, with
a ``component`` object whose messages to the server go nowhere (there is no server). KaTeX is
Streamlit's own module, put in the fragment the same way; its MathML is shown (no fonts needed)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import torch

from glassbox.model.engine import GlassboxError

COMPONENTS = Path(__file__).parent.parent / "components"
NOT_IN_A_NOTEBOOK = "In a notebook, generate with model.show_playground(prompt, …): the page cannot call the kernel."


def _script_text(text: str) -> str:
    """A string as a JavaScript literal that cannot end the <script> it is in."""
    return json.dumps(text).replace("<", "\\u003c")


def katex_source() -> str:
    """Streamlit's KaTeX (an ES module with no imports of its own), as the app's pages load it."""
    import streamlit

    (module,) = (Path(streamlit.__file__).parent / "static" / "static" / "js").glob("katex.*.js")
    return module.read_text()


class Widget:
    """One or more of the app's components with their payloads, drawn in a notebook
    (``_repr_html_``) or saved as a page that works without a kernel (``save``). ``payload``: the
    data each component is given, by component (one component: its data)."""

    def __init__(self, parts: list[tuple[str, dict]], title: str = "Glassbox", html: str = ""):
        self.parts, self.title, self.extra_html = parts, title, html

    @property
    def payload(self) -> dict:
        if len(self.parts) == 1:
            return self.parts[0][1]
        return {script.removesuffix(".js"): data for script, data in self.parts}

    def fragment(self) -> str:
        """The HTML a notebook shows: the styles, a box per component, and the script that mounts them."""
        css = (COMPONENTS / "page_kit.css").read_text()
        boxes, mounts = [], []
        for script, data in self.parts:
            box = "gb-" + uuid.uuid4().hex[:12]
            css += (
                "\n" + (COMPONENTS / script.replace(".js", ".css")).read_text()
                if (COMPONENTS / script.replace(".js", ".css")).exists()
                else ""
            )
            code = (COMPONENTS / "page_kit.js").read_text() + "\n" + (COMPONENTS / script).read_text()
            boxes.append(f'<div class="gb-notebook" id="{box}"></div>')
            mounts.append(f"[{_script_text(box)}, {_script_text(code)}, {_script_text(json.dumps(data))}]")
        katex = _script_text(katex_source()) if self.parts else '""'
        return f"""<style>{css}
.gb-notebook {{ font-family: "Source Sans Pro", system-ui, sans-serif; color: #31333f; max-width: 1200px; margin: 8px 0; }}
.gb-notebook .katex-html {{ display: none; }}
.gb-notebook .gb-explore {{ display: none; }}
</style>
{self.extra_html}{"".join(boxes)}
<script>
(async () => {{
  const blob = (text) => URL.createObjectURL(new Blob([text], {{ type: "text/javascript" }}));
  const katex = blob({katex});
  for (const [box, code, data] of [{", ".join(mounts)}]) {{
    const parentElement = document.getElementById(box);
    try {{
      const component = await import(blob(code));
      component.default({{ data: {{ ...JSON.parse(data), katex }}, parentElement,
                          setStateValue: () => {{}}, setTriggerValue: () => {{}} }});
      parentElement.dataset.mounted = "1";
    }} catch (error) {{
      parentElement.textContent = "This Glassbox widget could not draw: " + error;
    }}
  }}
}})();
</script>"""

    def _repr_html_(self) -> str:
        return self.fragment()

    def html(self) -> str:
        """A standalone page: the fragment in a document of its own."""
        return (
            f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{_escape(self.title)}</title></head>\n'
            f'<body style="margin: 16px">\n{self.fragment()}\n</body></html>\n'
        )

    def save(self, path: str | Path) -> Path:
        """Write the standalone page (it needs no kernel, no server and no network)."""
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def prompt_labels(trace) -> list[str]:
    """The explorer's axis labels: position and token as drawn (app/explore/common.py's ``labels``)."""
    from glassbox.model.plot.labels import token_text

    return [f"{i}:{token_text(trace.pieces[t])}" for i, t in enumerate(trace.tokens)]


def attention(trace, block: int = 0, head: int = 0, query: int | None = None, key: int = 0) -> Widget:
    """The explorer's attention head view of a trace: every block where they all fit the page's
    budget (the app's), else ``block`` alone; opening on ``block``, ``head``, ``query`` (default:
    the last position) and ``key``."""
    from glassbox.app.components.attention_head import block_payload, fits
    from glassbox.app.explore.attention_sent import how_notes

    cfg = trace.cfg
    if cfg is None or not cfg.n_layers:
        raise GlassboxError("The attention view needs a trace of a model with blocks, from Model.trace")
    if not 0 <= block < cfg.n_layers or not 0 <= head < cfg.n_heads:
        raise GlassboxError(f"block must be 0 to {cfg.n_layers - 1} and head 0 to {cfg.n_heads - 1}")
    n = len(trace.tokens)
    query = n - 1 if query is None else query
    labels = prompt_labels(trace)
    dtype = trace[f"blocks.{block}.attn.hook_pattern"].dtype
    layers = range(cfg.n_layers) if fits(cfg.n_heads, n, cfg.d_head, dtype, cfg.n_layers) else [block]
    blocks = [block_payload(trace, cfg, b, labels, [how_notes(cfg, b, h) for h in range(cfg.n_heads)]) for b in layers]
    chosen = {"block": block, "head": head, "query": query, "key": key}
    return Widget([("attention_head.js", {"blocks": blocks, "id": uuid.uuid4().hex, "chosen": chosen, "pick": "notebook"})])


def attention_patterns(tokens: list[str], attention, attention_head_names: list[str] | None = None) -> Widget:
    """circuitsvis's ``attention.attention_patterns``, same arguments: ``tokens`` (the sequence's
    tokens as text) and ``attention`` (heads × destination × source, weights in [0, 1]), drawn by the
    app's attention head view with the patterns alone (no queries or keys, so no scores)."""
    from glassbox.app.components.attention_head import floats
    from glassbox.model.plot.heatmap import COLOURSCALES, scale_colours

    pattern = torch.as_tensor(np.asarray(attention, dtype=np.float64))
    if pattern.ndim == 2:
        pattern = pattern[None]
    if pattern.ndim != 3 or pattern.shape[1:] != (len(tokens), len(tokens)):
        raise GlassboxError(
            f"attention must be heads × {len(tokens)} × {len(tokens)} for {len(tokens)} tokens, not {tuple(pattern.shape)}"
        )
    names = attention_head_names or [f"head {h + 1}" for h in range(pattern.shape[0])]
    if len(names) != pattern.shape[0]:
        raise GlassboxError(f"{len(names)} head names for {pattern.shape[0]} heads")
    block = {
        "layer": 0,
        "block": "attention",
        "prefix": "",
        "patterns_only": True,
        "labels": [f"{i}:{t}" for i, t in enumerate(tokens)],
        "bytes": 8,
        "heads": [{"label": str(name), "pattern": floats(pattern[h]), "how": []} for h, name in enumerate(names)],
        "causal": bool(torch.all(torch.triu(pattern, 1).sum(0) == 0)),
        "window": None,
        "palettes": {name: scale_colours(scale_name).tolist() for name, scale_name in COLOURSCALES.items()},
    }
    chosen = {"block": 0, "head": 0, "query": len(tokens) - 1, "key": 0}
    return Widget([("attention_head.js", {"blocks": [block], "id": uuid.uuid4().hex, "chosen": chosen, "pick": "notebook"})])


def grid(trace, name: str, head: int = 0) -> Widget:
    """Any tensor of a trace as the explorer draws it (``Trace.figure``: tokens on the position axes),
    a plotly figure with plotly.js inside the fragment (offline)."""
    figure = trace.figure(name, head=head)
    return Widget([], title=name, html=figure.to_html(include_plotlyjs=True, full_html=False))


def playground(
    model,
    prompt: str,
    max_new_tokens: int = 20,
    temperature: float = 1.0,
    top_k=None,
    top_p=1.0,
    seed=0,
    force: list[tuple[int, str | int]] = (),
    seeds: list[int] = (),
) -> Widget:
    """The playground's distribution and sampling controls (moved in the page, applied exactly as
    the sampler does), and a generation with these settings as a tree (its steps, alternatives and
    logit lens, as the playground draws them): ``force``, (position, token) pairs, each branching
    the path before it; ``seeds``, more samples. A decoder-only model."""
    from glassbox.app.components.generation_player import generation_payload, step_record, tree_payload
    from glassbox.app.components.sampling_controls import payload as sampling_payload
    from glassbox.model.engine.sampling import Sampling, next_token_logits

    if model.cfg.kind != "decoder":
        raise GlassboxError(f"The playground widget is for decoder-only models; this one is an {model.cfg.kind}")
    sampling = Sampling(temperature, top_k, top_p, seed)
    tree = model.generate(prompt, max_new_tokens, temperature, top_k, top_p, seed, tree=True)
    path = 0
    for position, token in force:
        path = tree.branch(position, token, path).index
    for other in seeds:
        tree.sample(other)
    settings = {"temperature": max(temperature, 0.05), "top_k": top_k or 0, "top_p": top_p, "greedy": temperature == 0}
    top_k_max = min(model.cfg.vocab_size, 100)
    controls = sampling_payload(
        next_token_logits(model, prompt),
        model.pieces,
        settings,
        top_k_max,
        "Next token after the prompt",
        blocked=NOT_IN_A_NOTEBOOK,
    )
    entry = {"model": model.name, "prompt": prompt, "settings": str(sampling), "tree": tree, "records": {}, "lens": {}}
    entry |= {"source_tokens": 0, "path": path, "step": 0}  # opened on the last forced path, or the first sample
    entry["tokens"] = entry["records"][path] = [step_record(t, model.pieces) for t in tree.paths[path].steps]
    player = generation_payload(model, entry)[0]
    player["tree"] = tree_payload(model, entry, lambda path: tree.lens(path)) | {"static": True}
    return Widget([("sampling_controls.js", controls), ("generation_player.js", player)], title=f"Playground: {prompt}")


def show_worked_example() -> Widget:
    """The article's worked example, every step of the forward pass, the backward pass and the
    update, as the app's Worked example page plays it."""
    from glassbox.app.components.step_player import player_payload
    from glassbox.model.io.checkpoint import load
    from glassbox.model.worked_example.article import published
    from glassbox.model.worked_example.steps import worked_example_steps

    loaded = load("worked-example")
    printed = set(loaded.about.get("printed_weights", []))
    steps = worked_example_steps(
        loaded.model,
        loaded.tokenizer,
        published(),
        lambda weight: "printed by the article" if weight in printed else "reconstructed",
    )
    data = player_payload(steps, loaded.cfg.n_layers, loaded.tokenizer.pieces) | {"step": None}
    return Widget([("step_player.js", data)], title="The worked example")
