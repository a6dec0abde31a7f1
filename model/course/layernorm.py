"""The lesson on LayerNorm: y = (x − mean(x)·1) / std(x), then γ ⊙ y + β. Centring projects x onto the
plane orthogonal to 1 (every entry's mean removed); dividing by the standard deviation puts the
result on the sphere of radius √d inside that plane (‖y‖² = d · var(y) = d). RMSNorm skips the
centring and divides by the root mean square: the sphere of radius √d, the plane not needed.
Because the output does not change when x is scaled or shifted along 1, the Jacobian J = ∂y/∂x
sends 1 and the centred x to 0, and the gradient through the norm, Jᵀg for any g from above, is
orthogonal to both. Also γ and β of every norm of the loaded model, and that gradient on its own
residual stream (the loss's, from the engine's backward pass)."""

from __future__ import annotations

import numpy as np
import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import GRAD, GlassboxError, Target, check_prompt, run_trace
from glassbox.model.io.checkpoint import LoadedModel, load

SLUG = "layernorm"
PROMPT = "Sam was very"
START_3D = (2.0, 0.5, -1.0)  # the page's vector to move, at first


def centre_and_scale(x, eps: float = 0.0) -> dict:
    """Each step of LayerNorm without γ and β, in float64: the mean, the centred vector (x projected
    onto the plane orthogonal to 1), the standard deviation (biased: divided by d), the output."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean()
    centred = x - mean
    std = np.sqrt((centred**2).mean() + eps)
    return {"x": x, "mean": float(mean), "centred": centred, "std": float(std), "out": centred / std}


def rms_norm(x, eps: float = 0.0) -> dict:
    """RMSNorm without its γ: x divided by its root mean square (no centring)."""
    x = np.asarray(x, dtype=np.float64)
    rms = np.sqrt((x**2).mean() + eps)
    return {"x": x, "rms": float(rms), "out": x / rms}


def normalise(x: torch.Tensor, eps: float = 0.0, centre: bool = True) -> torch.Tensor:
    """The norm without γ and β, in torch (for autograd): LayerNorm, or RMSNorm with ``centre`` False."""
    if centre:
        x = x - x.mean()
    return x / (x.pow(2).mean() + eps).sqrt()


def jacobian(x, eps: float = 0.0, centre: bool = True) -> np.ndarray:
    """∂y/∂x (d × d) of ``normalise`` at x, by torch's autograd in float64."""
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    with torch.inference_mode(False), torch.enable_grad():
        return torch.autograd.functional.jacobian(lambda v: normalise(v, eps, centre), x).numpy()


def gradient_through(x, upstream, eps: float = 0.0) -> dict:
    """The gradient through LayerNorm's normalisation, Jᵀg, for the gradient g arriving at its
    output, and its dot products with 1 and with the centred x, beside the sizes that make them
    small or not (‖Jᵀg‖·‖1‖, ‖Jᵀg‖·‖x − mean‖). J·1 is 0; J·(x − mean) is 0 only without eps: with it,
    J·(x − mean) = eps/(var + eps) · (x − mean)/√(var + eps), and ``eps_share`` is eps/(var + eps)."""
    J = jacobian(x, eps)
    g = np.asarray(upstream, dtype=np.float64)
    grad = J.T @ g
    centred = centre_and_scale(x)["centred"]
    var = float((centred**2).mean())
    ones = np.ones_like(grad)
    return {
        "grad": grad,
        "dot_ones": float(grad @ ones),
        "dot_centred": float(grad @ centred),
        "scale_ones": float(np.linalg.norm(grad) * np.sqrt(len(grad))),
        "scale_centred": float(np.linalg.norm(grad) * np.linalg.norm(centred)),
        "J_ones": float(np.abs(J @ ones).max()),
        "J_centred": float(np.abs(J @ centred).max()),
        "centred_max": float(np.abs(centred).max()),
        "var": var,
        "eps_share": eps / (var + eps),
    }


def norm_names(loaded: LoadedModel) -> list[str]:
    """The model's norms over d_model, in forward order: each block's ln1 and ln2, then ln_final."""
    names = [
        f"blocks.{b}.{n}" for b in range(loaded.cfg.n_layers) for n in ("ln1", "ln2") if n == "ln1" or not loaded.cfg.attn_only
    ]
    return names + (["ln_final"] if loaded.cfg.final_norm else [])


def gammas_betas(loaded: LoadedModel) -> list[dict]:
    """γ (``.w``) and β (``.b``; None for RMSNorm) of every norm, as lists."""
    rows = []
    for name in norm_names(loaded):
        norm = loaded.model.get_submodule(name)
        rows.append(
            {
                "norm": name,
                "gamma": norm.w.detach().double().tolist(),
                "beta": None if norm.b is None else norm.b.detach().double().tolist(),
            }
        )
    return rows


