from glassbox.app.bench.views import main

raise SystemExit(main())
