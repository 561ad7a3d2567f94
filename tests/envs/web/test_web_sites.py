"""The self-hosted sites on their own (real server processes, plain HTTP, no browser): their
server-side state, validation, the admin socket, and reset back to the seed data."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

import pytest

from arborl.envs.web.relay import SiteRequestError, unix_http
from arborl.envs.web.sites import SITES, get_site


class Site:
    def __init__(self, name: str, tmp_path) -> None:
        d = tmp_path / name
        d.mkdir()
        for fname, text in get_site(name).sources().items():
            (d / fname).write_text(text)
        self.sock, port_file = str(d / "admin.sock"), d / "port"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(d / "server.py"),
                name,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--admin-socket",
                self.sock,
                "--port-file",
                str(port_file),
            ],
            cwd=d,
        )
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "site server did not start"
            time.sleep(0.02)
        self.base = f"http://127.0.0.1:{port_file.read_text()}"
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def get(self, path: str) -> tuple[int, str, str]:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, **form: str) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(form).encode()
        return self._open(urllib.request.Request(self.base + path, data=data, method="POST"))

    def _open(self, req: urllib.request.Request) -> tuple[int, str, str]:
        try:
            with self.opener.open(req, timeout=10) as r:
                return r.status, r.geturl().removeprefix(self.base), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.geturl().removeprefix(self.base), e.read().decode()

    def admin(self, method: str, path: str):
        return asyncio.run(unix_http(self.sock, method, path))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def site(tmp_path):
    made: list[Site] = []

    def start(name: str) -> Site:
        made.append(Site(name, tmp_path))
        return made[-1]

    yield start
    for s in made:
        s.close()


def test_shop_checkout_places_an_order_and_reset_restores_the_seed(site):
    shop = site("shop")
    assert shop.admin("GET", "/ping")["site"] == "shop"
    seed = shop.admin("GET", "/state")
    status, url, body = shop.post("/cart/add", sku="AC-100", qty="30", option_color="Gray")
    assert status == 200 and "Only 25 left in stock" in body  # validated server-side
    status, url, body = shop.post("/cart/add", sku="AC-100", qty="2", option_color="Purple")
    assert "Color must be one of" in body
    status, url, _ = shop.post("/cart/add", sku="AC-100", qty="2", option_color="Gray")
    assert url.startswith("/cart")
    status, _, body = shop.post(
        "/checkout", name="Ada", address="1 St", city="X", zip="12", method="standard"
    )
    assert status == 400 and "ZIP code must be 5 digits." in body and "value='Ada'" in body
    status, url, body = shop.post(
        "/checkout", name="Ada", address="1 St", city="X", zip="10001", method="express"
    )
    assert url == "/order/1001" and "Your order number is #1001" in body
    state = shop.admin("GET", "/state")
    order = state["orders"][-1]
    assert order["items"] == [
        {"sku": "AC-100", "name": "Wireless Mouse M2", "qty": 2, "price": 24.99, "options": {"Color": "Gray"}}
    ]
    assert order["total"] == round(2 * 24.99 + 15.0, 2) and state["cart"] == []
    assert state["stock"]["AC-100"] == seed["stock"]["AC-100"] - 2
    shop.admin("POST", "/reset")
    assert shop.admin("GET", "/state") == seed


def test_shop_search_filters_and_sorts(site):
    shop = site("shop")
    _, _, body = shop.get("/search?q=headphones&category=Audio&max_price=100&in_stock=1&sort=price_asc")
    assert "1 products found" in body and "Bass Headphones B3" in body and "Kids Headphones" not in body
    _, _, body = shop.get("/search?q=headphones&sort=price_asc")
    assert (
        body.index("Kids Headphones K1") < body.index("Bass Headphones B3") < body.index("Studio Headphones")
    )
    _, _, body = shop.get("/search?max_price=cheap")
    assert "Max price must be a number" in body
    status, _, _ = shop.get("/product/NOPE-1")
    assert status == 404


def test_admin_requires_login_and_records_changes(site):
    admin = site("admin")
    status, url, body = admin.get("/users")
    assert url.startswith("/login") and "Log in" in body
    status, _, body = admin.post("/login", username="admin", password="wrong", next="/users")
    assert status == 401 and "Wrong username or password." in body
    status, url, body = admin.post("/login", username="admin", password="arborl-admin", next="/users")
    assert url == "/users" and "6 users" in body
    status, _, body = admin.post("/users/new", username="bob", email="nope", role="editor")
    assert status == 400 and "User bob already exists." in body and "Email must contain @." in body
    status, _, body = admin.post("/tickets/1", status="closed", resolution="")
    assert status == 400 and "A closed ticket needs a resolution." in body
    admin.post("/users/bob", email="bob@example.test", role="admin", active="1")
    state = admin.admin("GET", "/state")
    assert next(u for u in state["users"] if u["username"] == "bob")["role"] == "admin"
    assert state["audit"] == [{"action": "update_user", "username": "bob", "changes": {"role": "admin"}}]
    assert state["failed_logins"] == 1 and state["logged_in"]
    admin.admin("POST", "/reset")
    assert admin.admin("GET", "/state")["audit"] == []


def test_admin_endpoints_are_not_on_the_public_port(site):
    shop = site("shop")
    for path in ("/state", "/reset", "/ping"):
        assert shop.get(path)[0] == 404
    with pytest.raises(SiteRequestError, match="no admin endpoint"):
        shop.admin("GET", "/orders")
    with pytest.raises(SiteRequestError):
        asyncio.run(unix_http(shop.sock + ".missing", "GET", "/ping"))


def test_every_registered_site_ships_its_files():
    for s in SITES.values():
        files = s.sources()
        assert {"server.py", "common.py", f"{s.name}.py"} <= set(files)
