"""`glassbox features`: a prompt through a sparse autoencoder (each token's features, the
reconstruction error, one feature's logit effect, ablation and steering); `--list`: the curated
sparse autoencoders."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, count_between, model_from, print_table, step_json


def add_arguments(sub) -> None:
    p = sub.add_parser(
        "features",
        help="a prompt through a sparse autoencoder: each token's features, the "
        "reconstruction error, one feature's logit effect, ablation and steering",
    )
    add_model_arguments(p)
    p.add_argument(
        "--sae",
        help="a folder (SAELens's cfg.json + sae_weights.safetensors, or Gemma Scope's "
        "params.safetensors) or owner/repo/folder on the hub",
    )
    p.add_argument("--prompt")
    p.add_argument("--top", type=count_between(1, 100), default=5, help="features shown per token (default 5)")
    p.add_argument("--feature", type=int, help="one feature: its activations and direct logit effect")
    p.add_argument("--ablate", action="store_true", help="with --feature: the next token with it taken out")
    p.add_argument(
        "--steer",
        type=float,
        metavar="STRENGTH",
        help="with --feature: generate with its decoder row × STRENGTH added where the SAE writes, beside the plain completion",
    )
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.0, help="for --steer (default 0: greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="the curated sparse autoencoders")
    p.add_argument("--json", action="store_true", help='print {"sae", "tokens": [...], "feature": {...}}')
    p.set_defaults(func=run)


def run(args) -> int:
    from glassbox.model.engine import GlassboxError
    from glassbox.model.io.sae import curated

    if args.list:
        rows = [
            (e.source, e.model, e.hook, f"{e.d_sae:,}", f"{e.download_bytes / 1e6:,.0f} MB", "cached" if e.cached else "-")
            for e in curated()
        ]
        print_table(("sparse autoencoder (--sae)", "model", "reads", "features", "download", "cache"), rows)
        return 0
    if args.sae is None or args.prompt is None:
        raise GlassboxError(
            "features needs --sae (a folder, or owner/repo/folder on the hub) and --prompt; --list shows the curated ones"
        )
    if args.feature is None and (args.ablate or args.steer is not None):
        raise GlassboxError("--ablate and --steer act on one feature: give --feature")
    loaded = model_from(args)
    sae = loaded.sae(args.sae)
    result = loaded.features(args.prompt, sae, args.top)
    pieces = [loaded.pieces[t] for t in result.tokens]
    out = {
        "sae": sae.name,
        "architecture": sae.architecture,
        "reads": sae.reads,
        "writes": sae.writes,
        "d_sae": sae.d_sae,
        "loss": result.loss,
        "spliced_loss": result.spliced_loss,
        "tokens": [
            {
                "token": piece,
                "active": int(result.active[i]),
                "error_norm": float(result.error_norm[i]),
                "relative_error": float(result.relative_error[i]),
                "top": [
                    {"feature": int(f), "activation": float(a)} for f, a in zip(result.top_ids[i], result.top_values[i]) if f >= 0
                ],
            }
            for i, piece in enumerate(pieces)
        ],
    }
    if args.feature is not None:
        out["feature"] = feature_json(loaded, sae, args)
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"{sae.name}: {sae.architecture}, {sae.d_sae:,} features, reads {sae.reads}"
        + (f", writes {sae.writes}" if sae.writes != sae.reads else "")
    )
    print(f"next-token loss {result.loss:.4f}; with the reconstruction in place {result.spliced_loss:.4f}")
    for row in out["tokens"]:
        features = ", ".join(f"#{t['feature']} {t['activation']:.3g}" for t in row["top"]) or "none active"
        print(f"  {row['token']!r:>14}  L0 {row['active']:>4}  error {row['relative_error']:.2f}  {features}")
    if args.feature is not None:
        print_feature(out["feature"], args)
    return 0


def feature_json(loaded, sae, args) -> dict:
    """One feature: its activation per token, its direct logit effect, and on request the
    next-token distribution with it ablated and the completion steered by it."""
    from glassbox.model.engine import GlassboxError
    from glassbox.model.engine.sampling import top

    ablation = loaded.ablate_feature(args.prompt, sae, args.feature)
    out = {"id": args.feature, "activations": ablation.activations.tolist()}
    try:
        effect = loaded.feature_logits(args.prompt, sae, args.feature, k=8)
        out["promoted"] = [{"token": loaded.pieces[i], "logit": v} for i, v in zip(effect.promoted_ids, effect.promoted)]
        out["suppressed"] = [{"token": loaded.pieces[i], "logit": v} for i, v in zip(effect.suppressed_ids, effect.suppressed)]
    except GlassboxError as exc:  # it does not write into the residual stream, or the head is not linear
        out["logit_effect_unavailable"] = str(exc)
    if args.ablate:
        import torch

        out["ablation"] = {
            "kl": ablation.kl,
            "plain": top(torch.from_numpy(ablation.plain), loaded.pieces, 5),
            "ablated": top(torch.from_numpy(ablation.ablated), loaded.pieces, 5),
        }
    if args.steer is not None:
        steered, plain = loaded.steer_feature(
            args.prompt,
            sae,
            args.feature,
            args.steer,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
        out["steering"] = {
            "strength": args.steer,
            **{
                name: {
                    "completion": loaded.tokenizer.decode([t.token_id for t in tokens]),
                    "steps": [step_json(t, loaded.pieces) for t in tokens],
                }
                for name, tokens in (("steered", steered), ("plain", plain))
            },
        }
    return out


def print_feature(feature: dict, args) -> None:
    print(f"feature #{feature['id']}: activation per token " + " ".join(f"{a:.3g}" for a in feature["activations"]))
    if "promoted" in feature:
        print("  raises " + ", ".join(f"{t['token']!r} {t['logit']:+.3g}" for t in feature["promoted"]))
        print("  lowers " + ", ".join(f"{t['token']!r} {t['logit']:+.3g}" for t in feature["suppressed"]))
    else:
        print(f"  no direct logit effect: {feature['logit_effect_unavailable']}")
    if "ablation" in feature:

        def listed(tops):
            return ", ".join(f"{t['token']!r} {t['p']:.3f}" for t in tops)

        print(
            f"  ablated (KL {feature['ablation']['kl']:.4g} nats): next token {listed(feature['ablation']['ablated'])}"
            f"  (plain: {listed(feature['ablation']['plain'])})"
        )
    if "steering" in feature:
        print(f"  steered × {args.steer:g}: {args.prompt}{feature['steering']['steered']['completion']}")
        print(f"  plain:        {args.prompt}{feature['steering']['plain']['completion']}")
