"""Lesson 7, key figures of real models: each catalogued model's shape, its parameters counted from
the shapes beside the published count, FLOPs and KV-cache bytes per token; and where the course's
appendix table (gentle-introduction.txt) differs from the configurations."""

from __future__ import annotations

from glassbox.model.course.real_model_configs import (DEEPSEEK_V3_ATTENTION, MODEL, MODELS, RealModel, count,
                                                      flops_per_token, kv_bytes_per_token, mla_head_widths, parts)

# The course appendix's figures that differ from the models' configurations: (model, what, printed).
APPENDIX_SLIPS = [("GPT-2 small", "vocab", 5025), ("GPT-2 XL", "context", 2048)]
DEEPSEEK_PRINTED_D_HEAD = 56  # the appendix's d_head for DeepSeek-V3: d_model / heads, 7168 / 128


def row(model: RealModel) -> dict:
    s = model.shape
    total, active = count(s)
    return {"model": model.name, "layers": s.layers, "d_model": s.d_model, "heads": s.heads, "kv_heads": s.kv_heads,
            "d_head": s.d_head, "d_ff": s.d_ff, "vocab": s.vocab, "context": s.context, "parameters": total,
            "active_parameters": active, "published": model.published,
            "difference_percent": 100 * (total / model.published - 1), "flops_per_token": flops_per_token(s),
            "kv_bytes_per_token_fp16": kv_bytes_per_token(s), "where": parts(s), "source": model.source}


def appendix_slips() -> list[dict]:
    """The course appendix's printed figures beside the configuration's."""
    return [{"model": name, "figure": what, "printed": printed, "configuration": row(MODEL[name])[what]}
            for name, what, printed in APPENDIX_SLIPS]


def deepseek_d_head() -> dict:
    """The appendix's DeepSeek-V3 d_head beside its configuration's per-head widths (MLA)."""
    return {"printed": DEEPSEEK_PRINTED_D_HEAD, "d_model": DEEPSEEK_V3_ATTENTION["hidden_size"],
            "heads": DEEPSEEK_V3_ATTENTION["num_attention_heads"], **mla_head_widths(DEEPSEEK_V3_ATTENTION)}


def figures(loaded=None) -> dict:
    return {"models": [row(m) for m in MODELS], "appendix_slips": appendix_slips(), "deepseek_d_head": deepseek_d_head(),
            "flops_note": "2 × the parameters a token uses; attention's context-dependent products left out"}
