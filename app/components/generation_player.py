"""The playground's last generation, played in the page (generation_player.js): every step's
distribution before and after the settings, its KV cache figures and its link to the explorer are
sent once, so choosing a step (a token's chip or its button) answers at once, with no round trip
(the tab's sessionStorage keeps the step, for reruns and returns). The playground computes and
formats every figure; the script only lays them out.

A decoder's generation is a tree (glassbox.tree.Tree): every path is sent, drawn as a tree once
there are two, and each step also carries the sampler's alternatives there and the logit lens.
A Force button sends a branch back (``branch``: path, step, token id), which the playground makes
with ``Tree.branch`` before the rerun."""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from glassbox.app.components.labels import token_labels
from glassbox.app.components.latex import thousands
from glassbox.app.components.page_kit import katex_module, page_component
from glassbox.model.analysis.architecture import NO_BLOCKS
from glassbox.model.engine import block_label
from glassbox.model.engine.sampling import kv_cache_bytes, top
from glassbox.model.plot.labels import token_text

EXPLORE_PAGE = "screens/explore.py"
ALTERNATIVES = 10  # the sampler's most likely tokens offered at a step, each with a Force button

_component = page_component("glassbox_generation_player", "generation_player.js", "generation_player.css")


BRANCH = "generation_player:branch"  # a Force button's message, kept for the run it starts


def sent_branch() -> tuple[int, int, int] | None:
    """The branch a Force button sent (path, step, token id), once, if it is three whole numbers (the
    message comes from a browser; the tree checks their range). Call it before the player is drawn."""
    sent = st.session_state.pop(BRANCH, None)
    values = [sent.get(name) for name in ("path", "step", "token_id")] if isinstance(sent, dict) else []
    if len(values) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return values[0], values[1], values[2]
    return None


def generation_player(payload: dict, links: list[dict], key: str = "generation_player") -> None:
    """``payload``: the prompt and every step as the page draws it (``generation_payload``), ``id``
    naming the generation; ``links``: each step's explorer settings, followed with
    ``st.switch_page`` when its link is clicked, so the session (and this generation) stays. A
    Force button's branch is kept for the run it starts (``sent_branch``)."""

    def branch_sent() -> None:
        st.session_state[BRANCH] = st.session_state[key].get("branch")

    result = _component(
        data={**payload, "katex": katex_module()},
        key=key,
        on_explore_change=lambda: None,
        on_branch_change=branch_sent,
    )
    chosen = result.explore  # from a browser: only a step's own link is followed
    if isinstance(chosen, int) and not isinstance(chosen, bool) and 0 <= chosen < len(links):
        st.switch_page(EXPLORE_PAGE, query_params=links[chosen])
    if isinstance(chosen, dict) and payload.get("tree"):  # a path's link: the whole path, at one of its tokens
        paths = payload["tree"]["paths"]
        path, step = chosen.get("path"), chosen.get("step")
        if isinstance(path, int) and isinstance(step, int) and 0 <= path < len(paths) and 0 <= step < len(paths[path]["steps"]):
            st.switch_page(
                EXPLORE_PAGE, query_params=paths[path]["explore"] | {"pos": str(paths[path]["steps"][step]["position"])}
            )


def step_record(token, pieces: list[str]) -> dict:
    """One generated token as the session keeps it: what the page draws of its step."""
    return {
        "token": token.token,
        "token_id": token.token_id,
        "p": token.p,
        "p_model": token.p_model,
        "entropy_before": token.entropy_before,
        "entropy_after": token.entropy_after,
        "before": top(token.before, pieces, 15),
        "after": top(token.after, pieces, 15),
        "cache_bytes": token.cache_bytes,
        "position": token.position,
        "forced": token.forced,
    }


