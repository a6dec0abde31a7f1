"""``python -m app.replicas --replicas N --port P``: N copies of the app behind one address, for a
class bigger than one server's trace budget (docs/hosting.md, "Many classrooms").

Each replica is an ordinary `glassbox app` process on its own port (127.0.0.1), with the models
loaded once in it and read-only; nginx listens on ``--port`` and passes each visitor to one of
them. Streamlit keeps a browser's state in the process its websocket reached, so the choice must
stick: nginx gives a new visitor a random route cookie (its request id) and picks the replica by
a consistent hash of that cookie, so every later request of that browser (the page, its static
files, its websocket and any reconnection) goes to the same replica. Response headers name the
replica that answered (X-Glassbox-Replica), which the load script counts.

The replicas share the hub cache read-only: HF_HUB_OFFLINE=1 and GLASSBOX_HUB=0 unless
``--hub`` (so visitors cannot fill the disk), and each gets GLASSBOX_TRACE_BUDGET_GB if set.
nginx (a well-kept one: Debian's) runs in the foreground under a folder of its own; Ctrl-C (or
SIGTERM) stops it and every replica.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROUTE_COOKIE = "glassbox_replica"


def nginx_config(port: int, replica_ports: list[int], folder: Path) -> str:
    """nginx's configuration: ``port`` in front of the replicas, sticky by the route cookie."""
    servers = "\n".join(f"        server 127.0.0.1:{p};" for p in replica_ports)
    return f"""worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    # a visitor without the cookie gets a new route (its request id); one with it keeps its own
    map $cookie_{ROUTE_COOKIE} $route {{
        "" $request_id;
        default $cookie_{ROUTE_COOKIE};
    }}
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        "" close;
    }}
    upstream replicas {{
        hash $route consistent;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;  # Streamlit's websocket
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_read_timeout 1d;  # a websocket stays open while its page does
            proxy_buffering off;
            add_header Set-Cookie "{ROUTE_COOKIE}=$route; Path=/; HttpOnly; SameSite=Lax" always;
            add_header X-Glassbox-Replica $upstream_addr always;
        }}
    }}
}}
"""


@dataclass
class Deployment:
    port: int
    replicas: list[subprocess.Popen]
    nginx: subprocess.Popen
    folder: Path
    replica_ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for process in [self.nginx, *self.replicas]:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for process in [self.nginx, *self.replicas]:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(replicas: int, port: int, folder: Path, hub: bool = False, env: dict | None = None) -> Deployment:
    """``replicas`` app servers and nginx in front of them on ``port``, once every one answers."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise SystemExit("nginx is not installed (Debian: apt-get install nginx)")
    env = {**os.environ, **(env or {})}
    if not hub:
        env |= {"HF_HUB_OFFLINE": "1", "GLASSBOX_HUB": "0"}
    ports = [free_port() for _ in range(replicas)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "glassbox",
                "app",
                "--server.port",
                str(p),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for p in ports
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nginx.conf").write_text(nginx_config(port, ports, folder))
    front = subprocess.Popen(
        [nginx, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deployment = Deployment(port, processes, front, folder, ports)
    try:
        for p in [*ports, port]:
            wait_healthy(f"http://127.0.0.1:{p}/_stcore/health")
    except BaseException:
        deployment.stop()
        raise
    return deployment


def wait_healthy(url: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(url, timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


def stop_on_signal(signum, frame) -> None:
    """SIGTERM as Ctrl-C: the replicas and nginx are stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.replicas", description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=2, help="app processes (default 2)")
    parser.add_argument("--port", type=int, default=8501, help="the address visitors open (default 8501)")
    parser.add_argument("--hub", action="store_true", help="let visitors open (and download) hub models")
    args = parser.parse_args(argv)
    if not 1 <= args.replicas <= 64:
        parser.error("--replicas must be 1..64")
    with tempfile.TemporaryDirectory(prefix="glassbox-replicas-") as folder:
        deployment = start(args.replicas, args.port, Path(folder), args.hub)
        print(f"{args.replicas} replicas behind {deployment.url} (ports {deployment.replica_ports}); Ctrl-C stops them")
        signal.signal(signal.SIGTERM, stop_on_signal)
        try:
            deployment.nginx.wait()
        except KeyboardInterrupt:
            pass
        finally:
            deployment.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
