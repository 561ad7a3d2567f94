"""shopcart: a cart in cents that depends on `moneyfmt` (installed by its environment)."""

from __future__ import annotations

from . import Bug, Repo

# ---- shopcart (depends on moneyfmt, installed by its environment) --------------------------
MONEYFMT = (
    '"""moneyfmt: integer cents as money strings (a dependency of shopcart, not part of it)."""\n\n\n'
    'def format_cents(cents, symbol="$"):\n'
    '    sign = "-" if cents < 0 else ""\n'
    "    cents = abs(int(cents))\n"
    '    return f"{sign}{symbol}{cents // 100:,}.{cents % 100:02d}"\n'
)
SITE = "/opt/arborl-swe/env/site"

SHOPCART = Repo(
    name="arborl-mini/shopcart",
    version="2.1",
    summary="A shopping cart in integer cents: quantities, discount codes, tax, receipts.",
    files={
        "shopcart/__init__.py": '"""shopcart: a shopping cart in integer cents."""\n\n'
        'from .cart import Cart\n\n__all__ = ["Cart"]\n',
        "shopcart/codes.py": '"""Discount codes and their percentages."""\n\n'
        'DISCOUNT_CODES = {"SAVE10": 10, "HALF": 50}\n',
        "shopcart/cart.py": '"""The cart."""\n\nfrom moneyfmt import format_cents\n\nfrom .codes import DISCOUNT_CODES\n\n\n'
        "class Cart:\n"
        "    def __init__(self, tax_rate_percent=0):\n"
        "        self.items = {}  # sku -> [unit price in cents, quantity]\n"
        "        self.tax_rate_percent = tax_rate_percent\n"
        "        self.discount_percent = 0\n\n"
        "    def add(self, sku, unit_cents, qty=1):\n"
        "        if qty < 1:\n"
        '            raise ValueError("quantity must be at least 1")\n'
        "@@quantity:1@@\n\n"
        "    def remove(self, sku):\n"
        "        self.items.pop(sku, None)\n\n"
        "    def subtotal(self):\n"
        "        return sum(unit * qty for unit, qty in self.items.values())\n\n"
        "    def apply_code(self, code):\n"
        "        try:\n"
        "@@codes:1@@\n"
        "        except KeyError:\n"
        '            raise ValueError(f"unknown discount code {code!r}") from None\n\n'
        "    def discount(self):\n"
        "        return self.subtotal() * self.discount_percent // 100\n\n"
        "    def tax(self):\n"
        '        """Tax on the discounted subtotal, rounded to the nearest cent (halves up)."""\n'
        "        taxable = self.subtotal() - self.discount()\n"
        "@@rounding:1@@\n\n"
        "    def total(self):\n"
        "        return self.subtotal() - self.discount() + self.tax()\n\n"
        "    def receipt(self):\n"
        '        return f"Total: {format_cents(self.total())}"\n',
    },
    tests={
        "tests/test_cart.py": "import pytest\n\nfrom shopcart import Cart\n\n\n"
        "def test_subtotal():\n"
        '    cart = Cart()\n    cart.add("apple", 50, 3)\n    cart.add("pear", 75)\n'
        "    assert cart.subtotal() == 225\n\n\n"
        "def test_remove():\n"
        '    cart = Cart()\n    cart.add("apple", 50)\n    cart.remove("apple")\n    assert cart.subtotal() == 0\n\n\n'
        "def test_quantity_must_be_positive():\n"
        '    with pytest.raises(ValueError):\n        Cart().add("apple", 50, 0)\n\n\n'
        "def test_receipt_formats_money():\n"
        '    cart = Cart()\n    cart.add("tv", 123456)\n    assert cart.receipt() == "Total: $1,234.56"\n',
        "tests/test_pricing.py": "import pytest\n\nfrom shopcart import Cart\n\n\n"
        "def test_discount_code():\n"
        '    cart = Cart()\n    cart.add("book", 2000)\n    cart.apply_code("SAVE10")\n'
        "    assert cart.total() == 1800\n\n\n"
        "def test_unknown_code():\n"
        '    with pytest.raises(ValueError):\n        Cart().apply_code("FREE")\n\n\n'
        "def test_exact_tax():\n"
        '    cart = Cart(tax_rate_percent=8)\n    cart.add("lamp", 1000)\n    assert cart.total() == 1080\n',
    },
    bugs=(
        Bug(
            id="quantity",
            title="Cart.add: adding an item again increases its quantity",
            problem_statement="Adding the same item twice forgets the first addition:\n\n```python\n"
            'cart = Cart()\ncart.add("apple", 50)\ncart.add("apple", 50, 2)\ncart.subtotal()  # 100\n'
            "```\n\nThe cart should hold 3 apples (subtotal 150).",
            changes=(
                (
                    "quantity:1",
                    "        self.items[sku] = [unit_cents, qty]\n",
                    "        if sku in self.items:\n            self.items[sku][1] += qty\n"
                    "        else:\n            self.items[sku] = [unit_cents, qty]\n",
                ),
            ),
            test_file="tests/test_cart.py",
            tests="\n\ndef test_adding_again_increases_quantity():\n"
            '    cart = Cart()\n    cart.add("apple", 50)\n    cart.add("apple", 50, 2)\n'
            "    assert cart.subtotal() == 150\n",
        ),
        Bug(
            id="codes",
            title="Discount codes are case-insensitive",
            problem_statement='`cart.apply_code("save10")` raises `ValueError: unknown discount code '
            "'save10'`. Customers type codes in any case; `save10`, `Save10` and `SAVE10` should all "
            "work.",
            changes=(
                (
                    "codes:1",
                    "            self.discount_percent = DISCOUNT_CODES[code]\n",
                    "            self.discount_percent = DISCOUNT_CODES[code.upper()]\n",
                ),
            ),
            test_file="tests/test_pricing.py",
            tests="\n\ndef test_codes_ignore_case():\n"
            '    cart = Cart()\n    cart.add("book", 2000)\n    cart.apply_code("save10")\n'
            "    assert cart.total() == 1800\n",
            docs_note="Codes: SAVE10 (10% off), HALF (50% off).",
        ),
        Bug(
            id="rounding",
            title="Round tax to the nearest cent",
            problem_statement="Tax is truncated instead of rounded: with a 7% rate, an item of "
            "$9.99 is taxed 69.93 cents, which becomes 69 cents, so the total is $10.68. "
            "The docstring says tax is rounded to the nearest cent, halves up: 70 cents, total $10.69.",
            changes=(
                (
                    "rounding:1",
                    "        return taxable * self.tax_rate_percent // 100\n",
                    "        return (taxable * self.tax_rate_percent + 50) // 100\n",
                ),
            ),
            test_file="tests/test_pricing.py",
            tests="\n\ndef test_tax_rounds_to_nearest_cent():\n"
            '    cart = Cart(tax_rate_percent=7)\n    cart.add("mug", 999)\n    assert cart.tax() == 70\n'
            "    assert cart.total() == 1069\n",
        ),
    ),
    environment={
        "files": {"site/moneyfmt/__init__.py": MONEYFMT},
        "install": [
            "d=$(python3 -c 'import site; print(site.getsitepackages()[0])') && mkdir -p \"$d\" "
            f'&& echo {SITE} > "$d/arborl-swe-env.pth"',
        ],
    },
)
