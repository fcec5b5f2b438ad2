"""The one package index plugin packages come from: its URL and the CA bundle its TLS
certificate is checked against.

Both travel together to pip (``piprun.py``) and to the index lookup that explains a failure
(``indexcheck.py``), so neither can be asked of a different index than the other. The CA bundle
is checked once, when the source is built: a file that cannot be read, or holds no PEM
certificate, would otherwise fail every plugin with pip's TLS error instead of one line
naming the file.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure

PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class IndexSource:
    """A PEP 503 simple index, ``url``, and ``ca_file``: the CA bundle (PEM) its certificate is
    checked against; ``None`` trusts the system's store."""

    url: str
    ca_file: Path | None = None

    @classmethod
    def from_options(cls, url: str | None, ca_file: Path | None) -> IndexSource | None:
        """The operator's ``--index-url`` and ``--index-ca``, the bundle checked readable first
        (a ``RuntimeFailure`` naming the file); ``None`` when no URL is set. The bundle is
        checked even then: a bad setting is reported when given, not when a plugin first
        declares a package."""
        checked = readable_ca(ca_file) if ca_file is not None else None
        return cls(url, checked) if url is not None else None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context that trusts ``ca_file`` alone, as pip's ``--cert`` does; ``None``:
        urllib's default, the system's store."""
        if self.ca_file is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))


def readable_ca(path: Path) -> Path:
    """``path`` when it can be read and holds a PEM certificate, else a ``RuntimeFailure``
    naming ``--index-ca`` and the file (the chart and ``$HERMES_RUNTIME_PLUGIN_INDEX_CA``
    set that option)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise RuntimeFailure(f"--index-ca {path}: {exc.strerror}") from None
    if PEM_CERTIFICATE not in text:
        raise RuntimeFailure(f"--index-ca {path}: no PEM certificate in the file")
    return path
