"""Many classrooms: N app replicas behind nginx (app/replicas.py).

References: nginx itself (`nginx -t` accepts the configuration the code writes); the replicas'
own answers through nginx (which one answered, from the header nginx adds): a route cookie keeps
a browser on one replica, new visitors spread over both; and a real Chromium session through
nginx (its websocket included) draws a page. The load script's run against two replicas is a
measurement (docs/hosting.md), not a test.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest

from glassbox.app.replicas import ROUTE_COOKIE, free_port, nginx_config, start

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
pytestmark = pytest.mark.skipif(not shutil.os.path.exists(NGINX), reason="nginx is not installed (tests/install.sh)")


def test_nginx_accepts_the_configuration(tmp_path):
    (tmp_path / "nginx.conf").write_text(nginx_config(free_port(), [free_port(), free_port()], tmp_path))
    checked = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr


def replica(url: str, cookie: str | None = None) -> tuple[str, str | None]:
    """Which replica answered, and the route cookie nginx set."""
    request = urllib.request.Request(url, headers={"Cookie": f"{ROUTE_COOKIE}={cookie}"} if cookie else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        route = [c for c in response.headers.get_all("Set-Cookie") or [] if c.startswith(f"{ROUTE_COOKIE}=")]
        return response.headers["X-Glassbox-Replica"], route[0] if route else None


@pytest.mark.browser
def test_two_replicas_behind_nginx_keep_each_browser_on_one_and_serve_the_app(tmp_path, chromium):
    deployment = start(2, free_port(), tmp_path / "nginx")
    try:
        health = deployment.url + "/_stcore/health"
        first, cookie = replica(health)
        route = cookie.split(";")[0].split("=", 1)[1]
        assert cookie.startswith(f"{ROUTE_COOKIE}=") and len(route) == 32  # nginx's request id
        assert all(replica(health, route)[0] == first for _ in range(6))  # the same browser: the same replica
        spread = {replica(health, f"visitor-{i}")[0] for i in range(16)}
        assert spread == {f"127.0.0.1:{p}" for p in deployment.replica_ports}  # new visitors reach both

        # the run's one Chromium (conftest.py): a second sync Playwright in this worker's thread would be refused
        page = chromium.new_page()
        try:
            page.goto(deployment.url + "/playground?prompt=Lily+had+a")
            page.get_by_text("Generate").first.wait_for(timeout=120_000)  # drawn: the websocket went through
            assert "Something went wrong" not in page.inner_text("body")
        finally:
            page.close()
    finally:
        deployment.stop()
    assert all(process.poll() is not None for process in [deployment.nginx, *deployment.replicas])
