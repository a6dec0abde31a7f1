"""The playground's distribution is computed in the browser (app/components/sampling_controls.js)
from the logits the server sends. Reference: the engine's sampler, ``distributions``
(model/engine/sampling.py), on the same logits: the page's JavaScript, run by Node (the one
Playwright ships), gives both distributions to 1e-12 (float64 on both sides, sums taken in
another order) and the same number of tokens that can be drawn, over a grid of settings and
logits with ties, a peak and a 50,000-token vocabulary. (tests/test_browser.py drives the sliders
in Chromium.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import playwright
import torch

from glassbox.app.components.sampling_controls import payload
from glassbox.model.engine.sampling import Sampling, distributions
from tests.helpers import start

COMPONENTS = Path(__file__).parents[1] / "app" / "components"
NODE = Path(playwright.__file__).parent / "driver" / "node"

RUNNER = """
import { distributions, decodeFloat64 } from "./sampling_controls.mjs";
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const cases = JSON.parse(input);
  const out = cases.map(({ logits, settings }) => {
    const { before, after } = distributions(decodeFloat64(logits), settings);
    return { before: Array.from(before), after: Array.from(after) };
  });
  process.stdout.write(JSON.stringify(out));
});
"""


def in_the_page(cases: list[tuple[torch.Tensor, dict]], tmp_path: Path) -> list[dict]:
    # the script as the page runs it: page_kit.js first (app/components/page_kit.py)
    (tmp_path / "sampling_controls.mjs").write_text(
        (COMPONENTS / "page_kit.js").read_text() + "\n" + (COMPONENTS / "sampling_controls.js").read_text()
    )
    (tmp_path / "run.mjs").write_text(RUNNER)
    sent = [
        {"logits": payload(logits, [str(i) for i in range(len(logits))], {}, 100, "")["logits"], "settings": settings}
        for logits, settings in cases
    ]
    done = subprocess.run(
        [str(NODE), "run.mjs"], cwd=tmp_path, input=json.dumps(sent), capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def logit_sets() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    ties = torch.randn(40, generator=gen, dtype=torch.float64).round(decimals=1)  # many equal logits
    peaked = torch.randn(300, generator=gen, dtype=torch.float64)
    peaked[17] = 30.0
    return {
        "normal": 3 * torch.randn(200, generator=gen, dtype=torch.float64),
        "ties": ties,
        "peaked": peaked,
        "vocabulary": 4 * torch.randn(50_000, generator=gen, dtype=torch.float64),
    }


SETTINGS = [dict(temperature=t, top_k=k, top_p=p) for t in (0.05, 0.3, 1.0, 1.7) for k in (0, 1, 7) for p in (0.05, 0.6, 1.0)]
SETTINGS.append(dict(temperature=0, top_k=0, top_p=1.0))  # greedy


def test_the_pages_distributions_are_the_samplers(tmp_path):
    cases = [(logits, settings) for logits in logit_sets().values() for settings in SETTINGS]
    results = in_the_page(cases, tmp_path)
    for (logits, settings), page in zip(cases, results):
        before, after = distributions(
            logits, Sampling(temperature=settings["temperature"], top_k=settings["top_k"] or None, top_p=settings["top_p"])
        )
        order = torch.argsort(logits, descending=True, stable=True)  # the page's order: the payload's
        np.testing.assert_allclose(page["before"], before[order].numpy(), rtol=0, atol=1e-12, err_msg=str(settings))
        np.testing.assert_allclose(page["after"], after[order].numpy(), rtol=0, atol=1e-12, err_msg=str(settings))
        assert sum(p > 0 for p in page["after"]) == int((after > 0).sum()), settings


def test_the_page_is_sent_the_prompts_logits_and_the_sessions_settings():
    """The playground sends the logits of the prompt (the engine's ``next_token_logits``), most
    likely first, and the labels of the 15 most likely tokens; settings from the URL go with them."""
    from glassbox.model.engine.sampling import next_token_logits
    from glassbox.model.io.checkpoint import load

    at = start("screens/playground.py", prompt="Tom had", temperature="0.3", top_k="5")
    assert not at.exception and not at.error
    sent = json.loads(at.get("bidi_component")[0].proto.json)
    logits = next_token_logits(load("default"), "Tom had")
    order = torch.argsort(logits, descending=True, stable=True)
    assert np.array_equal(decoded(sent["logits"]), logits[order].numpy())  # bit for bit
    assert sent["ids"] == order[:15].tolist()
    assert sent["settings"] == {"temperature": 0.3, "top_k": 5, "top_p": 1.0, "greedy": False}


def decoded(base64_text: str) -> np.ndarray:
    import base64

    return np.frombuffer(base64.b64decode(base64_text), dtype="<f8")
