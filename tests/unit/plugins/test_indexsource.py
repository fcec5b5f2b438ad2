"""The package index and its CA bundle: the bundle is checked when the source is built."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.certs import pem, self_signed_ca

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins import IndexSource

URL = "https://idx.corp/simple"


def _ca_bundle(path: Path) -> Path:
    """A self-signed CA certificate, as PEM, named ``unit test index CA``."""
    path.write_bytes(pem(self_signed_ca("unit test index CA")[0]))
    return path


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("absent", "No such file or directory"),
        ("directory", "Is a directory"),
        ("text", "no PEM certificate in the file"),
    ],
)
@pytest.mark.parametrize("url", [URL, None], ids=["with-url", "without-url"])
def test_a_bundle_that_cannot_serve_is_refused_naming_the_option_and_the_file(
    tmp_path: Path, kind: str, says: str, url: str | None
) -> None:
    bundle = tmp_path / "ca.crt"
    if kind == "directory":
        bundle.mkdir()
    elif kind == "text":
        bundle.write_text("not a certificate\n")
    with pytest.raises(RuntimeFailure) as refused:
        IndexSource.from_options(url, bundle)
    assert str(refused.value) == f"--index-ca {bundle}: {says}"


def test_a_readable_bundle_travels_with_its_index(tmp_path: Path) -> None:
    bundle = _ca_bundle(tmp_path / "ca.crt")
    assert IndexSource.from_options(URL, bundle) == IndexSource(URL, bundle)
    assert IndexSource.from_options(URL, None) == IndexSource(URL, None)
    assert IndexSource.from_options(None, bundle) is None  # no index: no plugin is installed
    assert IndexSource.from_options(None, None) is None


def test_the_index_lookup_trusts_the_bundle_alone_or_else_the_systems_store(
    tmp_path: Path,
) -> None:
    context = IndexSource(URL, _ca_bundle(tmp_path / "ca.crt")).ssl_context()
    assert context is not None
    [authority] = context.get_ca_certs()
    assert authority["subject"] == ((("commonName", "unit test index CA"),),)
    assert IndexSource(URL).ssl_context() is None
