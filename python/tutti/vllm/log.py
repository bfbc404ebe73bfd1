# SPDX-License-Identifier: Apache-2.0
"""The connector's logger: a child of vLLM's, so that its lines (and the library's, which the
connector's stores send here) appear with vLLM's own, in its format, at its level
(``VLLM_LOGGING_LEVEL``) and under its configuration (``VLLM_CONFIGURE_LOGGING``,
``VLLM_LOGGING_CONFIG_PATH``). vLLM configures the ``vllm`` logger tree only: a logger outside
it, such as ``tutti``, has no handler in a vLLM process, and its INFO lines go nowhere.

The serving core logs to ``tutti.serving`` (plain ``logging``). Importing this module routes
that logger into this one: its records are handed to the connector's logger, which passes on
those its level lets through, and go nowhere else."""

import logging

from vllm.logger import init_logger

from tutti.serving import LOGGER_NAME as CORE_LOGGER_NAME

LOGGER_NAME = "vllm.tutti"

log = init_logger(LOGGER_NAME)


class _IntoVllm(logging.Handler):
    """Hands the core's records to the connector's logger, at its level."""

    def emit(self, record: logging.LogRecord) -> None:
        if log.isEnabledFor(record.levelno):
            log.handle(record)


def _route_core() -> None:
    core = logging.getLogger(CORE_LOGGER_NAME)
    if any(isinstance(h, _IntoVllm) for h in core.handlers):
        return
    core.addHandler(_IntoVllm())
    core.setLevel(logging.DEBUG)  # the connector's logger decides
    core.propagate = False


_route_core()
