"""An admin console with a login: users (create, edit, delete), support tickets, settings.

Standard library only (it runs under the site containers' Debian python3, which has no pip).
Server-side state: sessions, users, tickets, settings and an audit log of every change;
`state()` is what evaluators read (e.g. that user bob now has the admin role).
"""

from __future__ import annotations

import copy
import secrets
from typing import Any
from urllib.parse import quote

from common import Request, Response, Site, esc

LOGIN = ("admin", "arborl-admin")
ROLES = ("viewer", "editor", "admin")
STATUSES = ("open", "pending", "closed")
SEED_USERS: list[dict[str, Any]] = [
    {"username": "alice", "email": "alice@example.test", "role": "admin", "active": True},
    {"username": "bob", "email": "bob@example.test", "role": "editor", "active": True},
    {"username": "carol", "email": "carol@example.test", "role": "viewer", "active": True},
    {"username": "dave", "email": "dave@example.test", "role": "viewer", "active": False},
    {"username": "erin", "email": "erin@example.test", "role": "editor", "active": True},
    {"username": "frank", "email": "frank@example.test", "role": "viewer", "active": True},
]
SEED_TICKETS: list[dict[str, Any]] = [
    {"id": 1, "subject": "Cannot log in", "customer": "carol", "status": "open", "resolution": "",
     "body": "I reset my password twice and still cannot log in."},
    {"id": 2, "subject": "Replacement keyboard", "customer": "Ada Lovelace", "status": "open", "resolution": "",
     "body": "My Mechanical Keyboard K7 with the UK layout arrived broken. Please order one replacement "
             "from the shop for me, shipped express to Ada Lovelace, 12 Analytical Street, London, "
             "ZIP code 10001."},
    {"id": 3, "subject": "Refund request", "customer": "frank", "status": "pending", "resolution": "",
     "body": "I returned my order last week and have not been refunded yet."},
    {"id": 4, "subject": "Broken link on the home page", "customer": "erin", "status": "closed",
     "resolution": "fixed", "body": "The Help link on the home page goes nowhere."},
]  # fmt: skip
SEED_SETTINGS = {"site_name": "Arborl Admin", "maintenance": False, "default_role": "viewer"}


