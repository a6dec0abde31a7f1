"""What the Attention view sends its in-page heads (app/components/attention_head.py): each
block's payload with its heads' notes, kept with the trace, and the address where the page
fetches any other block itself (app/served.py)."""

from glassbox.app import served
from glassbox.app.components.attention_head import block_payload
from glassbox.app.explore.common import derived
from glassbox.model.analysis import scored
from glassbox.model.engine import block_label, head_label


def how_notes(cfg, layer: int, head: int) -> list[str]:
    """What a head's scores went through besides q·k × scale, in words."""
    how = [f"soft-capped at ±{cfg.attn_softcap:g}"] if cfg.attn_softcap is not None else []
    how += ["q and k each normed per head first (QK-norm)"] if cfg.qk_norm else []
    how += ["both rotated by RoPE for their positions"] if cfg.positional == "rope" else []
    if cfg.n_kv_heads != cfg.n_heads:
        group = ", ".join(str(h + 1) for h in range(cfg.n_heads) if cfg.kv_head(h) == cfg.kv_head(head))
        how.append(f"query {head_label(head)} reads key/value {head_label(cfg.kv_head(head))}, shared by query heads {group}")
    return how


def heads_notes(cfg, layer: int) -> list[list[str]]:
    return [how_notes(cfg, layer, h) for h in range(cfg.n_heads)]


def block_for_page(trace, cfg, labels: list[str], computed: bool, layer: int) -> dict:
    """Block ``layer`` for the page: its heads' scores and patterns as traced, or (``computed``, or
    where the trace lacks them) its queries and keys alone, for the page to compute them."""
    alone = computed or f"blocks.{layer}.attn.hook_scores" not in trace
    return block_payload(trace, cfg, layer, labels, heads_notes(cfg, layer), alone)


def sent_block(trace, cfg, labels: list[str], computed: bool, layer: int) -> dict:
    """``block_for_page``, kept with the trace: the page's reruns send the element again."""
    return derived(trace, ("attention in the page", layer, computed), lambda: block_for_page(trace, cfg, labels, computed, layer))


def can_fetch(trace, cfg) -> bool:
    """Whether the trace holds every block's queries and keys (a long prompt's lean trace, or a whole
    trace): the page then fetches any block itself."""
    return all(name in trace for b in range(cfg.n_layers) for name in scored(cfg, b))


def fetched(trace, cfg, labels: list[str], computed: bool) -> dict | None:
    """Where the page fetches any block of ``trace`` itself (app/served.py), with the blocks' names
    for its Block list; None where the trace lacks a block's queries and keys (a trace of one
    block's attention): the Block list is then the server's. A block whose scores and pattern are
    traced is sent as they are (unless ``computed``), else its q and k alone."""
    if not can_fetch(trace, cfg):
        return None

    def answer(trace, layer: int) -> dict | None:  # not kept: 3 MB a block at 512 tokens, 10 ms to build
        return block_for_page(trace, cfg, labels, computed, layer) if 0 <= layer < cfg.n_layers else None

    # one token per trace, labels and mode: the element (and its address) stays the same across reruns
    key = ("served attention", computed, tuple(labels))
    token = derived(trace, key, lambda: served.register(trace, answer))
    return {"url": served.address(token), "blocks": [block_label(b) for b in range(cfg.n_layers)]}
