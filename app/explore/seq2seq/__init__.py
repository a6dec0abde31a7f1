"""The explorer for an encoder-decoder (T5), whose pass reads a source and a target: its own set
of views, one module each (``render(ctx)`` draws it from the one trace of the source and target);
page.py draws the page around them. The math is model/analysis/seq2seq.py's."""

from glassbox.app.explore.seq2seq import attention, overview, streams, tensors

VIEWS = {"Overview": overview, "Streams": streams, "Attention": attention, "Tensors & gradients": tensors}
