"""A WebShop-like store: search, filters, product pages with options, a cart, a checkout.

Standard library only (it runs under the site containers' Debian python3, which has no pip).
Server-side state: the cart, the orders (one seeded past order), the stock. `state()` is
what evaluators read: e.g. the order an agent placed, with its items and shipping address.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from typing import Any
from urllib.parse import quote, urlencode

from common import Request, Response, Site, esc

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shop_data.json")
SORTS = {"relevance": "Relevance", "price_asc": "Price: low to high", "price_desc": "Price: high to low",
         "rating": "Rating"}  # fmt: skip


def money(x: float) -> str:
    return f"${x:,.2f}"


class Shop(Site):
    name = "shop"
    title = "Arborl Shop"

    def __init__(self) -> None:
        with open(DATA, encoding="utf-8") as f:
            self.seed = json.load(f)
        super().__init__()
        self.route("GET", "/", self.home)
        self.route("GET", "/search", self.search)
        self.route("GET", r"/product/(?P<sku>[A-Z0-9-]+)", self.product)
        self.route("POST", "/cart/add", self.cart_add)
        self.route("POST", "/cart/remove", self.cart_remove)
        self.route("GET", "/cart", self.cart)
        self.route("GET", "/checkout", self.checkout_form)
        self.route("POST", "/checkout", self.checkout)
        self.route("GET", r"/order/(?P<oid>\d+)", self.order)
        self.route("GET", "/orders", self.orders)

    # ---- state ------------------------------------------------------------------------
    def reset(self) -> None:
        self.products = {p["sku"]: copy.deepcopy(p) for p in self.seed["products"]}
        self.cart_items: list[dict[str, Any]] = []
        self.order_list: list[dict[str, Any]] = copy.deepcopy(self.seed["orders"])
        self.next_order = 1001

    def state(self) -> dict[str, Any]:
        return {
            "cart": copy.deepcopy(self.cart_items),
            "orders": copy.deepcopy(self.order_list),
            "stock": {sku: p["stock"] for sku, p in self.products.items()},
        }

    # ---- layout -----------------------------------------------------------------------
    def categories(self) -> list[str]:
        return sorted({p["category"] for p in self.products.values()})

    def nav(self, req: Request) -> str:
        cats = "".join(f"<a href='/search?category={quote(c)}'>{esc(c)}</a>" for c in self.categories())
        count = sum(i["qty"] for i in self.cart_items)
        return (
            "<nav aria-label='Main'><a href='/'>Home</a>"
            f"<div class='menu'><span tabindex='0'>Categories</span><div class='sub'>{cats}</div></div> "
            f"<a href='/cart'>Cart ({count})</a><a href='/orders'>Orders</a></nav>"
        )

    def search_box(self, q: str = "") -> str:
        return (
            "<form action='/search' method='get' role='search'>"
            f"<label for='q'>Search</label><input id='q' name='q' type='text' value='{esc(q)}'>"
            "<button type='submit'>Search</button></form>"
        )

    def listing(self, products: list[dict[str, Any]]) -> str:
        rows = []
        for p in products:
            stock = f"{p['stock']} in stock" if p["stock"] else "Out of stock"
            rows.append(
                f"<li><a href='/product/{p['sku']}'>{esc(p['name'])}</a> - {money(p['price'])} "
                f"- {stock} - rating {p['rating']}</li>"
            )
        return f"<ul aria-label='Products'>{''.join(rows)}</ul>" if rows else "<p>No products found.</p>"

    # ---- pages --------------------------------------------------------------------------
    def home(self, req: Request) -> Response:
        featured = sorted(self.products.values(), key=lambda p: -p["rating"])[:4]
        body = (
            f"<h1>Welcome to {esc(self.title)}</h1>{self.search_box()}"
            f"<h2>Top rated</h2>{self.listing(featured)}"
        )
        return self.page(req, "Home", body)

    def search(self, req: Request) -> Response:
        q = req.query.get("q", "").strip()
        category = req.query.get("category", "")
        sort = req.query.get("sort", "relevance")
        in_stock = req.query.get("in_stock") == "1"
        max_raw = req.query.get("max_price", "").strip().lstrip("$")
        error = ""
        try:
            max_price = float(max_raw) if max_raw else None
        except ValueError:
            max_price, error = None, f"Max price must be a number, got {max_raw!r}."
        words = q.lower().split()
        hits = []
        for p in self.products.values():
            text = f"{p['name']} {p['description']} {p['category']}".lower()
            if words and not all(w in text for w in words):
                continue
            if category and p["category"] != category:
                continue
            if max_price is not None and p["price"] > max_price:
                continue
            if in_stock and not p["stock"]:
                continue
            hits.append(p)
        if sort == "price_asc":
            hits.sort(key=lambda p: p["price"])
        elif sort == "price_desc":
            hits.sort(key=lambda p: -p["price"])
        elif sort == "rating":
            hits.sort(key=lambda p: -p["rating"])
        cat_opts = "".join(
            f"<option value='{esc(c)}'{' selected' if c == category else ''}>{esc(c or 'All categories')}</option>"
            for c in ["", *self.categories()]
        )
        sort_opts = "".join(
            f"<option value='{k}'{' selected' if k == sort else ''}>{esc(v)}</option>"
            for k, v in SORTS.items()
        )
        filters = (
            "<form action='/search' method='get' aria-label='Filters'>"
            f"<input type='hidden' name='q' value='{esc(q)}'>"
            f"<label for='category'>Category</label><select id='category' name='category'>{cat_opts}</select>"
            f"<label for='max_price'>Max price</label><input id='max_price' name='max_price' value='{esc(max_raw)}'>"
            f"<label><input type='checkbox' name='in_stock' value='1'{' checked' if in_stock else ''}> In stock only</label>"
            f"<label for='sort'>Sort by</label><select id='sort' name='sort'>{sort_opts}</select>"
            "<button type='submit'>Apply filters</button></form>"
        )
        what = f" for &quot;{esc(q)}&quot;" if q else ""
        body = (
            f"{self.search_box(q)}<h1>Results{what}</h1>"
            + (f"<p class='error' role='alert'>{esc(error)}</p>" if error else "")
            + f"{filters}<p>{len(hits)} products found</p>{self.listing(hits)}"
        )
        return self.page(req, "Search", body)

    def product(self, req: Request, error: str = "") -> Response:
        p = self.products.get(req.params.get("sku", ""))
        if p is None:
            return self.not_found(req)
        opts = ""
        for name, values in p["options"].items():
            field = f"option_{name.lower()}"
            choices = "".join(f"<option>{esc(v)}</option>" for v in values)
            opts += f"<label for='{field}'>{esc(name)}</label><select id='{field}' name='{field}'>{choices}</select>"
        if p["stock"]:
            buy = (
                f"<form action='/cart/add' method='post'><input type='hidden' name='sku' value='{p['sku']}'>{opts}"
                "<label for='qty'>Quantity</label><input id='qty' name='qty' type='number' min='1' value='1'>"
                "<button type='submit'>Add to cart</button></form>"
            )
            stock = f"{p['stock']} in stock"
        else:
            buy, stock = "", "Out of stock"
        body = (
            f"<h1>{esc(p['name'])}</h1><p>Price: {money(p['price'])}</p><p>{stock}</p>"
            f"<p>Category: {esc(p['category'])}</p><p>Rating: {p['rating']} / 5</p>"
            f"<p>{esc(p['description'])}</p><p>SKU: {p['sku']}</p>"
            + (f"<p class='error' role='alert'>{esc(error)}</p>" if error else "")
            + buy
        )
        return self.page(req, p["name"], body)

    def cart_add(self, req: Request) -> Response:
        p = self.products.get(req.form.get("sku", ""))
        if p is None:
            return self.not_found(req)
        req.params["sku"] = p["sku"]
        try:
            qty = int(req.form.get("qty", "1"))
        except ValueError:
            return self.product(req, "Quantity must be a whole number.")
        in_cart = sum(i["qty"] for i in self.cart_items if i["sku"] == p["sku"])
        if qty < 1:
            return self.product(req, "Quantity must be at least 1.")
        if qty + in_cart > p["stock"]:
            return self.product(req, f"Only {p['stock']} left in stock.")
        options = {}
        for name, values in p["options"].items():
            value = req.form.get(f"option_{name.lower()}", values[0])
            if value not in values:
                return self.product(req, f"{name} must be one of {', '.join(values)}.")
            options[name] = value
        for item in self.cart_items:
            if item["sku"] == p["sku"] and item["options"] == options:
                item["qty"] += qty
                break
        else:
            self.cart_items.append(
                {"sku": p["sku"], "name": p["name"], "qty": qty, "price": p["price"], "options": options}
            )
        return Response.redirect("/cart?" + urlencode({"added": p["name"]}))

    def cart_remove(self, req: Request) -> Response:
        with contextlib.suppress(ValueError, IndexError):
            del self.cart_items[int(req.form.get("index", "-1"))]
        return Response.redirect("/cart")

    def cart_total(self) -> float:
        return round(sum(i["qty"] * i["price"] for i in self.cart_items), 2)

    def cart(self, req: Request) -> Response:
        added = req.query.get("added")
        notice = f"<p class='notice' role='status'>Added {esc(added)} to your cart.</p>" if added else ""
        if not self.cart_items:
            return self.page(req, "Cart", f"<h1>Your cart</h1>{notice}<p>Your cart is empty.</p>")
        rows = ""
        for n, i in enumerate(self.cart_items):
            opts = ", ".join(f"{k}: {v}" for k, v in i["options"].items()) or "-"
            rows += (
                f"<tr><td>{esc(i['name'])}</td><td>{esc(opts)}</td><td>{i['qty']}</td>"
                f"<td>{money(i['price'] * i['qty'])}</td><td><form action='/cart/remove' method='post'>"
                f"<input type='hidden' name='index' value='{n}'>"
                f"<button type='submit' aria-label='Remove {esc(i['name'])}'>Remove</button></form></td></tr>"
            )
        body = (
            f"<h1>Your cart</h1>{notice}<table><tr><th>Product</th><th>Options</th><th>Qty</th>"
            f"<th>Subtotal</th><th></th></tr>{rows}</table><p>Total: {money(self.cart_total())}</p>"
            "<p><a href='/checkout'>Proceed to checkout</a></p>"
        )
        return self.page(req, "Cart", body)

    FIELDS = (("name", "Full name"), ("address", "Address"), ("city", "City"), ("zip", "ZIP code"))

    def checkout_form(self, req: Request, errors: list[str] | None = None) -> Response:
        if not self.cart_items:
            return self.page(req, "Checkout", "<h1>Checkout</h1><p>Your cart is empty.</p>")
        values = req.form
        fields = "".join(
            f"<label for='{k}'>{label}</label><input id='{k}' name='{k}' value='{esc(values.get(k, ''))}'>"
            for k, label in self.FIELDS
        )
        method = values.get("method", "standard")
        radios = "".join(
            f"<label><input type='radio' name='method' value='{m}'{' checked' if m == method else ''}> "
            f"{m.capitalize()} shipping ({money(c)})</label>"
            for m, c in self.seed["shipping"].items()
        )
        errs = "".join(f"<li>{esc(e)}</li>" for e in errors or [])
        body = (
            f"<h1>Checkout</h1><p>Items total: {money(self.cart_total())}</p>"
            + (f"<ul class='error' role='alert'>{errs}</ul>" if errs else "")
            + f"<form action='/checkout' method='post'>{fields}<fieldset><legend>Shipping method</legend>"
            f"{radios}</fieldset><button type='submit'>Place order</button></form>"
        )
        return self.page(req, "Checkout", body, 400 if errors else 200)

    def checkout(self, req: Request) -> Response:
        if not self.cart_items:
            return self.checkout_form(req)
        f = {k: req.form.get(k, "").strip() for k, _ in self.FIELDS}
        errors = [f"{label} is required." for k, label in self.FIELDS if not f[k]]
        if f["zip"] and not (f["zip"].isdigit() and len(f["zip"]) == 5):
            errors.append("ZIP code must be 5 digits.")
        method = req.form.get("method", "standard")
        if method not in self.seed["shipping"]:
            errors.append("Choose a shipping method.")
        if errors:
            return self.checkout_form(req, errors)
        cost = self.seed["shipping"][method]
        order = {
            "id": self.next_order,
            "status": "Processing",
            "items": copy.deepcopy(self.cart_items),
            "shipping": {**f, "method": method, "cost": cost},
            "total": round(self.cart_total() + cost, 2),
        }
        for item in self.cart_items:
            self.products[item["sku"]]["stock"] -= item["qty"]
        self.order_list.append(order)
        self.next_order += 1
        self.cart_items = []
        return Response.redirect(f"/order/{order['id']}")

    def order(self, req: Request) -> Response:
        oid = int(req.params["oid"])
        order = next((o for o in self.order_list if o["id"] == oid), None)
        if order is None:
            return self.not_found(req)
        items = "".join(
            f"<li>{i['qty']} x {esc(i['name'])}"
            + (f" ({esc(', '.join(f'{k}: {v}' for k, v in i['options'].items()))})" if i["options"] else "")
            + "</li>"
            for i in order["items"]
        )
        s = order["shipping"]
        body = (
            f"<h1>Order #{order['id']}</h1><p role='status'>Thank you! Your order number is #{order['id']}.</p>"
            f"<p>Status: {esc(order['status'])}</p><ul aria-label='Items'>{items}</ul>"
            f"<p>Ship to: {esc(s['name'])}, {esc(s['address'])}, {esc(s['city'])} {esc(s['zip'])}</p>"
            f"<p>Shipping: {esc(s['method'])} ({money(s['cost'])})</p><p>Total: {money(order['total'])}</p>"
        )
        return self.page(req, f"Order {order['id']}", body)

    def orders(self, req: Request) -> Response:
        rows = "".join(
            f"<tr><td><a href='/order/{o['id']}'>Order #{o['id']}</a></td><td>{esc(o['status'])}</td>"
            f"<td>{money(o['total'])}</td></tr>"
            for o in reversed(self.order_list)
        )
        body = (
            f"<h1>Your orders</h1><table><tr><th>Order</th><th>Status</th><th>Total</th></tr>{rows}</table>"
        )
        return self.page(req, "Orders", body)


SITE = Shop
