"""Why pip found nothing to install for ``name==version``: asked of the index itself.

pip says "No matching distribution found" alike for a package the index does not have, a
version it does not have, and a release with no wheel this interpreter can use (another
platform, another Python, or only a source distribution). The operator needs to know which,
so the index's simple page (PEP 503) for the package is read and its files compared with this
interpreter's tags (``packaging.tags.sys_tags``, what pip itself accepts). Any failure to ask
is no answer (``None``): pip's own words are then reported.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit, urlunsplit

from packaging.tags import sys_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from hermes_runtime.plugins.indexsource import IndexSource

TIMEOUT_SECONDS = 10.0
MAX_PAGE_BYTES = 8 * 1024 * 1024
SHOWN_FILES = 4


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href") if tag == "a" else None
        if href:
            self.files.append(unquote(href.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]))


def shown_url(url: str) -> str:
    """``url`` without its user and password, fit for a log line."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def why_not_installable(index: IndexSource, name: str, version: str | None) -> str | None:
    """The reason in words, or ``None`` when the index cannot tell (or has a fitting wheel).
    The index is asked with the CA bundle pip was given, so both trust the same certificate."""
    page = f"{index.url.rstrip('/')}/{name}/"
    try:
        files = _files(page, index)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return f"not on the index {shown_url(index.url)}"
        return None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not files:
        return f"not on the index {shown_url(index.url)} (no files)"
    return _verdict(files, version, index.url)


def _files(page: str, index: IndexSource) -> list[str]:
    request = urllib.request.Request(page, headers={"Accept": "text/html"})
    context = index.ssl_context()
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=context) as response:
        body = response.read(MAX_PAGE_BYTES).decode("utf-8", errors="replace")
    parser = _Links()
    parser.feed(body)
    return parser.files


def _verdict(files: list[str], version: str | None, index_url: str) -> str | None:
    wanted = _version(version)
    wheels = [f for f in files if f.endswith(".whl") and _wheel_version(f) == wanted]
    sdists = [f for f in files if not f.endswith(".whl") and _sdist_version(f) == wanted]
    if not wheels and not sdists:
        versions = sorted({str(v) for v in map(_any_version, files) if v is not None})
        return (
            f"version {version} is not on the index {shown_url(index_url)} "
            f"(it has: {', '.join(versions[:SHOWN_FILES]) or 'nothing usable'})"
        )
    if not wheels:
        return (
            f"only a source distribution on the index ({', '.join(sdists[:SHOWN_FILES])}); "
            "wheels only are installed (building one would run the package's code)"
        )
    accepted = set(sys_tags())
    if any(accepted & set(parse_wheel_filename(f)[3]) for f in wheels):
        return None
    best = next(iter(sys_tags()))
    return (
        f"no wheel for this platform: the index has {', '.join(wheels[:SHOWN_FILES])}, "
        f"and this Python takes tags such as {best}"
    )


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text is not None else None
    except InvalidVersion:
        return None


def _wheel_version(filename: str) -> Version | None:
    try:
        return parse_wheel_filename(filename)[1]
    except (InvalidWheelFilename, InvalidVersion):
        return None


def _sdist_version(filename: str) -> Version | None:
    try:
        return parse_sdist_filename(filename)[1]
    except (InvalidSdistFilename, InvalidVersion):
        return None


def _any_version(filename: str) -> Version | None:
    return _wheel_version(filename) if filename.endswith(".whl") else _sdist_version(filename)
