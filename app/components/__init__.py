"""Widgets and charts shared by the pages: the labelled heatmap, the pipeline strip, the stepper."""
