# SPDX-License-Identifier: Apache-2.0
"""``python -m tutti`` and the ``tutti`` command of an installed wheel: the C command line
(demo, bench, inspect, fsck, profile, version) that the wheel carries in bin/."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _program() -> Path | None:
    here = Path(__file__).resolve().parent
    own = here / "bin" / "tutti"
    if own.exists():
        return own
    # A source tree: the repository's build, as the library is found.
    for build in ("build/release", "build/gpu"):
        exe = here.parent.parent / build / "tutti"
        if exe.exists():
            return exe
    return None


def main() -> None:
    exe = _program()
    if exe is None:
        sys.exit("tutti: the command-line program is missing: install the package with pip, "
                 "or build the repository with `make build`")
    os.execv(exe, ["tutti", *sys.argv[1:]])


if __name__ == "__main__":
    main()
