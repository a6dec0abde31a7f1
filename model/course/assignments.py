"""Assignments: a link a teacher hands a class, fixing a lesson (or an explorer view), a model, a
prompt and an exercise seed. The link is the state itself, in the URL's query: nothing is stored on
the server, and every student who opens it gets the same numbers. ``glassbox assign`` prints one;
each page has a button that copies the link of what it shows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from glassbox.model.course import LESSON
from glassbox.model.course.exercises import check_seed
from glassbox.model.engine import GlassboxError

# The explorer's views, by the names its ?view= takes (app/explore's VIEWS: a test keeps them equal;
# the library does not import the app).
EXPLORER_VIEWS = (
    "Overview",
    "Tokens & embeddings",
    "Attention",
    "LayerNorm",
    "MLP",
    "Residual stream",
    "Backward",
    "Ask why",
    "Circuits",
    "Head catalog",
    "Features",
    "Attribution graph",
    "Compare",
    "Export",
    "Streams",
    "Tensors & gradients",
)  # the last two: an encoder-decoder's own
MARK = "assignment"  # the query parameter that makes a link an assignment (read-only until "start from here")
MAX_PROMPT = 2000


@dataclass(frozen=True)
class Assignment:
    target: str  # a lesson's slug, or an explorer view's name
    model: str = "default"
    prompt: str | None = None
    seed: int | None = None  # the exercises' seed (lessons)

    def __post_init__(self):
        if self.target not in LESSON and self.target not in EXPLORER_VIEWS:
            raise GlassboxError(
                f"{self.target!r} is neither a lesson ({', '.join(LESSON)}) nor an explorer view ({', '.join(EXPLORER_VIEWS)})"
            )
        if self.prompt is not None and len(self.prompt) > MAX_PROMPT:
            raise GlassboxError(f"An assignment's prompt is at most {MAX_PROMPT} characters")
        if self.seed is not None:
            object.__setattr__(self, "seed", check_seed(self.seed))
        if not self.model.strip():
            raise GlassboxError("An assignment names a model (default: the bundled one)")

    @property
    def is_lesson(self) -> bool:
        return self.target in LESSON

    @property
    def path(self) -> str:
        """The page's URL path, after the server's address."""
        return LESSON[self.target].url_path if self.is_lesson else "explore"

    def query(self) -> dict[str, str]:
        values = {} if self.is_lesson else {"view": self.target}
        values["model"] = self.model
        if self.prompt is not None:
            values["prompt"] = self.prompt
        if self.seed is not None:
            values["seed"] = str(self.seed)
        values[MARK] = "1"
        return values

    def url(self, base: str = "http://localhost:8501") -> str:
        return f"{base.rstrip('/')}/{self.path}?{urlencode(self.query())}"

    def describe(self) -> list[tuple[str, str]]:
        """What the link fixes, as (what, value) rows for the page's read-only summary."""
        rows = [
            ("lesson" if self.is_lesson else "explorer view", LESSON[self.target].title if self.is_lesson else self.target),
            ("model", self.model),
        ]
        if self.prompt is not None:
            rows.append(("prompt", self.prompt))
        if self.seed is not None:
            rows.append(("exercise seed", str(self.seed)))
        return rows


def from_query(target: str, query: Mapping[str, str]) -> Assignment | None:
    """The assignment a page's query string holds (``target``: the page's lesson or view), or None
    when the link is not one. A bad value raises GlassboxError, for the page to say."""
    if query.get(MARK) not in ("1", "true"):
        return None
    seed = query.get("seed")
    return Assignment(
        target, model=query.get("model") or "default", prompt=query.get("prompt"), seed=None if seed is None else check_seed(seed)
    )