def before_after_rows(before: list[dict], after: list[dict], n: int = 15, drawn: int | None = None) -> dict:
    """The model's and the sampled-from probability side by side for the n tokens most likely
    under either (ties in token-id order, as ``top`` ranks them); ``before`` and ``after`` are
    ``top()`` lists (token, token_id, p); ``bold``: where the ``drawn`` token id is (or -1)."""
    p_before = {d["token_id"]: d["p"] for d in before}
    p_after = {d["token_id"]: d["p"] for d in after}
    text = {d["token_id"]: d["token"] for d in before + after}
    order = sorted(text, key=lambda i: (-max(p_before.get(i, 0.0), p_after.get(i, 0.0)), i))[:n]
    return {
        "labels": token_labels([text[i] for i in order], order),
        "before": [p_before.get(i, 0.0) for i in order],
        "after": [p_after.get(i, 0.0) for i in order],
        "bold": order.index(drawn) if drawn in order else -1,
    }


def generation_payload(loaded, result: dict) -> tuple[dict, list[dict]]:
    """The last generation as the page plays it (app/components/generation_player.py): every
    step's distributions, entropies and KV cache figures; and each step's explorer settings."""
    tokens, steps, links = result["tokens"], [], []
    for i, t in enumerate(tokens):
        shown = token_text(t["token"])
        steps.append(
            {
                "token": t["token"],
                "label": shown,
                "p": t["p"],
                "title": f"Step {i + 1}: drew “{shown}” with p = {t['p']:.3f} (model: {t['p_model']:.3f})",
                **before_after_rows(t["before"], t["after"], drawn=t["token_id"]),
                "entropy": f"Entropy {t['entropy_before']:.3f} nats before the settings, {t['entropy_after']:.3f} after.",
                "kv": kv_cache_figures(loaded, result, i),
            }
        )
        if loaded.cfg.encoder_decoder:  # the explorer's target ends with this step's token: its last position predicted it
            links.append(
                {
                    "model": result["model"],
                    "prompt": result["prompt"],
                    "target": loaded.tokenizer.decode([x["token_id"] for x in tokens[: i + 1]]),
                }
            )
        else:
            links.append({"model": result["model"], "prompt": result["prompt"] + "".join(x["token"] for x in tokens[:i])})
        steps[-1]["href"] = "explore?" + urlencode(links[-1])  # a new tab opens it too; a click stays in the session
    payload = {
        "prompt": result["prompt"],
        "seq2seq": loaded.cfg.encoder_decoder,
        "steps": steps,
        "id": f"{result['model']}|{result['prompt']}|{result['settings']}|{[t['token_id'] for t in tokens]}",
    }
    return payload, links


def kv_cache_figures(loaded, result: dict, step: int) -> dict:
    """The KV cache that predicted ``step``: its size by the formula (LaTeX), per block, and as measured."""
    cfg, t = loaded.cfg, result["tokens"][step]
    if cfg.n_layers == 0 and not cfg.encoder_decoder:
        return {"sentence": f"none. {NO_BLOCKS} No attention, so no keys or values to keep."}
    n, source = t["position"], result.get("source_tokens", 0)
    size = kv_cache_bytes(loaded, n, source)
    element = loaded.model.embed.W_E.element_size()
    heads = f"{cfg.n_kv_heads} × {{}} × {cfg.d_head}"  # the columns say what each number counts
    measured = f"Measured on the engine's own cache during generation: {t['cache_bytes']:,} bytes."
    if cfg.encoder_decoder:
        layers = cfg.n_decoder_layers
        return {
            "sentence": f"used to predict step {step + 1}: in each of the {layers} decoder blocks, the self-attention's "
            f"keys and values of the {n} target position{'s' * (n != 1)} before it (the start token and the "
            f"tokens written) and the cross-attention's of the {source} source positions (computed once, "
            "from the encoder's output).",
            "latex": [
                r"\begin{gathered} 2 \times \text{decoder layers} \times (\text{target} + \text{source tokens}) \\ "
                r"\times \text{key/value heads} \times d_{head} \times \text{bytes} \end{gathered}",
                rf"\begin{{gathered}} = 2 \times {layers} \times ({n} + {source}) \times {cfg.n_kv_heads} \times "
                rf"{cfg.d_head} \times {element} \\ = {thousands(size)}\ \text{{bytes}} \end{{gathered}}",
            ],
            "columns": [
                "block",
                "self-attention keys, values (heads × positions × d_head)",
                "cross-attention keys, values (heads × positions × d_head)",
                "bytes",
            ],
            "rows": [
                [f"decoder block {i + 1} (decoder.blocks.{i})", heads.format(n), heads.format(source), f"{size // layers:,}"]
                for i in range(layers)
            ],
            "measured": measured,
        }
    layers = cfg.n_layers
    return {
        "sentence": f"used to predict step {step + 1}: the keys and values of the {n} positions before it, in each of "
        f"the {layers} layers.",
        "latex": [
            r"\begin{gathered} 2 \times \text{layers} \times \text{tokens} \\ \times \text{key/value heads} "
            r"\times d_{head} \times \text{bytes} \end{gathered}",
            rf"\begin{{gathered}} = 2 \times {layers} \times {n} \times {cfg.n_kv_heads} \times {cfg.d_head} "
            rf"\times {element} \\ = {thousands(size)}\ \text{{bytes}} \end{{gathered}}",
        ],
        "columns": ["block", "keys (heads × positions × d_head)", "values (heads × positions × d_head)", "bytes"],
        "rows": [[block_label(i), heads.format(n), heads.format(n), f"{size // layers:,}"] for i in range(layers)],
        "measured": measured,
    }


