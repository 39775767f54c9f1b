"""``Relation``: the lazy, immutable user API over a logical plan.

Every verb builds a new plan node (which validates itself and derives its schema) and returns a
new ``Relation``; nothing runs until an action (``to_arrow``, ``count``, ``show``, ``write_*``,
iteration) hands the plan to the runner. The class is assembled from its parts, one module
each: the plan it holds (``base``), the relational verbs (``verbs``), the UDF steps and AI
functions (``udf_verbs``), the actions (``actions``) and the writes (``writes``).
"""

from __future__ import annotations

from vane.relation.actions import Actions
from vane.relation.udf_verbs import UdfVerbs
from vane.relation.writes import Writes

__all__ = ["Relation"]


class Relation(UdfVerbs, Actions, Writes):
    """A lazy table: a logical plan that runs only when an action asks for its rows.

    >>> import vane
    >>> rel = vane.from_pydict({"id": [1, 2, 3], "x": [10.0, 20.0, 30.0]})
    >>> rel.filter("x > 15").select("id", "x * 2 AS y").to_pylist()
    [{'id': 2, 'y': 40.0}, {'id': 3, 'y': 60.0}]
    """

    __slots__ = ()
