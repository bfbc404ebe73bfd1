# SPDX-License-Identifier: Apache-2.0
"""vLLM plugin: registers TuttiConnector with vLLM's KV connector factory, so that an installed
package needs no ``kv_connector_module_path``: ``{"kv_connector": "TuttiConnector", ...}``.

vLLM calls ``register`` in each of its processes (front end, engine core, workers) through the
``vllm.general_plugins`` entry point of this package. The connector module is only imported when
a configuration names the connector.
"""

import contextlib

CONNECTOR = "TuttiConnector"
MODULE = "tutti.vllm.connector"


def register() -> None:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    # ValueError: registered already (vLLM may load plugins more than once in a process).
    with contextlib.suppress(ValueError):
        KVConnectorFactory.register_connector(CONNECTOR, MODULE, CONNECTOR)
