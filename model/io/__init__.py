"""Getting models in and out: checkpoints (Glassbox's own format and converted hub layouts,
one converter per source format in ``convert/``), tokenizers, and the shipped assets."""
