"""Lab: grokking (model/lab/grokking.py)."""

from glassbox.app.components.lab import lab_header

exp = lab_header("grokking")
