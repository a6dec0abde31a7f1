"""`glassbox steer`: generate with a vector added to the residual stream, beside the plain completion."""

from __future__ import annotations

import json

from glassbox.cli.common import add_model_arguments, add_sampling_arguments, model_from, step_json


def add_arguments(sub) -> None:
    p = sub.add_parser("steer", help="generate with a vector added to the residual stream, beside the plain completion")
    add_model_arguments(p)
    add_sampling_arguments(p)
    p.add_argument("--positive", required=True, help="the vector: the residual stream at this prompt's last position…")
    p.add_argument("--negative", required=True, help="…minus this one's (contrastive activation addition)")
    p.add_argument("--block", type=int, required=True, help="added to the residual stream entering this block")
    p.add_argument("--strength", type=float, default=4.0, help="the vector's multiple (default 4)")
    p.add_argument("--start", type=int, default=0, help="the first position steered (default 0: all)")
    p.add_argument("--json", action="store_true", help='print {"prompt", "vector_norm", "steered", "plain"}')
    p.set_defaults(func=run)


def run(args) -> int:
    loaded = model_from(args)
    vector = loaded.steering_vector(args.positive, args.negative, args.block)
    steered, plain = loaded.steer(
        args.prompt,
        vector,
        args.block,
        args.strength,
        args.start,
        args.max_new_tokens,
        args.temperature,
        args.top_k,
        args.top_p,
        args.seed,
    )
    runs = {
        name: {
            "completion": loaded.tokenizer.decode([t.token_id for t in tokens]),
            "steps": [step_json(t, loaded.pieces) for t in tokens],
        }
        for name, tokens in (("steered", steered), ("plain", plain))
    }
    if args.json:
        print(
            json.dumps(
                {
                    "prompt": args.prompt,
                    "block": args.block,
                    "strength": args.strength,
                    "start": args.start,
                    "vector_norm": float(vector.norm()),
                    **runs,
                }
            )
        )
        return 0
    print(
        f"vector: resid_pre of block {args.block}, {args.positive!r} − {args.negative!r} "
        f"(norm {float(vector.norm()):.4g}), × {args.strength:g} from position {args.start}"
    )
    print(f"steered: {args.prompt}{runs['steered']['completion']}")
    print(f"plain:   {args.prompt}{runs['plain']['completion']}")
    return 0
