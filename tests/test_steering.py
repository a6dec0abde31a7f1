"""Steering (model/analysis/steering.py, gb.Model.steer). Reference: transformers'
GPT2LMHeadModel on the same weights, with a forward pre-hook on block b adding
strength × vector at the positions from ``start`` on, run on the whole steered sequence without
a cache; its hidden states give the contrastive vector. float64 throughout: 1e-10."""

from __future__ import annotations

import pytest
import torch

import glassbox as gb
from glassbox.model.engine import GlassboxError

PROMPT, POSITIVE, NEGATIVE = "The cat sat on", "The dog", "The cat"


@pytest.fixture(scope="module")
def pair(gpt2_dir):
    from transformers import GPT2LMHeadModel

    model = gb.load(str(gpt2_dir), dtype="float64", device="cpu")
    hf = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), dtype=torch.float64, attn_implementation="eager").eval()
    return model, hf


def hooked_logits(hf, ids: list[int], block: int, vector: torch.Tensor, strength: float, start: int) -> torch.Tensor:
    def add(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        on = (torch.arange(hidden.shape[1]) >= start).to(hidden.dtype)[None, :, None]
        hidden = hidden + on * strength * vector
        return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})

    handle = hf.transformer.h[block].register_forward_pre_hook(add, with_kwargs=True)
    try:
        with torch.no_grad():
            return hf(torch.tensor([ids])).logits[0]
    finally:
        handle.remove()


@pytest.mark.parametrize("block, strength, start", [(1, 4.0, 2), (0, -2.5, 0), (2, 8.0, 6)])
def test_steered_generation_equals_transformers_with_a_forward_hook(pair, block, strength, start):
    model, hf = pair
    vector = model.steering_vector(POSITIVE, NEGATIVE, block)
    with torch.no_grad():
        states = [
            hf(torch.tensor([model.tokens(p)]), output_hidden_states=True).hidden_states[block][0, -1]
            for p in (POSITIVE, NEGATIVE)
        ]
    assert torch.allclose(vector, states[0] - states[1], rtol=1e-10, atol=1e-10)

    steered, plain = model.steer(PROMPT, vector, block, strength, start, max_new_tokens=6, temperature=0.9, seed=2)
    prompt = model.tokens(PROMPT)
    logits = hooked_logits(hf, prompt + [t.token_id for t in steered], block, vector, strength, start)
    for i, token in enumerate(steered):  # every step, the prompt's positions and the generated ones
        want = torch.log_softmax(logits[len(prompt) - 1 + i], -1)
        assert torch.allclose(token.before.log(), want, rtol=0, atol=1e-10), i
    # the vector did something, from the first step whose input it reaches (start ≤ its position)
    moved = [not torch.allclose(a.before, b.before) for a, b in zip(plain, steered)]
    first = max(0, start - len(prompt) + 1)
    assert moved[first] and not any(moved[:first])
    assert [t.token_id for t in plain] == [t.token_id for t in model.generate(PROMPT, 6, 0.9, seed=2)]


def test_no_strength_or_a_start_past_the_end_is_the_plain_completion(pair):
    model, _ = pair
    vector = model.steering_vector(POSITIVE, NEGATIVE, 1)
    for strength, start in ((0.0, 0), (5.0, 100)):
        steered, plain = model.steer(PROMPT, vector, 1, strength, start, max_new_tokens=5, seed=7)
        assert [t.token_id for t in steered] == [t.token_id for t in plain]
        assert all(torch.equal(a.before, b.before) for a, b in zip(steered, plain))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"block": 3}, "block must be from 0 to 2"),
        ({"vector": torch.zeros(5)}, "d_model = 64"),
        ({"strength": float("nan")}, "finite"),
        ({"start": -1}, "0 or more"),
    ],
)
def test_bad_steering_is_a_clean_error(pair, change, message):
    model, _ = pair
    args = {"vector": torch.zeros(64, dtype=torch.float64), "block": 1, "strength": 1.0, "start": 0} | change
    with pytest.raises(GlassboxError, match=message):
        model.steer(PROMPT, max_new_tokens=2, **args)


def test_the_steer_command_prints_both_completions(pair, gpt2_dir):
    """`glassbox steer --json`: the steered and plain completions are Model.steer's (the same
    float64 model, in this process)."""
    import json

    from tests.helpers import cli

    model, _ = pair
    args = [
        "--model",
        str(gpt2_dir),
        "--dtype",
        "float64",
        "--prompt",
        PROMPT,
        "--positive",
        POSITIVE,
        "--negative",
        NEGATIVE,
        "--block",
        "1",
        "--strength",
        "6",
        "--max-new-tokens",
        "5",
        "--seed",
        "4",
    ]
    run = cli("steer", *args, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    vector = model.steering_vector(POSITIVE, NEGATIVE, 1)
    steered, plain = model.steer(PROMPT, vector, 1, 6.0, max_new_tokens=5, seed=4)
    assert [s["token_id"] for s in out["steered"]["steps"]] == [t.token_id for t in steered]
    assert [s["token_id"] for s in out["plain"]["steps"]] == [t.token_id for t in plain]
    assert out["vector_norm"] == pytest.approx(float(vector.norm()), rel=1e-12)
    bad = cli("steer", *[a if a != "1" else "9" for a in args])
    assert bad.returncode == 2 and bad.stderr.startswith("error: block must be") and len(bad.stderr.splitlines()) == 1
