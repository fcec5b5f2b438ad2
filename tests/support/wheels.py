"""Wheels built in the tests: a wheel is a zip archive with a ``.dist-info`` folder (PEP 427),
written here with ``zipfile`` from a generated source tree, so each test decides its tags
(``py3-none-any``, or ``py3-none-win_amd64`` for a wheel of another platform) and its
dependencies, and nothing is fetched from outside to build it. The install-deps tests of the
integration tier serve them from a local pypiserver, the e2e tier's from the in-cluster index.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def build_wheel(
    out_dir: Path,
    name: str,
    version: str,
    files: dict[str, str],
    tag: str = "py3-none-any",
    requires: tuple[str, ...] = (),
) -> Path:
    """A wheel of ``files`` (path in the archive -> text); its filename carries ``tag``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    contents = {**files, f"{info}/METADATA": metadata, f"{info}/WHEEL": wheel_meta}
    record = "".join(
        f"{path},{_record_hash(text)},{len(text.encode())}\n" for path, text in contents.items()
    )
    record += f"{info}/RECORD,,\n"
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, text in {**contents, f"{info}/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def _record_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def file_hash(path: Path) -> str:
    """``sha256:<hex>`` of a file, as a requirements file's ``--hash`` names it."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def module_wheel(out_dir: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A wheel whose module ``name`` says its version (``VALUE``)."""
    module = name.replace("-", "_")
    text = f"VALUE = '{name} {version}'\n"
    return build_wheel(out_dir, name, version, {f"{module}/__init__.py": text}, tag)


def pinned(wheel: Path) -> str:
    """``name==version --hash=sha256:...`` for a wheel, as pip-compile writes a requirement."""
    name, version = wheel.name.split("-")[:2]
    return f"{name}=={version} --hash={file_hash(wheel)}\n"
