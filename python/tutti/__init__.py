# SPDX-License-Identifier: Apache-2.0
"""Python binding of libtutti (ctypes; no torch ABI involved) and its vLLM connector.

``tutti.__version__`` is the one version of the library, the CLI and this package. An installed
wheel carries its own libtutti.so; one built without CUDA says so when imported (a warning on the
``tutti`` logger), and ``tutti.CUDA`` and ``tutti.BUILD`` say what it holds.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

_build: ModuleType | None
try:
    _build = importlib.import_module("tutti._build")  # written into the wheel by CMake
except ImportError:  # a source tree: the library is the one TUTTI_LIBRARY or a build names
    _build = None

#: Whether the bundled library has the CUDA data path (None: not a wheel; ask the library).
CUDA: bool | None = _build.CUDA if _build is not None else None
#: What the bundled library holds, as ``tutti --version`` says it (None: not a wheel).
BUILD: str | None = _build.DESCRIPTION if _build is not None else None

if _build is not None and not _build.CUDA:
    logging.getLogger("tutti").warning(
        "tutti %s is a CPU build (no CUDA): KV in GPU memory and the gpu-uring and gds engines "
        "are not available; a wheel built where nvcc is installed has them", _build.VERSION)


def __getattr__(name: str) -> str:
    # Outside a wheel the version is the loaded library's (the only source is its header).
    if name == "__version__":
        if _build is not None:
            return str(_build.VERSION)
        from tutti import _lib

        return str(_lib.lib().tutti_version().decode())
    raise AttributeError(f"module 'tutti' has no attribute {name!r}")
