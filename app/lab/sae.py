"""Lab: sae (model/lab/sae.py)."""

from glassbox.app.components.lab import lab_header

exp = lab_header("sae")
