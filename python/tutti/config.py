# SPDX-License-Identifier: Apache-2.0
"""``tutti-config``: where an installed wheel keeps what C and C++ programs build against.

    PKG_CONFIG_PATH=$(tutti-config --pkgconfigdir) cc prog.c $(pkg-config --cflags --libs tutti)
    cmake -S . -B build -Dtutti_DIR=$(tutti-config --cmakedir)   # find_package(tutti)

The wheel's tutti.pc records the library's directory as the run path of what links it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

PREFIX = Path(__file__).resolve().parent
_DIRS = {
    "prefix": PREFIX,
    "includedir": PREFIX / "include",
    "libdir": PREFIX / "lib",
    "pkgconfigdir": PREFIX / "lib" / "pkgconfig",
    "cmakedir": PREFIX / "lib" / "cmake" / "tutti",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tutti-config",
                                     description="where an installed wheel keeps what C and C++ "
                                     "programs build against")
    group = parser.add_mutually_exclusive_group(required=True)
    for name in _DIRS:
        group.add_argument(f"--{name}", dest="what", action="store_const", const=name)
    group.add_argument("--version", dest="what", action="store_const", const="version")
    group.add_argument("--cuda", dest="what", action="store_const", const="cuda",
                       help="yes or no: whether the library has the CUDA data path")
    what = parser.parse_args(argv).what
    try:
        _build = importlib.import_module("tutti._build")
    except ImportError:
        sys.exit("tutti-config: this tutti package is not an installed wheel (a source tree has "
                 "no bundled library); see README.md for the CMake install")
    if what == "version":
        print(_build.VERSION)
    elif what == "cuda":
        print("yes" if _build.CUDA else "no")
    else:
        print(_DIRS[what])


if __name__ == "__main__":
    main()
