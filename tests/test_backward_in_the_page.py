"""The explorer's Backward view plays its steps in the page (app/components/backward_player.js): what
the page is sent and fetches (app/explore/backward_sent.py, app/served.py) is the traced gradients.
The page itself, in Chromium: tests/test_browser.py."""

import numpy as np

from glassbox.model.analysis import backward_steps
from glassbox.model.engine import Target, run_trace
from glassbox.model.io.checkpoint import load
from tests.helpers import backward_sent, fetch_step, start, step_in_page

PROMPT = "the cat sat on the"


def traced_grid(trace, tokens: list[int], grid: dict) -> np.ndarray:
    """The gradient a page map draws, taken from the trace by its engine name and the slice its
    label names (model/plot/grid.py's notes: a head, the prompt tokens' rows or columns, 0:T)."""
    tensor = trace[grid["name"]].double()
    note = grid["label"].removeprefix(grid["name"])
    if note == "[prompt tokens]":
        tensor = tensor[tokens]
    elif note == "[0:T]":
        tensor = tensor[: len(tokens)]
    elif note == "[:, prompt tokens]":
        tensor = tensor[:, tokens]
    elif note:
        tensor = tensor[int(note.strip("[]"))]
    return (tensor.reshape(1, -1) if tensor.dim() == 1 else tensor).numpy()


def test_backward_steps_are_drawn_in_the_page_from_the_traces_gradients():
    """Every backward step of the worked example's model, as the page is sent it (the step the
    element opens on) or fetches it (app/served.py's route): each map is the traced gradient.
    Reference: run_trace's autograd gradients (float64), to float32 (rtol 1e-6). A page choice
    leaves the element as it was; a step the page could not fetch is the server's to send."""
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward")
    loaded = load("worked-example")
    tokens = loaded.encode(PROMPT)
    trace = run_trace(loaded.model, tokens, backward=True, target=Target(loaded.tokenizer.token_id("mat"), 4))
    sent = backward_sent(at)
    tensors = {step.key: step.names for step in backward_steps(loaded.model)}
    assert sent["chosen"] == 0 and sent["step"]["index"] == 0 and len(sent["keys"]) == len(sent["titles"])
    maps = 0
    for index, key in enumerate(sent["keys"]):
        step = sent["step"] if index == 0 else fetch_step(at, index)
        assert step["key"] == key
        for grid in step["grids"]:
            expected = traced_grid(trace, tokens, grid)
            assert grid["exact"] and grid["values"].shape == expected.shape, grid["label"]
            np.testing.assert_allclose(grid["values"], expected, rtol=1e-6, atol=1e-7 * np.abs(expected).max())
            assert grid["cell"] == (grid["name"] in tensors[key])  # a cell's arithmetic: the step's tensors, not its weights
            maps += 1
        assert not step["missing"] or all(name not in trace.grads for name in step["missing"])
    assert maps >= 2 * len(sent["keys"]) and fetch_step(at, len(sent["keys"])) is None
    element = lambda: next(c.proto.json for c in at.get("bidi_component") if '"titles"' in c.proto.json)  # noqa: E731
    first = element()
    step_in_page(at, sent["keys"][3])
    assert not at.exception and element() == first and at.session_state["explore_bstep"] == sent["keys"][3]
    # the page could not fetch it (its message says so): the server sends it, with a new pick
    del at.session_state["backward_page_choice"]  # what the callback does with an unfetched step
    at.run()
    again = backward_sent(at)
    assert again["step"]["index"] == 3 == again["chosen"] and again["pick"] != sent["pick"]


def test_backward_steps_of_a_one_block_trace_are_fetched_within_that_block(monkeypatch):
    """Where a whole trace is over the server's budget (a large model), the trace holds one block's
    steps: the page fetches those; another block's is the server's to send (the route answers 404)."""
    monkeypatch.setattr("glassbox.app.explore.common.trace_budget", lambda: 0)
    at = start("screens/explore.py", model="worked-example", prompt=PROMPT, view="Backward")
    assert not at.exception and not at.error
    keys = backward_sent(at)["keys"]
    blocks = [key.split("-")[0] for key in keys]  # b1-…, b0-… (the head's steps count with the last block)
    same = [i for i, b in enumerate(blocks) if b == "b1"]
    other = [i for i, b in enumerate(blocks) if b == "b0"]
    assert same and other and all(fetch_step(at, i) is not None for i in same[:2])
    assert fetch_step(at, other[0]) is None
    # the page steps to another block's step (drawn from what it fetched before, say): the server
    # traces that block and sends a new element on that step, built from the new trace
    step_in_page(at, keys[other[0]])
    assert not at.exception and not at.error
    again = backward_sent(at)
    assert again["step"]["key"] == keys[other[0]] == keys[again["chosen"]]
    assert fetch_step(at, other[1]) is not None and fetch_step(at, same[0]) is None


def test_a_zoomed_map_is_its_window_of_the_gradient():
    """A map wider than the page draws exactly (∂L/∂logits over the default model's 598 tokens) is
    block means until its zoom narrows it: then its window, exactly, and a click's column is
    counted from the window's start. Reference: run_trace's gradient (float32, rtol 1e-6)."""
    at = start("screens/explore.py", model="default", prompt=PROMPT, view="Backward", bstep="logits", target="")
    loaded = load("default")
    trace = run_trace(loaded.model, loaded.encode(PROMPT), backward=True)
    expected = trace["grad:hook_logits"].numpy()
    (grid,) = backward_sent(at)["step"]["grids"]
    assert not grid["exact"] and not grid["cell"] and grid["values"].shape == (5, 256) and "block means" in grid["size"]
    at.session_state["bw:hook_logits:cols"] = (100, 300)
    at.run()
    (grid,) = backward_sent(at)["step"]["grids"]
    assert grid["exact"] and grid["cell"] and (grid["r0"], grid["c0"]) == (0, 100)
    assert grid["cols"][0].startswith("100:") and "columns 100–299 shown" in grid["size"]
    np.testing.assert_allclose(grid["values"], expected[:, 100:300], rtol=1e-6, atol=1e-7 * np.abs(expected).max())


def test_a_mixture_of_experts_step_says_which_maps_no_gradient_reaches():
    """The micro mixture of experts' MLP step, whose expert 0 no position chose here: each map is
    the traced gradient (run_trace, mean next-token loss, float32, 1e-6), and a map's caption says
    "every entry exactly 0" exactly where the traced gradient is all zero."""
    at = start("screens/explore.py", model="micro-moe", prompt=PROMPT, view="Backward", bstep="b1-mlp", target="")
    loaded = load("micro-moe")
    tokens = loaded.encode(PROMPT)
    trace = run_trace(loaded.model, tokens, backward=True)
    grids = backward_sent(at)["step"]["grids"]
    zero = 0
    for grid in grids:
        expected = traced_grid(trace, tokens, grid)
        np.testing.assert_allclose(grid["values"], expected, rtol=1e-6, atol=1e-6 * max(np.abs(expected).max(), 1e-30))
        assert ("every entry exactly 0" in grid["size"]) == (not expected.any()), grid["label"]
        zero += not expected.any()
    assert zero and zero < len(grids)  # some maps get no gradient, the others do
