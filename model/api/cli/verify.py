"""`glassbox verify`: this model beside transformers' own class on a prompt, the largest differences."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, model_from


def add_arguments(sub) -> None:
    p = sub.add_parser("verify", help="this model beside transformers' own class on a prompt: the largest differences")
    add_model_arguments(p)
    p.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog.")
    p.add_argument("--gradients", action="store_true", help="also the loss and its gradient w.r.t. each residual stream")
    p.add_argument("--json", action="store_true", help='print {"reference", "dtype", "n_tokens", "logits", ...}')
    p.set_defaults(func=run)


def run(args) -> int:
    result = model_from(args).verify(args.prompt, args.gradients)
    if args.json:
        print(json.dumps(result.as_dict()))
        return 0
    print(f"beside {result.reference}, {result.dtype}, {result.n_tokens} tokens: largest |difference|")
    print(f"  logits                      {result.logits:.3g}  (largest logit {result.logits_scale:.3g})")
    print(f"  residual entering a block   {result.residual:.3g}  (largest value {result.residual_scale:.3g})")
    if result.gradient is not None:
        print(f"  loss                        {result.loss:.3g}")
        print(f"  dL/d(residual)              {result.gradient:.3g}  (largest value {result.gradient_scale:.3g})")
    return 0
