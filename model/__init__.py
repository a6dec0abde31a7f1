"""Glassbox without a UI. One subpackage per reason to change:

- ``engine``: the transformer, capture, traces and gradients, the name registry, sampling;
- ``io``: checkpoints, tokenizers, one converter per source format, the shipped assets;
- ``analysis``: the explorer's math on a trace (PCA, logit lens, saliency, …) and exports;
- ``serving``: traces for many sessions at once: their size, what to capture, a bounded cache;
- ``lesson``: the article's worked example: its data, names, steps and arithmetic, live training;
- ``course``: the course's lessons, one module each, their figures computed on the spot;
- ``data``: the default model's story corpus;
- ``tools``: the benchmarks, training the default model (the command line, ``glassbox``, is
  ``glassbox.cli``: model/api/cli/).

Importing it changes nothing in the process: settings such as the allocator's are made by
the commands that start a process (model/api/cli/).
"""
