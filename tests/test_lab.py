"""The lab's frame (model/lab/, model/io/assets.py's lab names, `glassbox lab`, the picker's Lab
checkpoint): what every experiment shares. Each experiment's own figures are tested in
tests/test_lab_NAME.py."""

from __future__ import annotations

import json

import pytest
import torch

from glassbox import load
from glassbox.model.engine import GlassboxError, ModelConfig, Transformer
from glassbox.model.io.assets import LAB_NAME, lab_checkpoint
from glassbox.model.io.checkpoint import model_key
from glassbox.model.io.tokenizer import Tokenizer
from glassbox.model.lab import LAB, experiment
from glassbox.model.lab.runs import Run, live_run_name, save_checkpoint, write_run
from tests.helpers import cli, start

RUN = "induction-0123456789"  # a run the app trained, as live_run_name names them


@pytest.fixture
def home_run(tmp_path, monkeypatch):
    """A run the app trained, in $GLASSBOX_HOME/lab/runs: two checkpoints of a tiny model."""
    monkeypatch.setenv("GLASSBOX_HOME", str(tmp_path))
    words = ["ba", "ko", "mi", "to"]
    cfg = ModelConfig(vocab_size=len(words), n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=1, attn_only=True)
    folder = tmp_path / "lab" / "runs" / RUN
    models = {}
    for step in (0, 5):
        models[step] = Transformer(cfg).init_weights(step)
        save_checkpoint(folder, step, models[step], Tokenizer.from_words(words), {"source": "a test"})
    write_run(folder, {"experiment": "induction", "steps": 5, "checkpoints": [0, 5]})
    return folder, models


def test_the_command_lists_the_four_experiments_and_knows_their_names():
    from glassbox.cli.lab import LAB_NAMES

    assert LAB_NAMES == tuple(LAB) == ("induction", "grokking", "superposition", "sae")
    listed = cli("lab", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["name"] for e in json.loads(listed.stdout)] == list(LAB)
    plain = cli("lab").stdout
    assert all(name in plain and LAB[name].paper in plain for name in LAB)


def test_bad_requests_are_one_line_errors():
    for args, said in (
        (("lab", "nope"), "invalid choice"),
        (("lab", "sae", "--shipped", "--steps", "3"), "--shipped prints the shipped run"),
        (("lab", "sae", "--steps", "0"), "--steps"),
    ):
        result = cli(*args)
        assert result.returncode == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result
    with pytest.raises(GlassboxError, match="No lab experiment 'nope'"):
        experiment("nope")


def test_a_lab_name_opens_that_step_of_that_run(home_run):
    folder, models = home_run
    assert lab_checkpoint(f"lab:{RUN}@5") == folder / "checkpoints" / "step-000005"
    assert lab_checkpoint("lab:induction@400").parent.parent.name == "induction"  # the shipped run's folder
    loaded = load(f"lab:{RUN}@5")
    for name, weight in models[5].state_dict().items():  # the weights saved at step 5, read back exactly
        assert torch.equal(loaded.model.state_dict()[name], weight), name
    assert model_key(f"lab:{RUN}@5") == f"lab:{RUN}@5"
    run = Run.named(RUN)
    assert run.checkpoint_steps == [0, 5] and run.model_name(0) == f"lab:{RUN}@0"
    with pytest.raises(GlassboxError, match="no checkpoint at that step"):
        load(f"lab:{RUN}@7")
    with pytest.raises(GlassboxError, match="no checkpoint at step 7"):
        run.model_name(7)


@pytest.mark.parametrize("name", ["lab:../../etc@1", "lab:induction@x", "lab:Induction@1", "lab:induction-zz@1", "lab:a/b@1"])
def test_nothing_but_the_two_forms_is_a_lab_name(name, tmp_path, monkeypatch):
    """A lab name reaches a run folder only: anything else is an ordinary path, refused as one."""
    monkeypatch.chdir(tmp_path)
    assert LAB_NAME.fullmatch(name) is None and lab_checkpoint(name) is None
    with pytest.raises(GlassboxError, match="No model"):
        load(name)


def test_live_runs_are_named_by_their_settings():
    a, b = live_run_name("grokking", {"steps": 10, "seed": 0}), live_run_name("grokking", {"seed": 0, "steps": 10})
    assert a == b and LAB_NAME.fullmatch(f"lab:{a}@10")  # the order of the settings does not matter
    assert live_run_name("grokking", {"steps": 11, "seed": 0}) != a


def test_the_explorer_opens_a_lab_checkpoint_and_offers_the_runs_other_steps(home_run):
    at = start("screens/explore.py", model=f"lab:{RUN}@5", prompt="ba ko mi ba ko", view="Attention")
    assert not at.exception and not at.error
    assert at.selectbox(key="explore_model_source").value == "Lab checkpoint"
    assert at.selectbox(key="explore_model_lab").options == [f"lab:{RUN}@0 · step 0", f"lab:{RUN}@5 · step 5"]
    at.selectbox(key="explore_model_lab").set_value(f"lab:{RUN}@0").run()  # another step of the same run
    assert not at.exception and at.session_state["explore_model"] == f"lab:{RUN}@0"


def test_train_it_now_trains_on_the_lane_once_for_everyone_asking_the_same(tmp_path, monkeypatch):
    """The page's live run: trained on the long lane (model/serving/lane.py) into $GLASSBOX_HOME/lab/runs
    (made on a fresh install), shown, and then read back by the next visitor with the same settings
    without training again."""
    monkeypatch.setenv("GLASSBOX_HOME", str(tmp_path / "home"))
    at = start("lab/sae.py")
    assert not at.number_input  # the live run's settings only with Train it now
    at.radio(key="lab_sae_run").set_value("Train it now").run()
    at.number_input(key="lab_sae_steps").set_value(20).run()
    assert not at.exception and any("Press Train" in i.value for i in at.info)  # nothing trains before the press
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception and not at.error
    name = live_run_name("sae", {"steps": 20, "seed": 0})
    run = Run.named(name)
    assert run.path == tmp_path / "home" / "lab" / "runs" / name and run.figures["steps"] == 20 and run.figures["live"]
    made = (run.path / "run.json").stat().st_mtime_ns
    again = start("lab/sae.py")  # another visitor, the same settings: the run is read, not trained
    again.radio(key="lab_sae_run").set_value("Train it now").run()
    again.number_input(key="lab_sae_steps").set_value(20).run()
    assert not again.exception and not [b for b in again.button if b.label == "Train"]
    assert (run.path / "run.json").stat().st_mtime_ns == made


@pytest.mark.parametrize("name", list(LAB))
def test_each_page_opens_on_its_shipped_run_and_offers_settings_to_train_one(name):
    """The shipped run at once, no settings; Train it now: steps, a seed (grokking: its training
    pairs too) and the estimate from the shipped run's measured time per step, before any training."""
    at = start(f"lab/{name}.py")
    assert not at.exception and not at.error and not at.number_input
    at.radio(key=f"lab_{name}_run").set_value("Train it now").run()
    assert [n.label for n in at.number_input] == ["Steps", "Seed"]
    assert at.number_input(key=f"lab_{name}_steps").value == experiment(name).code.LIVE_STEPS
    shipped = Run.shipped(name).figures
    expected = (
        shipped["seconds"]
        / shipped["steps"]
        * experiment(name).code.LIVE_STEPS
        * getattr(experiment(name).code, "LIVE_STEP_COST", 1.0)
    )
    said = " ".join(i.value for i in at.info)
    assert f"about {expected:.0f} s on this server" in said.replace("\\", ""), said
