import sys

if sys.argv[1:2] == ["lessons"]:  # python -m app.bench lessons: the course's lessons (app/bench/lessons.py)
    from glassbox.app.bench.lessons import main

    raise SystemExit(main(sys.argv[2:]))
from glassbox.app.bench.views import main

raise SystemExit(main())
