"""`glassbox app [STREAMLIT OPTIONS]`: the web app (Streamlit) on the bundled default model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def add_arguments(sub) -> None:
    p = sub.add_parser(
        "app",
        help="start the web app (Streamlit); further options go to `streamlit run`",
        epilog="Any other option is passed to `streamlit run`, e.g. --server.port 8502.",
    )
    p.set_defaults(func=run)  # main() hands it the options it does not know (args.streamlit_options)


def run(args) -> int:
    """Run the Streamlit app (app/main.py of this installation), passing any extra options on.
    From a source checkout it runs in the checkout, so that .streamlit/config.toml applies."""
    import importlib.util

    from glassbox.model.engine import GlassboxError

    if importlib.util.find_spec("streamlit") is None:
        raise GlassboxError("The app needs Streamlit: pip install 'glassbox[app]' (or -r requirements.txt)")
    from importlib import resources

    main_script = Path(str(resources.files("glassbox.app").joinpath("main.py")))
    checkout = main_script.parent.parent
    cwd = checkout if (checkout / ".streamlit" / "config.toml").exists() else None
    # app.launch is `streamlit run` with the libraries imported before the server listens
    command = [sys.executable, "-m", "glassbox.app.launch", "run", str(main_script), *args.streamlit_options]
    if os.name != "posix":
        return subprocess.call(command, cwd=cwd, env=os.environ.copy())
    # Streamlit takes this process's place (same pid): a SIGTERM or Ctrl-C meant for `glassbox app`
    # reaches the server itself, rather than ending a parent and leaving the server on its port.
    if cwd is not None:
        os.chdir(cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
