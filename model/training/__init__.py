"""What every training loop here shares (the worked example's live training, the micro-models,
the course's runs, the default model's trainer): the learning-rate schedules."""