class Admin(Site):
    name = "admin"
    title = "Arborl Admin"

    def __init__(self) -> None:
        super().__init__()
        self.route("GET", "/login", self.login_form)
        self.route("POST", "/login", self.login)
        self.route("POST", "/logout", self.logout)
        self.route("GET", "/", self.guard(self.dashboard))
        self.route("GET", "/users", self.guard(self.users))
        self.route("GET", "/users/new", self.guard(self.new_user_form))
        self.route("POST", "/users/new", self.guard(self.create_user))
        self.route("GET", r"/users/(?P<name>[\w.-]+)", self.guard(self.user_page))
        self.route("POST", r"/users/(?P<name>[\w.-]+)", self.guard(self.update_user))
        self.route("GET", r"/users/(?P<name>[\w.-]+)/delete", self.guard(self.delete_form))
        self.route("POST", r"/users/(?P<name>[\w.-]+)/delete", self.guard(self.delete_user))
        self.route("GET", "/tickets", self.guard(self.tickets))
        self.route("GET", r"/tickets/(?P<tid>\d+)", self.guard(self.ticket))
        self.route("POST", r"/tickets/(?P<tid>\d+)", self.guard(self.update_ticket))
        self.route("GET", "/settings", self.guard(self.settings_form))
        self.route("POST", "/settings", self.guard(self.save_settings))

    # ---- state ------------------------------------------------------------------------
    def reset(self) -> None:
        self.sessions: set[str] = set()
        self.user_list = copy.deepcopy(SEED_USERS)
        self.ticket_list = copy.deepcopy(SEED_TICKETS)
        self.settings = dict(SEED_SETTINGS)
        self.audit: list[dict[str, Any]] = []
        self.failed_logins = 0

    def state(self) -> dict[str, Any]:
        return {
            "users": copy.deepcopy(self.user_list),
            "tickets": copy.deepcopy(self.ticket_list),
            "settings": dict(self.settings),
            "audit": copy.deepcopy(self.audit),
            "logged_in": bool(self.sessions),
            "failed_logins": self.failed_logins,
        }

    def log(self, action: str, **details: Any) -> None:
        self.audit.append({"action": action, **details})

    def user(self, name: str) -> dict[str, Any] | None:
        return next((u for u in self.user_list if u["username"] == name), None)

    # ---- sessions -----------------------------------------------------------------------
    def authed(self, req: Request) -> bool:
        return req.cookies.get("sid", "") in self.sessions

    def guard(self, handler: Any) -> Any:
        def guarded(req: Request) -> Response:
            if not self.authed(req):
                return Response.redirect("/login?next=" + quote(req.path))
            return handler(req)

        return guarded

    def nav(self, req: Request) -> str:
        if not self.authed(req):
            return "<nav aria-label='Main'><a href='/login'>Log in</a></nav>"
        return (
            "<nav aria-label='Main'><a href='/'>Dashboard</a><a href='/users'>Users</a>"
            "<a href='/tickets'>Tickets</a><a href='/settings'>Settings</a>"
            "<form action='/logout' method='post' style='display:inline'><button>Log out</button></form></nav>"
        )

    def login_form(self, req: Request, error: str = "") -> Response:
        nxt = req.query.get("next", req.form.get("next", "/"))
        body = (
            "<h1>Log in</h1>"
            + (f"<p class='error' role='alert'>{esc(error)}</p>" if error else "")
            + "<form action='/login' method='post'>"
            f"<input type='hidden' name='next' value='{esc(nxt)}'>"
            "<label for='username'>Username</label><input id='username' name='username'>"
            "<label for='password'>Password</label><input id='password' name='password' type='password'>"
            "<button type='submit'>Log in</button></form>"
        )
        return self.page(req, "Log in", body, 401 if error else 200)

    def login(self, req: Request) -> Response:
        if (req.form.get("username", ""), req.form.get("password", "")) != LOGIN:
            self.failed_logins += 1
            return self.login_form(req, "Wrong username or password.")
        sid = secrets.token_hex(16)
        self.sessions.add(sid)
        nxt = req.form.get("next", "/")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/"
        return Response.redirect(nxt, cookie=f"sid={sid}; Path=/; HttpOnly")

    def logout(self, req: Request) -> Response:
        self.sessions.discard(req.cookies.get("sid", ""))
        return Response.redirect("/login", cookie="sid=; Path=/; Max-Age=0")

    # ---- pages --------------------------------------------------------------------------
    def dashboard(self, req: Request) -> Response:
        open_tickets = sum(t["status"] == "open" for t in self.ticket_list)
        body = (
            f"<h1>Dashboard</h1><p>{len(self.user_list)} users, {open_tickets} open tickets.</p>"
            "<ul><li><a href='/users/new'>Create a user</a></li><li><a href='/tickets?status=open'>"
            "Open tickets</a></li></ul>"
        )
        return self.page(req, "Dashboard", body)

    def users(self, req: Request) -> Response:
        role = req.query.get("role", "")
        shown = [u for u in self.user_list if not role or u["role"] == role]
        opts = "".join(
            f"<option value='{r}'{' selected' if r == role else ''}>{r or 'All roles'}</option>"
            for r in ("", *ROLES)
        )
        rows = "".join(
            f"<tr><td><a href='/users/{quote(u['username'])}'>{esc(u['username'])}</a></td><td>{esc(u['email'])}</td>"
            f"<td>{u['role']}</td><td>{'active' if u['active'] else 'inactive'}</td></tr>"
            for u in shown
        )
        body = (
            "<h1>Users</h1><p><a href='/users/new'>New user</a></p>"
            "<form action='/users' method='get'><label for='role'>Role</label>"
            f"<select id='role' name='role'>{opts}</select><button type='submit'>Filter</button></form>"
            f"<p>{len(shown)} users</p><table><tr><th>Username</th><th>Email</th><th>Role</th><th>Status</th></tr>"
            f"{rows}</table>"
        )
        return self.page(req, "Users", body)

    def role_select(self, current: str) -> str:
        opts = "".join(f"<option{' selected' if r == current else ''}>{r}</option>" for r in ROLES)
        return f"<label for='role'>Role</label><select id='role' name='role'>{opts}</select>"

    def new_user_form(self, req: Request, errors: list[str] | None = None) -> Response:
        f = req.form
        checked = " checked" if f.get("active", "1" if not errors else "") else ""
        errs = "".join(f"<li>{esc(e)}</li>" for e in errors or [])
        body = (
            "<h1>New user</h1>"
            + (f"<ul class='error' role='alert'>{errs}</ul>" if errs else "")
            + "<form action='/users/new' method='post'>"
            f"<label for='username'>Username</label><input id='username' name='username' value='{esc(f.get('username', ''))}'>"
            f"<label for='email'>Email</label><input id='email' name='email' value='{esc(f.get('email', ''))}'>"
            f"{self.role_select(f.get('role', self.settings['default_role']))}"
            f"<label><input type='checkbox' name='active' value='1'{checked}> Active</label>"
            "<button type='submit'>Create user</button></form>"
        )
        return self.page(req, "New user", body, 400 if errors else 200)

    def create_user(self, req: Request) -> Response:
        name = req.form.get("username", "").strip()
        email = req.form.get("email", "").strip()
        role = req.form.get("role", "")
        errors = []
        if not name or not all(c.isalnum() or c in "._-" for c in name):
            errors.append("Username must be letters, digits, dots, dashes or underscores.")
        elif self.user(name):
            errors.append(f"User {name} already exists.")
        if "@" not in email:
            errors.append("Email must contain @.")
        if role not in ROLES:
            errors.append("Choose a role.")
        if errors:
            return self.new_user_form(req, errors)
        user = {"username": name, "email": email, "role": role, "active": req.form.get("active") == "1"}
        self.user_list.append(user)
        self.log("create_user", username=name)
        return Response.redirect(f"/users/{quote(name)}?saved=1")

    def user_page(self, req: Request, errors: list[str] | None = None) -> Response:
        u = self.user(req.params["name"])
        if u is None:
            return self.not_found(req)
        saved = "<p class='notice' role='status'>Saved.</p>" if req.query.get("saved") else ""
        errs = "".join(f"<li>{esc(e)}</li>" for e in errors or [])
        body = (
            f"<h1>User {esc(u['username'])}</h1>{saved}"
            + (f"<ul class='error' role='alert'>{errs}</ul>" if errs else "")
            + f"<form action='/users/{quote(u['username'])}' method='post'>"
            f"<label for='email'>Email</label><input id='email' name='email' value='{esc(u['email'])}'>"
            f"{self.role_select(u['role'])}"
            f"<label><input type='checkbox' name='active' value='1'{' checked' if u['active'] else ''}> Active</label>"
            "<button type='submit'>Save changes</button></form>"
            f"<p><a href='/users/{quote(u['username'])}/delete'>Delete user</a></p>"
        )
        return self.page(req, f"User {u['username']}", body, 400 if errors else 200)

    def update_user(self, req: Request) -> Response:
        u = self.user(req.params["name"])
        if u is None:
            return self.not_found(req)
        email = req.form.get("email", "").strip()
        role = req.form.get("role", "")
        errors = ["Email must contain @."] if "@" not in email else []
        if role not in ROLES:
            errors.append("Choose a role.")
        if errors:
            return self.user_page(req, errors)
        changes = {}
        for key, value in (("email", email), ("role", role), ("active", req.form.get("active") == "1")):
            if u[key] != value:
                changes[key] = value
                u[key] = value
        if changes:
            self.log("update_user", username=u["username"], changes=changes)
        return Response.redirect(f"/users/{quote(u['username'])}?saved=1")

    def delete_form(self, req: Request) -> Response:
        u = self.user(req.params["name"])
        if u is None:
            return self.not_found(req)
        body = (
            f"<h1>Delete {esc(u['username'])}?</h1><p>This cannot be undone.</p>"
            f"<form action='/users/{quote(u['username'])}/delete' method='post'>"
            "<button type='submit'>Confirm delete</button></form>"
            f"<p><a href='/users/{quote(u['username'])}'>Cancel</a></p>"
        )
        return self.page(req, "Delete user", body)

    def delete_user(self, req: Request) -> Response:
        u = self.user(req.params["name"])
        if u is None:
            return self.not_found(req)
        self.user_list.remove(u)
        self.log("delete_user", username=u["username"])
        return Response.redirect("/users")

    def tickets(self, req: Request) -> Response:
        status = req.query.get("status", "")
        shown = [t for t in self.ticket_list if not status or t["status"] == status]
        rows = "".join(
            f"<tr><td><a href='/tickets/{t['id']}'>#{t['id']} {esc(t['subject'])}</a></td>"
            f"<td>{esc(t['customer'])}</td><td>{t['status']}</td></tr>"
            for t in shown
        )
        body = (
            f"<h1>Tickets</h1><table><tr><th>Ticket</th><th>Customer</th><th>Status</th></tr>{rows}</table>"
        )
        return self.page(req, "Tickets", body)

    def ticket(self, req: Request, error: str = "") -> Response:
        t = next((t for t in self.ticket_list if t["id"] == int(req.params["tid"])), None)
        if t is None:
            return self.not_found(req)
        opts = "".join(f"<option{' selected' if s == t['status'] else ''}>{s}</option>" for s in STATUSES)
        body = (
            f"<h1>Ticket #{t['id']}: {esc(t['subject'])}</h1><p>Customer: {esc(t['customer'])}</p>"
            f"<p>Status: {t['status']}</p><blockquote>{esc(t['body'])}</blockquote>"
            + (f"<p class='error' role='alert'>{esc(error)}</p>" if error else "")
            + f"<form action='/tickets/{t['id']}' method='post'>"
            f"<label for='status'>Status</label><select id='status' name='status'>{opts}</select>"
            f"<label for='resolution'>Resolution</label><input id='resolution' name='resolution' "
            f"value='{esc(t['resolution'])}'><button type='submit'>Update ticket</button></form>"
        )
        return self.page(req, f"Ticket {t['id']}", body, 400 if error else 200)

    def update_ticket(self, req: Request) -> Response:
        t = next((t for t in self.ticket_list if t["id"] == int(req.params["tid"])), None)
        if t is None:
            return self.not_found(req)
        status = req.form.get("status", "")
        resolution = req.form.get("resolution", "").strip()
        if status not in STATUSES:
            return self.ticket(req, "Choose a status.")
        if status == "closed" and not resolution:
            return self.ticket(req, "A closed ticket needs a resolution.")
        t["status"], t["resolution"] = status, resolution
        self.log("update_ticket", id=t["id"], status=status, resolution=resolution)
        return Response.redirect(f"/tickets/{t['id']}")

    def settings_form(self, req: Request) -> Response:
        s = self.settings
        opts = "".join(f"<option{' selected' if r == s['default_role'] else ''}>{r}</option>" for r in ROLES)
        saved = "<p class='notice' role='status'>Settings saved.</p>" if req.query.get("saved") else ""
        body = (
            f"<h1>Settings</h1>{saved}<form action='/settings' method='post'>"
            f"<label for='site_name'>Site name</label><input id='site_name' name='site_name' value='{esc(s['site_name'])}'>"
            f"<label><input type='checkbox' name='maintenance' value='1'{' checked' if s['maintenance'] else ''}>"
            " Maintenance mode</label>"
            f"<label for='default_role'>Default role</label><select id='default_role' name='default_role'>{opts}</select>"
            "<button type='submit'>Save settings</button></form>"
        )
        return self.page(req, "Settings", body)

    def save_settings(self, req: Request) -> Response:
        role = req.form.get("default_role", "")
        name = req.form.get("site_name", "").strip()
        if role not in ROLES or not name:
            return self.settings_form(req)
        new = {"site_name": name, "maintenance": req.form.get("maintenance") == "1", "default_role": role}
        if new != self.settings:
            self.log("update_settings", **{k: v for k, v in new.items() if self.settings[k] != v})
            self.settings = new
        return Response.redirect("/settings?saved=1")


SITE = Admin