def on_the_model(loaded: LoadedModel, prompt: str, block: int = 0) -> dict:
    """Block ``block``'s ln1 at the prompt's last position: its input x (the residual stream), and
    the gradient arriving at the normalised vector (before γ and β) of the loss of the model's own
    top prediction there (the engine's backward pass), taken back through the normalisation with the
    model's eps (``gradient_through``)."""
    if loaded.cfg.norm != "layernorm" or loaded.cfg.norm_position != "pre":
        raise GlassboxError(
            "The gradient on the model is worked out for a pre-norm LayerNorm; this model's norms are "
            f"{loaded.cfg.norm_position}-norm {loaded.cfg.norm}"
        )
    tokens = loaded.encode(prompt)
    check_prompt(loaded.cfg, tokens)
    with torch.no_grad():
        top = int(loaded.model(torch.tensor([tokens], device=loaded.model.device)).logits[0, -1].argmax())
    p = f"blocks.{block}."
    trace = run_trace(
        loaded.model, tokens, names=[p + "hook_resid_pre", p + "ln1.hook_normalized"], backward=True, target=Target(top)
    )
    x = trace[p + "hook_resid_pre"][-1].double().cpu().numpy()
    g = trace[GRAD + p + "ln1.hook_normalized"][-1].double().cpu().numpy()
    return {
        "block": block,
        "top": top,
        "x": x,
        "upstream": g,
        **gradient_through(x, g, loaded.cfg.norm_eps),
        "eps": loaded.cfg.norm_eps,
    }


def figures(loaded: LoadedModel | None = None) -> dict:
    loaded = loaded or load("default")
    steps = centre_and_scale(START_3D)
    rms = rms_norm(START_3D)
    upstream = np.array([1.0, -2.0, 0.5])
    model = on_the_model(loaded, PROMPT)
    listed = lambda d: {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}  # noqa: E731
    return {
        "vector": list(START_3D),
        "layernorm": listed(steps),
        "rmsnorm": listed(rms),
        "two_d": {str(x): centre_and_scale(x)["out"].tolist() for x in ((2.0, 0.6), (0.6, 2.0), (-5.0, 0.1))},
        "jacobian": jacobian(START_3D).tolist(),
        "gradient": listed(gradient_through(START_3D, upstream)),
        "upstream": upstream.tolist(),
        "norms": gammas_betas(loaded),
        "on_the_model": {"prompt": PROMPT, **{k: v for k, v in listed(model).items() if k not in ("x", "upstream")}},
    }


def exercises(seed: int, loaded: LoadedModel | None = None) -> list[Exercise]:
    rng = draw(SLUG, seed)
    x = [int(v) for v in rng.integers(-4, 7, size=4)]
    while len(set(x)) == 1:  # a constant vector has std 0: no LayerNorm output
        x[int(rng.integers(4))] += 1
    steps = centre_and_scale(x)
    i = int(rng.integers(4))
    out = [
        Exercise(
            "std",
            f"x = {x}. What is its standard deviation, as LayerNorm computes it (divide by d = 4, not d − 1)? "
            "Answer to 3 decimals.",
            round(steps["std"], 6),
            tolerance=1e-3,
            hint="Subtract the mean from every entry, average the squares, take the square root.",
            solution=f"mean = {steps['mean']:g}; centred = {[round(float(v), 4) for v in steps['centred']]}; "
            f"std = √({float((steps['centred'] ** 2).mean()):.4f}) = {steps['std']:.4f}.",
            data={"x": x},
        ),
        Exercise(
            "output",
            f"x = {x}. What is entry {i + 1} of LayerNorm(x), without γ and β (γ = 1, β = 0, eps = 0)? Answer to 3 decimals.",
            round(float(steps["out"][i]), 6),
            tolerance=1e-3,
            hint="(x_i − mean) / std, with the std divided by d.",
            solution=f"({x[i]} − {steps['mean']:g}) / {steps['std']:.4f} = {steps['out'][i]:.4f}.",
            data={"x": x, "entry": i},
        ),
    ]
    z = [int(v) for v in rng.integers(-5, 6, size=3)]
    while not any(z):
        z = [int(v) for v in rng.integers(-5, 6, size=3)]
    j = int(rng.integers(3))
    rms = rms_norm(z)
    out.append(
        Exercise(
            "rms",
            f"z = {z}. What is entry {j + 1} of RMSNorm(z), without γ (eps = 0)? Answer to 3 decimals.",
            round(float(rms["out"][j]), 6),
            tolerance=1e-3,
            hint="RMSNorm does not centre: divide by √(mean of the squares).",
            solution=f"rms = √({float((np.asarray(z, float) ** 2).mean()):.4f}) = {rms['rms']:.4f}; "
            f"{z[j]} / {rms['rms']:.4f} = {rms['out'][j]:.4f}.",
            data={"z": z, "entry": j},
        )
    )
    return out
