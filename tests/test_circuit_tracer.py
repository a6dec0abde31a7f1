"""The attribution graph against circuit-tracer's own (the package from the registry, run on its
TransformerLens replacement model): the same model weights, the same transcoders (the shipped
default-transcoders, converted to its SingleLayerTranscoder), the same prompt and target. Reference:
circuit-tracer's adjacency matrix, edge for edge, to 1e-5 of the largest edge (its float32 pass
against ours in float64, on a copy of the same weights).

Its target is the logit less the mean logit (our ``demeaned=True``); a token's node is its
embedding in both (the positional table's rows are constants). The prompt starts with <|endoftext|>, as circuit-tracer wants a
special token first; it drops that position's features and error, and is told to keep them here,
as our graph keeps every position's."""

import pytest
import torch

import glassbox
from tests.helpers import hooked_transformer, require

PROMPT = "Once upon a time, there was a little"


def circuit_tracer_graph(model, transcoders, tokens: list[int], token: int):
    require("circuit_tracer", "circuit-tracer")
    import huggingface_hub.constants

    # circuit-tracer 0.5 imports a setting that huggingface_hub 1.0 removed (hf_transfer); it is
    # only read when circuit-tracer downloads, which it does not do here
    huggingface_hub.constants.HF_HUB_ENABLE_HF_TRANSFER = getattr(huggingface_hub.constants, "HF_HUB_ENABLE_HF_TRANSFER", False)
    from circuit_tracer.attribution.attribute import attribute
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet

    converted = {}
    for layer, t in enumerate(transcoders):
        assert t.architecture == "transcoder" and t.reads == f"blocks.{layer}.ln2.hook_out"
        plt = SingleLayerTranscoder(t.d_in, t.d_sae, torch.nn.ReLU(), layer, device=torch.device("cpu"), dtype=torch.float32)
        with torch.no_grad():  # circuit-tracer keeps W_enc as (features, d_model); SAELens as (d_model, features)
            for name, value in (("W_enc", t.W_enc.T), ("b_enc", t.b_enc), ("W_dec", t.W_dec), ("b_dec", t.b_dec)):
                getattr(plt, name).copy_(value)
        converted[layer] = plt
    replacement = hooked_transformer(model, TransformerLensReplacementModel)
    # its MLP wrapper's hooks: the MLP's input (after ln2) and output, as its own configs name them
    replacement._configure_replacement_model(TranscoderSet(converted, "mlp.hook_in", "mlp.hook_out"))
    replacement.tokenizer.add_special_tokens({"bos_token": "<|endoftext|>"})
    replacement.zero_positions = slice(0, 0)  # every position's features and error are nodes, as in ours
    return attribute(torch.tensor(tokens), replacement, attribution_targets=torch.tensor([token]), batch_size=64)


def test_the_graph_is_circuit_tracers():
    loaded = glassbox.load("default")
    transcoders = loaded._transcoders("default-transcoders")
    tokens = [loaded.token_id("<|endoftext|>"), *loaded.tokens(PROMPT)]
    token = int(loaded.model(torch.tensor([tokens])).logits[0, -1].argmax())
    ours = loaded.attribution_graph(tokens, token, transcoders, demeaned=True, dtype=torch.float64)
    theirs = circuit_tracer_graph(loaded, transcoders, tokens, token)

    n, layers = len(tokens), loaded.cfg.n_layers
    features = [(node.block, node.position, node.feature) for node in ours.nodes if node.kind == "feature"]
    assert features == [
        tuple(map(int, f)) for f in theirs.active_features
    ]  # the same active features, in (layer, position, feature) order
    assert torch.allclose(theirs.activation_values, torch.tensor([v.value for v in ours.nodes if v.kind == "feature"]), atol=1e-4)
    # circuit-tracer's node order: features, errors (layer by layer), tokens, the logit; ours:
    # tokens, features, errors, the logit
    order = [
        *range(n, n + len(features)),
        *range(n + len(features), n + len(features) + layers * n),
        *range(n),
        len(ours.nodes) - 1,
    ]
    expected = ours.edges[order][:, order].float()
    assert theirs.adjacency_matrix.shape == expected.shape
    scale = float(expected.abs().max())
    difference = float((theirs.adjacency_matrix - expected).abs().max())
    assert difference <= 1e-5 * scale, (difference, scale)
    assert float(theirs.logit_probabilities[0]) == pytest.approx(ours.probability, abs=1e-5)
    assert ours.completeness() < 1e-10  # and ours (float64), unlike circuit-tracer's, adds up to the target with its biases
