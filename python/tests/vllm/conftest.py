# SPDX-License-Identifier: Apache-2.0
"""What the vLLM tests share: the tiny Llama they serve (tiny_llama.py), made once per module."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    import tiny_llama

    return tiny_llama.make(tmp_path_factory.mktemp("model") / "tiny-llama")
