"""The environment variables vane sets in processes it starts, read there: named once, here,
for the modules that set them and those that read them, in layers that may not import each
other (``vane.execution`` and ``vane.ai``).
"""

from __future__ import annotations

# The Ray node a UDF's worker runs on, set by the Ray UDF actor (``vane.execution.ray.actor``)
# in its worker's environment: an AI function there finds its node's model server by it
# (``vane.ai.node_server``).
NODE_ID_ENV = "VANE_RAY_NODE_ID"
