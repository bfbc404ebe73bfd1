# The build alone, into build/gpu with CUDA on (every run builds first).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
