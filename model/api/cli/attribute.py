"""`glassbox attribute`: attribution of one logit to each input token."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, count_between, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("attribute", help="attribution of one logit to each input token")
    add_model_arguments(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--target", required=True, help="the token whose logit at the last position is attributed")
    # model.analysis.attribution.METHODS, written out (a test keeps them equal)
    p.add_argument(
        "--method", default="saliency", choices=["saliency", "input_x_gradient", "integrated_gradients", "attention_rollout"]
    )
    # attribution.MAX_STEPS, written out (a test keeps them equal); the analysis checks it too
    p.add_argument(
        "--steps", type=count_between(1, 10_000), default=32, help="integrated gradients: points on the path (1 to 10,000)"
    )
    p.add_argument("--baseline", help="integrated gradients: this token's embedding at every position (default: zeros)")
    p.add_argument("--json", action="store_true", help='print {"tokens", "scores", "target_logit", ...}')
    p.set_defaults(func=run)


def run(args) -> int:
    loaded = model_from(args)
    tokens = loaded.tokens(args.prompt)
    result = loaded.attribute(tokens, args.target, args.method, args.steps, args.baseline)
    pieces = [loaded.tokenizer.pieces[t] for t in tokens]
    out = {"tokens": pieces, "scores": result.scores.tolist(), "target_logit": result.target_logit}
    if result.baseline_logit is not None:
        out |= {"baseline_logit": result.baseline_logit, "completeness_error": result.completeness_error, "steps": result.steps}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.method} for logit({args.target!r}) = {result.target_logit:.4f} at the last position")
    for piece, score in zip(pieces, result.scores):
        print(f"  {piece!r:>16} {score: .5g}")
    if result.baseline_logit is not None:
        print(
            f"completeness: Σ scores {result.scores.sum():.6g} vs f(input) − f(baseline) "
            f"{result.target_logit - result.baseline_logit:.6g}, error {result.completeness_error:.3g} "
            f"({result.steps} steps)"
        )
    return 0
