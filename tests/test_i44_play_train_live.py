"""Issue 44, item 12: Train it live says why a run did what the learner did not expect, and each
claim it makes is checked here against the engine's own training (``train_copy``, ``moe.train_live``
called directly: deterministic, so the page's numbers equal them; for the experts' tab that equality is
tests/test_train_experts_live.py's).

- AdamW at its own η on the corpus lowers p(mat | example) over 100 steps while the loss falls: the
  page says why, and that more steps or η = 0.01 turn it round, which is checked by training longer.
- A 60-step MoE run with α = 0.01 can end less balanced than α = 0: the page says why beside the
  runs table, whose columns fit the page (width "stretch")."""

import pytest

import glassbox as gb
from glassbox.app.components.expert_training import unbalanced_by_alpha
from glassbox.model.micro import moe
from glassbox.model.worked_example.article import published
from glassbox.model.worked_example.training import train_copy, training_batch
from tests.helpers import shown, start

CORPUS = "the example + corpus"


def test_adamw_on_the_corpus_lowering_p_mat_is_explained_and_the_claim_holds():
    at = start("screens/train_live.py")
    at.radio(key="train_data").set_value(CORPUS)
    at.radio(key="train_optimizer").set_value("AdamW")
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception and not at.error
    run = at.session_state["training_run"]
    assert run.p_target[-1] < run.p_target[0] and run.loss[-1] < run.loss[0]  # what the learner saw
    said = " ".join(shown(i.value) for i in at.info)
    assert f"p(mat | example) fell too ({run.p_target[0]:.3f} → {run.p_target[-1]:.3f})" in said
    loaded = gb.load("worked-example")
    config = published()["config"]
    inputs, targets = training_batch(loaded.tokenizer, config["input_ids"], config["target_id"], CORPUS)
    assert f"all {int((targets >= 0).sum())} next-token predictions of the {inputs.shape[0]} sentences" in said
    # the claim: more steps, or η = 0.01, turn it round
    longer = train_copy(loaded.model, inputs, targets, config["input_ids"], config["target_id"], "AdamW", None, 400)
    assert longer.p_target[-1] > longer.p_target[0]
    larger = train_copy(loaded.model, inputs, targets, config["input_ids"], config["target_id"], "AdamW", 0.01, 100)
    assert larger.p_target[-1] > larger.p_target[0]
    # SGD on the example (the page's defaults) raises it, and nothing is said
    at.radio(key="train_data").set_value("the example")
    at.radio(key="train_optimizer").set_value("SGD")
    next(b for b in at.button if b.label == "Train").click().run()
    run = at.session_state["training_run"]
    assert run.p_target[-1] > run.p_target[0] and not [i for i in at.info if "fell too" in shown(i.value)]


@pytest.mark.long
def test_a_short_moe_run_where_the_balance_loss_loses_is_explained():
    at = start("screens/train_live.py")
    at.number_input(key="experts_steps").set_value(60)
    for alpha in (0.0, 0.01):
        at.select_slider(key="experts_alpha").set_value(alpha)
        next(b for b in at.button if b.label == "Train the experts").click().run()
        assert not at.exception and not at.error
    # the page's runs are train_live's with the page's settings (to 1e-12: tests/test_train_experts_live.py,
    # the same tab); here the two differ only in α, and α changed the training
    runs = {r["alpha"]: r for r in at.session_state["expert_runs"]}
    assert sorted(runs) == [0.0, 0.01] and {(r["steps"], r["seed"], r["capacity"]) for r in runs.values()} == {(60, 0, None)}
    page = {a: r["end"] for a, r in runs.items()}
    assert page[0.0]["largest"] != page[0.01]["largest"]
    # seed 0, 60 steps: α = 0.01 ends with a larger largest share than no balance loss (the case)
    assert max(page[0.01]["largest"]) > max(page[0.0]["largest"])
    assert len(unbalanced_by_alpha(at.session_state["expert_runs"])) == 1
    said = " ".join(shown(i.value) for i in at.info)
    assert "α = 0.01 ended less balanced than no balance loss" in said
    assert f"Train both for {moe.LIVE_STEPS} steps or more" in said
    table = at.dataframe[-1].value
    assert list(table.columns)[0] == "settings" and len(table) == 2


@pytest.mark.long
def test_the_moe_notes_claim_holds_at_the_pages_default_length():
    """The claim the note above makes: at the page's default length the balance loss does balance
    (block 2 without it gives its largest expert more than with it). A test of its own so that the
    suite's two workers can train it beside the page's runs."""
    at_default = {a: moe.curve_end(moe.train_live(moe.LIVE_STEPS, a, None, 0), 10) for a in (0.0, 0.01)}
    assert max(at_default[0.01]["largest"]) < max(at_default[0.0]["largest"])
