"""What every Lab page shares (app/lab/): its header, the run it shows (the shipped one at once,
or one trained on the spot on the server's long lane with a progress bar), the step slider that
opens a checkpoint in the explorer, and the paper's numbers beside ours."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.long_task import cancelled_note, long_computation
from glassbox.model.analysis.plans import Plan
from glassbox.model.engine import GlassboxError
from glassbox.model.engine.files import written_whole
from glassbox.model.io.assets import lab_run_folder
from glassbox.model.lab import Experiment, experiment
from glassbox.model.lab.runs import Run, live_run_name, step_done

SHIPPED, LIVE = "The shipped run", "Train it now"


def lab_header(name: str) -> Experiment:
    """The page's title, the paper it reproduces (a link) and the CLI command that makes the same run."""
    exp = experiment(name)
    st.title(exp.title)
    st.caption(
        f"Reproduces [{exp.paper}]({exp.url}). The shipped run is made by `glassbox lab {name} --out assets/lab/{name}`; "
        f"`glassbox lab {name} --json` prints every figure below."
    )
    return exp


def _train_live(exp: Experiment, settings: dict, name: str) -> Run:
    folder = lab_run_folder(name)
    if not (folder / "run.json").is_file():  # another visitor's run with these settings may have finished since
        folder.parent.mkdir(parents=True, exist_ok=True)  # $GLASSBOX_HOME/lab/runs, on a fresh install
        with written_whole(folder) as staged:
            exp.code.train(staged, live=True, on_step=step_done, **settings)
    return Run.named(name)


def lab_run(name: str, max_steps: int, step: int = 50, more: Callable[[list], dict] | None = None) -> Run | None:
    """The run to show: a radio between the shipped run and one trained now. For one trained now,
    its settings (steps up to ``max_steps`` by ``step``, a seed, and what ``more(columns)`` draws in
    the columns left and returns: the experiment's own settings) and a Train button. A run trained
    now is shared by every visitor who asks for the same settings, trained once, kept in
    $GLASSBOX_HOME/lab/runs. None while the visitor has not pressed Train, or the run was cancelled
    or refused (the page says why). Widget keys: lab_NAME_run, lab_NAME_steps, lab_NAME_seed."""
    exp, key = experiment(name), f"lab_{name}"
    choice = st.radio("Run", (SHIPPED, LIVE), key=f"{key}_run", horizontal=True, persist_state="session")
    if choice == SHIPPED:
        try:
            return Run.shipped(name)
        except GlassboxError as exc:  # a checkout without the shipped run: say how to make it
            st.error(plain(f"{exc}. `glassbox lab {name} --out assets/lab/{name}` makes it."))
            return None
    columns = st.columns(3 if more else 2)
    steps = columns[0].number_input(
        "Steps", min_value=step, max_value=max_steps, value=exp.code.LIVE_STEPS, step=step, key=f"{key}_steps"
    )
    seed = columns[1].number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, key=f"{key}_seed")
    settings = {"steps": int(steps), "seed": int(seed), **(more(columns[2:]) if more else {})}
    cancelled_note()
    live = live_run_name(name, settings)
    if (lab_run_folder(live) / "run.json").is_file():
        return Run.named(live)
    if not st.button("Train", type="primary", key=f"{key}:train"):
        st.info(plain(f"Press Train: about {_estimate(name, settings):.0f} s on this server, on its long-computation lane."))
        return None
    return long_computation(
        f"Training ({name})",
        live,
        Plan(f"Training ({name})", settings["steps"], 0, 0, 1),
        None,
        lambda: _train_live(exp, settings, live),
        shared=True,
        seconds=_estimate(name, settings),
    )


def _estimate(name: str, settings: dict) -> float:
    """Seconds, from the shipped run's own measured time per step (its run.json) and the
    experiment's cost of a live step against a shipped one."""
    exp = experiment(name)
    try:
        shipped = Run.shipped(name).figures
    except GlassboxError:
        return 60.0
    per_step = shipped["seconds"] / max(shipped["steps"], 1)
    steps = int(settings.get("steps") or exp.code.LIVE_STEPS)
    cost = exp.code.live_step_cost(settings) if hasattr(exp.code, "live_step_cost") else getattr(exp.code, "LIVE_STEP_COST", 1.0)
    return per_step * steps * cost


def checkpoint_slider(run: Run, key: str, prompt: str, view: str = "Overview") -> int:
    """A slider over the run's saved steps, and a link that opens that step's model in the
    explorer on ``prompt`` (the view ``view``). Returns the chosen step."""
    steps = run.checkpoint_steps
    if not steps:
        raise GlassboxError("This run saved no checkpoints")
    step = st.select_slider("Step", steps, value=steps[-1], key=key, help="The steps where the run saved its model")
    st.page_link(
        "screens/explore.py",
        label=f"Open the model at step {step:,} in the explorer",
        icon=":material/search:",
        query_params={"model": run.model_name(step), "prompt": prompt, "view": view},
    )
    return step


def paper_table(rows: list[dict]) -> None:
    """The paper's numbers beside ours: one row per figure, the two side by side and a word on each
    difference below (a table's cells cut such sentences off or make its columns unreadably narrow)."""
    st.subheader("The paper's numbers beside ours")
    for row in rows:
        with st.container(border=True):
            st.markdown(f"**{plain(row['what'])}**")
            paper, ours = st.columns(2)
            paper.markdown(f"*The paper:* {plain(row['paper'])}")
            ours.markdown(f"*Ours:* {plain(row['ours'])}")
            if row.get("note"):
                st.caption(plain(f"Why they differ: {row['note']}"))
