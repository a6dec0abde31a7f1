"""Lab: superposition (model/lab/superposition.py)."""

from glassbox.app.components.lab import lab_header

exp = lab_header("superposition")
