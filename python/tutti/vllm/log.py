# SPDX-License-Identifier: Apache-2.0
"""The connector's logger: a child of vLLM's, so that its lines (and the library's, which the
connector's stores send here) appear with vLLM's own, in its format, at its level
(``VLLM_LOGGING_LEVEL``) and under its configuration (``VLLM_CONFIGURE_LOGGING``,
``VLLM_LOGGING_CONFIG_PATH``). vLLM configures the ``vllm`` logger tree only: a logger outside
it, such as ``tutti``, has no handler in a vLLM process, and its INFO lines go nowhere."""

from vllm.logger import init_logger

LOGGER_NAME = "vllm.tutti"

log = init_logger(LOGGER_NAME)
