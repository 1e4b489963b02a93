"""A PEP 517 build backend for the sandfleet client, standard library only.

setuptools before 70.1 cannot build a wheel without the separate `wheel`
package, and an isolated build would fetch both from an index: offline,
`pip install ./clients/python` would fail. The client is one pure-Python
package, and a wheel is a zip file with three metadata files, so this
backend writes it itself. Metadata comes from pyproject.toml's [project].
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sandfleet"


def _project() -> dict:
    """The [project] table's simple string fields (tomllib is 3.11+)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        raise RuntimeError("pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', table.group(1), re.M))
    for key in ("name", "version"):
        if key not in fields:
            raise RuntimeError(f"pyproject.toml: [project] {key} is missing")
    return fields


def _metadata(p: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    return "\n".join(lines) + "\n"


WHEEL = "Wheel-Version: 1.0\nGenerator: sandfleet_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _dist_info(p: dict) -> str:
    return f"{p['name']}-{p['version']}.dist-info"


def _package_files():
    base = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(base)):
        if name.endswith((".py", ".typed")):
            yield f"{PACKAGE}/{name}", os.path.join(base, name)


def _write_wheel(wheel_directory: str, files: list[tuple[str, bytes]]) -> str:
    p = _project()
    name = f"{p['name']}-{p['version']}-py3-none-any.whl"
    di = _dist_info(p)
    files = files + [(f"{di}/METADATA", _metadata(p).encode()), (f"{di}/WHEEL", WHEEL.encode())]
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in files:
            zf.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{di}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{di}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    di = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(p))
    with open(os.path.join(di, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(WHEEL)
    return _dist_info(p)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for arc, path in _package_files():
        with open(path, "rb") as f:
            files.append((arc, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts this directory on sys.path: edits take effect at once.
    return _write_wheel(wheel_directory, [(f"{PACKAGE}_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    name = base + ".tar.gz"
    paths = ["pyproject.toml", "build_backend/sandfleet_build.py"] + [arc for arc, _ in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in paths:
            tf.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return name