def own_from(tree, index: int) -> tuple[int | None, int]:
    """Where path ``index`` is drawn from: (the path it leaves, the first step of its own). A branch
    leaves its parent at its forced token; another sample leaves the first sample where they part
    (at its start if they share nothing, at its end if they are the same)."""
    path = tree.paths[index]
    if path.parent is not None:
        return path.parent, path.position - len(tree.prompt)
    if index == 0:
        return None, 0
    parting = tree.parting(0, index)
    return 0, len(path.steps) if parting is None else parting - len(tree.prompt)


def tree_payload(loaded, entry: dict, lens_of) -> dict:
    """Every path of ``entry``'s tree as the page draws it: its steps (with the alternatives and the
    lens at each), where it leaves the path it came from, and its explorer link. ``lens_of(path)``:
    ``Tree.lens`` of a path (the playground keeps them)."""
    tree = entry["tree"]
    paths = []
    for path in tree.paths:
        records = entry["records"].setdefault(path.index, [step_record(t, loaded.pieces) for t in path.steps])
        steps = generation_payload(loaded, {**entry, "tokens": records})[0]["steps"]
        lens = lens_of(path.index)
        for i, (step, t) in enumerate(zip(steps, path.steps)):
            step["position"] = t.position
            step["forced"] = t.forced
            step["alternatives"] = [
                {
                    "label": token_labels([a["token"]], [a["token_id"]])[0],
                    "token_id": a["token_id"],
                    "p": a["p"],
                    "p_model": a["p_model"],
                }
                for a in tree.alternatives(t.position, path.index, ALTERNATIVES)
            ]
            committed = lens["committed"][i]
            step["lens"] = {
                "labels": lens["labels"],
                "p": lens["p"][i],
                "top": [token_text(x) for x in lens["top"][i]],
                "committed": None if committed is None else lens["labels"][committed],
            }
        parent, start = own_from(tree, path.index)
        ids = tree.tokens(path.index)
        forced = path.steps[start] if path.parent is not None else None
        paths.append(
            {
                "label": f"path {path.index + 1}",
                "how": (
                    f"seed {path.sampling.seed}"
                    if path.parent is None
                    else f"“{token_text(forced.token)}” forced at {forced.position}"
                ),
                "parent": parent,
                "from": start,
                "steps": steps,
                "explore": {"model": entry["model"], "prompt": loaded.tokenizer.decode(ids), "ids": ",".join(map(str, ids))},
            }
        )
    return {"paths": paths, "path": entry["path"], "step": entry.get("step", 0)}
