"""`python -m glassbox COMMAND`: the command line (glassbox.cli, model/api/cli.py)."""
from glassbox.cli import main

raise SystemExit(main())
