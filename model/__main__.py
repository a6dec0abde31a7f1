from glassbox.cli import main

raise SystemExit(main())
