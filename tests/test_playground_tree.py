"""The playground's generation tree (app/components/generation_player.py, app/screens/playground.py).
AppTest cannot click the page's Force button: the tests do what its message makes the server do
(the branch kept for the run it starts, ``BRANCH``), then run. Reference: the library's own generation, run here with the same
settings (model.generate, and a fresh generation of the forced prefix for a branch)."""

import json

import glassbox as gb
from glassbox.app.components.generation_player import BRANCH
from tests.helpers import press, shown, start

PROMPT = "Tom had"


def player(at) -> dict:
    (sent,) = [json.loads(c.proto.json) for c in at.get("bidi_component") if "steps" in json.loads(c.proto.json)]
    return sent


def force(at, path: int, step: int, token_id):
    """What the page's Force button sends, then the run it causes."""
    at.session_state[BRANCH] = {"path": path, "step": step, "token_id": token_id}
    return at.run()


def generated(**query):
    at = start("screens/playground.py", prompt=PROMPT, max_new="6", seed="4", **query)
    return press(at)


def test_generate_makes_a_tree_and_force_branches_it():
    model = gb.load("default")
    at = generated()
    assert not at.exception and not at.error
    tree = at.session_state["generation"]["tree"]
    expected = model.generate(PROMPT, 6, seed=4)
    assert tree.paths[0].token_ids == [t.token_id for t in expected]
    sent = player(at)["tree"]
    assert len(sent["paths"]) == 1 and [s["token"] for s in sent["paths"][0]["steps"]] == [t.token for t in expected]
    step = sent["paths"][0]["steps"][2]
    # the alternatives are the sampler's at that step: after the settings (here none), the model's softmax
    assert step["alternatives"][0]["p"] == max(t for t in expected[2].after.tolist())
    assert len(step["lens"]["p"]) == model.cfg.n_layers + 1
    assert abs(step["lens"]["p"][-1] - expected[2].p_model) < 1e-6  # the lens's last point: the model's own
    other = next(a["token_id"] for a in step["alternatives"] if a["token_id"] != expected[2].token_id)
    at = force(at, 0, 2, other)
    assert not at.exception and not at.error
    sent = player(at)["tree"]
    assert len(sent["paths"]) == 2 and sent["path"] == 1 and sent["step"] == 2
    branch = sent["paths"][1]
    assert branch["parent"] == 0 and branch["from"] == 2 and branch["steps"][2]["forced"]
    prefix = model.tokens(PROMPT) + [t.token_id for t in expected[:2]] + [other]
    fresh = model.generate(prefix, 3, seed=4)
    assert [s["token"] for s in branch["steps"][3:]] == [t.token for t in fresh]
    assert [s["token"] for s in player(at)["steps"]] == [s["token"] for s in branch["steps"]]  # the chips: the new path
    ids = [int(i) for i in branch["explore"]["ids"].split(",")]
    assert ids == prefix + [t.token_id for t in fresh] and model.tokenizer.decode(ids) == branch["explore"]["prompt"]


def test_a_second_seed_shows_where_the_samples_part():
    at = generated()
    at.number_input(key="tree_seed").set_value(9)
    at = next(b for b in at.button if b.label == "Sample again").click().run()
    assert not at.exception and not at.error
    tree = at.session_state["generation"]["tree"]
    sent = player(at)["tree"]
    assert len(sent["paths"]) == 2 and tree.paths[1].sampling.seed == 9
    a, b = tree.paths[0].token_ids, tree.paths[1].token_ids
    first = next((i for i in range(6) if a[i] != b[i]), 6)  # reference: a plain loop over the two
    assert sent["paths"][1]["from"] == first and sent["paths"][1]["parent"] == 0


def test_a_forged_or_stale_branch_is_ignored_and_an_impossible_one_says_why():
    at = generated()
    for bad in ({"path": 5, "step": 0, "token_id": 1}, {"path": 0, "step": 99, "token_id": 1}, {"path": "0", "step": 0}):
        at.session_state[BRANCH] = bad
        at = at.run()
        assert not at.exception and not at.error and len(at.session_state["generation"]["tree"].paths) == 1
    at = force(at, 0, 0, 10**6)
    assert not at.exception and "not in the vocabulary" in shown(at.error[0].value)
