"""How many sequences the ask-why analyses run through the model in one pass: one place, so
that the server can size a pass before it runs (app/explore/why.py admits it)."""

BATCH = 32  # sequences per forward pass, at most …
BATCH_TOKENS = 8192  # … and at most this many tokens in one pass


def per_pass(n_tokens: int) -> int:
    """Sequences of ``n_tokens`` run in one pass: integrated gradients' path points, patched runs."""
    return max(1, min(BATCH, BATCH_TOKENS // n_tokens))
