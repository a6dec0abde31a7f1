"""The command line (``glassbox``, ``python -m model``), the capture benchmark, and training the
default model."""
