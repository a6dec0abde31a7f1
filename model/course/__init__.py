"""The course: one module per lesson, each computing its figures on the spot (plain torch, or the
engine on a loaded model). The app's lesson pages (app/course/) and `glassbox course LESSON
--json` call the same functions; nothing here is typed in.

Each lesson module has ``figures(loaded) -> dict``: the lesson's figures as JSON-ready values,
``loaded`` being the model a lesson runs on (a LoadedModel; lessons about arithmetic alone
ignore it), and ``exercises(seed, loaded) -> list[Exercise]`` (model.course.exercises): two to
four exercises whose numbers come from the seed and whose answers are computed. The rest of each
module is the functions its page calls with the learner's settings.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from glassbox.model.engine import GlassboxError

COURSE_MODEL = "default"  # the bundled story model: lessons that need a real model run on it


@dataclass(frozen=True)
class Lesson:
    slug: str  # `glassbox course <slug>`; the page's URL is /course-<slug>
    title: str
    question: str  # what the lesson answers, in one line
    module: str  # model.course.<module>
    step: str  # the worked example's step where the same thing happens (?step=)
    view: str  # the explorer's view where it happens on any prompt (?view=)

    @property
    def url_path(self) -> str:
        return f"course-{self.slug}"

    @property
    def page(self) -> str:
        """The page's file, relative to app/."""
        return f"course/{self.module}.py"

    def figures(self, loaded: Any = None) -> dict:
        return importlib.import_module(f"glassbox.model.course.{self.module}").figures(loaded)

    def exercises(self, seed: int, loaded: Any = None) -> list:
        """The lesson's exercises for ``seed`` (model.course.exercises), every answer computed now."""
        from glassbox.model.course.exercises import check_seed, check_set

        module = importlib.import_module(f"glassbox.model.course.{self.module}")
        return check_set(self.slug, module.exercises(check_seed(seed), loaded))

    def remeasure(self) -> str:
        """Re-run what the lesson ships as measured (a module's ``remeasure() -> str`` says what it
        wrote); a lesson that ships nothing measured says so."""
        module = importlib.import_module(f"glassbox.model.course.{self.module}")
        if not hasattr(module, "remeasure"):
            raise GlassboxError(f"The {self.slug} lesson computes everything on the spot: nothing to remeasure")
        return module.remeasure()


LESSONS = [
    Lesson(
        "tokens",
        "Tokens",
        "How text, sound, pictures and prices become a sequence of token ids.",
        "tokens",
        "tokens",
        "Tokens & embeddings",
    ),
    Lesson(
        "attention",
        "Attention by hand",
        "How one token mixes the others: scores, softmax, weighted values.",
        "attention_by_hand",
        "b1-scores",
        "Attention",
    ),
    Lesson(
        "sqrt-dk",
        "Why divide by √d_k",
        "What the scale on the scores keeps the softmax and its gradient from.",
        "dot_product_scale",
        "b1-scores",
        "Attention",
    ),
    Lesson(
        "multi-head",
        "Many heads",
        "How d_model is split into heads that attend on their own, and how W_O joins them again.",
        "multi_head",
        "b1-output-projection",
        "Attention",
    ),
    Lesson(
        "positions",
        "Positions",
        "How a model that sees a set of vectors learns their order.",
        "positional_signals",
        "embedding",
        "Tokens & embeddings",
    ),
    Lesson(
        "mask",
        "The causal mask",
        "Why a decoder never looks ahead, and what changes when it may.",
        "mask",
        "b1-mask",
        "Attention",
    ),
    Lesson(
        "mlp",
        "The MLP",
        "What each position computes on its own: neurons that read a direction and write tokens.",
        "mlp",
        "b1-ffn-expand",
        "MLP",
    ),
    Lesson(
        "layernorm",
        "LayerNorm",
        "What centring and scaling do to a vector, and to the gradient through it.",
        "layernorm",
        "b1-layernorm1",
        "LayerNorm",
    ),
    Lesson(
        "residual",
        "The residual stream",
        "How every block reads one shared sum and adds its own write, and who wrote the prediction.",
        "residual",
        "b1-residual1",
        "Residual stream",
    ),
    Lesson(
        "objective",
        "The training objective",
        "What the loss measures, on every position at once, and how the learning rate moves over training.",
        "training_objective",
        "loss",
        "Backward",
    ),
    Lesson(
        "kv-cache",
        "The KV cache",
        "What generation keeps from step to step, and what that costs at real scale.",
        "kv_growth",
        "b1-qkv",
        "Attention",
    ),
    Lesson(
        "efficiency",
        "Attention, efficiently",
        "Flash, sliding-window, ring and grouped-query attention: the same result for less memory or less work.",
        "efficiency",
        "b1-scores",
        "Attention",
    ),
    Lesson(
        "key-figures",
        "Key figures of real models",
        "Layers, widths, heads and parameters of real models, counted from their configurations.",
        "real_model_figures",
        "tokens",
        "Overview",
    ),
    Lesson(
        "scaling",
        "Scaling laws",
        "How the loss falls as a model grows, measured on models trained here and fitted as a power law.",
        "scaling",
        "loss",
        "Overview",
    ),
    Lesson(
        "zero-one-layer",
        "Zero and one layer",
        "What a model with no block learns (a bigram table), and what one block of attention heads adds (skip-trigrams).",
        "zero_one_layer",
        "b1-output-projection",
        "Circuits",
    ),
    Lesson(
        "induction",
        "Induction heads",
        "How two heads in two blocks copy a sequence seen earlier in the prompt, and when, in training, they form.",
        "induction_heads",
        "b2-scores",
        "Circuits",
    ),
    Lesson(
        "moe",
        "Mixture of experts",
        "How a router sends each token to 2 of 8 experts, and what keeps it from sending everything to a few.",
        "mixture_of_experts",
        "b1-ffn-expand",
        "MLP",
    ),
    Lesson(
        "cross-attention",
        "Encoders and cross-attention",
        "How a model that reads one text and writes "
        "another splits the work between two stacks, and how the writer reads the reader.",
        "cross_attention",
        "b1-scores",
        "Attention",
    ),
]
LESSON = {lesson.slug: lesson for lesson in LESSONS}


def lesson(slug: str) -> Lesson:
    if slug not in LESSON:
        raise GlassboxError(f"No lesson {slug!r}: `glassbox course` lists them ({', '.join(LESSON)})")
    return LESSON[slug]


def lessons_for_view(view: str) -> list[str]:
    """The lessons about what an explorer view shows."""
    return [x.slug for x in LESSONS if x.view == view]


def lessons_for_step(step: str) -> list[str]:
    """The lessons about what a worked-example step shows, in any block (b2-scores as b1-scores)."""

    def unblocked(key: str) -> str:
        return re.sub(r"^b\d+-", "", key)

    return [x.slug for x in LESSONS if unblocked(x.step) == unblocked(step)]
