"""`python -m glassbox COMMAND`: the command line (model/tools/cli.py)."""
from glassbox.model.tools.cli import main

raise SystemExit(main())
