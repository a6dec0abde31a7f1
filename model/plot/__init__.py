"""Figures of a trace's tensors, shared by ``Trace.figure`` and the app: the labelled heatmap
(heatmap.py), the labels and colours charts use (labels.py) and the one rule for which slice of
a tensor a head or an expert is, and how a tensor becomes a grid of rows and columns (grid.py).

plotly (and Pillow, for heatmaps sent as images) are the app's extras: imported inside the
functions that draw, so the rest imports without them."""
