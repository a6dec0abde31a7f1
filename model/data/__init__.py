"""The data the default model is trained on: stories from a grammar written for Glassbox."""
