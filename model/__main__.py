from glassbox.model.tools.cli import main

raise SystemExit(main())
