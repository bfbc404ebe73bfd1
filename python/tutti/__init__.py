# SPDX-License-Identifier: Apache-2.0
"""Python binding of libtutti (ctypes; no torch ABI involved) and its vLLM connector."""
