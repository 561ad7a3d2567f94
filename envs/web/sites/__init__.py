"""The self-hosted sites web tasks run against, and where their files are.

Each site is a stdlib-only Python module in this folder (the site containers have Debian's
python3 and no pip), started by `server.py`. The host side only needs to know a site's
name, its hostname in the browser (`<name>.test`: RFC 2606 reserves `.test`, so it can
never be a real site) and the files to ship. Add a site with `register_site`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SITES_DIR = Path(__file__).resolve().parent
#: Port the sites listen on inside their containers (unprivileged: the container user
#: has no CAP_NET_BIND_SERVICE); the browser reaches them as plain http://<name>.test/.
SITE_PORT = 8000
_SHARED = ("common.py", "server.py")


@dataclass(frozen=True)
class SiteDef:
    """A site the web env can start."""

    name: str
    """Module name (`shop`) and the first label of its hostname (`shop.test`)."""
    files: tuple[str, ...] = ()
    """Extra files the module needs beside itself (data), relative to `directory`."""
    directory: Path = field(default=SITES_DIR)
    """Where the module and its files live on the host."""

    @property
    def host(self) -> str:
        return f"{self.name}.test"

    def sources(self) -> dict[str, str]:
        """File name → text of everything the site's server needs."""
        names = (*_SHARED, f"{self.name}.py", *self.files)
        out = {}
        for name in names:
            path = self.directory / name if (self.directory / name).exists() else SITES_DIR / name
            out[name] = path.read_text(encoding="utf-8")
        return out


SITES: dict[str, SiteDef] = {}


def register_site(site: SiteDef) -> SiteDef:
    """Make a site available to web tasks (by `site.name`)."""
    if not site.name.isidentifier():
        raise ValueError(f"a site name must be a Python identifier, got {site.name!r}")
    SITES[site.name] = site
    return site


def get_site(name: str) -> SiteDef:
    try:
        return SITES[name]
    except KeyError:
        raise KeyError(f"unknown site {name!r}; known: {', '.join(sorted(SITES))}") from None


register_site(SiteDef("shop", files=("shop_data.json",)))
register_site(SiteDef("admin"))
