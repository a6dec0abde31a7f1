"""`python -m glassbox COMMAND`: the command line (glassbox.cli, model/api/cli/)."""

from glassbox.cli import main

raise SystemExit(main())
