"""Lab: induction (model/lab/induction.py)."""

from glassbox.app.components.lab import lab_header

exp = lab_header("induction")
