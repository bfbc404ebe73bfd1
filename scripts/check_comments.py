# SPDX-License-Identifier: Apache-2.0
"""Comments state a rule and cite the claim that backs it (docs/results.md, "E25"); they do not
quote measured figures, which go stale as the code and the machines change while the results
page is kept current. Reads the comments of the C, CUDA and Python sources of the product
(src/, cuda/, include/, tools/, python/tutti/: C block comments, Python comments and
docstrings) and prints each figure that reads as a measurement: a rate (GB/s, s/GB), a ratio
(0.92x), a percentage faster or slower, a time with a fraction (1.1 ms). Rules such as "every
50 us" carry no fraction and pass. Exits 1 when it finds any."""

import re
import subprocess
import sys

MEASURED = re.compile(
    r"\b\d[\d.,]*(\s?-\s?\d[\d.,]*)?\s?(GB/s|MB/s|GiB/s|MiB/s|TB/s|s/GB)\b"
    r"|\b\d+\.\d+(-\d+\.\d+)?x\b"
    r"|\b\d+(\.\d+)?(-\d+(\.\d+)?)?% (faster|slower|less|more|lower|higher)\b"
    r"|\b\d+\.\d+ ?(ms|us|µs|s)\b")
C_COMMENT = re.compile(r"/\*[\s\S]*?\*/")
PY_COMMENT = re.compile(r"#[^\n]*|\"\"\"[\s\S]*?\"\"\"")


def main() -> int:
    files = subprocess.run(["git", "ls-files", "src", "cuda", "include", "tools", "python/tutti"],
                           capture_output=True, text=True, check=True).stdout.split()
    found = 0
    for path in files:
        if path.endswith(".py"):
            comment = PY_COMMENT
        elif path.endswith((".c", ".h", ".cu", ".cuh")):
            comment = C_COMMENT
        else:
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for c in comment.finditer(text):
            for m in MEASURED.finditer(c.group()):
                line = text.count("\n", 0, c.start() + m.start()) + 1
                print(f"{path}:{line}: {m.group()}", file=sys.stderr)
                found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
