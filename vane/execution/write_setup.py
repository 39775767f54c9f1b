"""What both runners do before a write's rows flow: check a retry of an error ledger, wrap the
sink so the ledger is committed with the output (``errors_to``), and open the resume store
(``resume``), in that order. One function, so the runners cannot drift apart."""

from __future__ import annotations

from vane.execution.ledger import Ledger, check_retry
from vane.execution.resume import fingerprint
from vane.io.ledger import LedgeredSink
from vane.io.resume import Resume, ResumeStore
from vane.io.sinks import Sink
from vane.plan.nodes import PlanNode


def prepare_write(
    plan: PlanNode,
    sink: Sink,
    caller: str,
    *,
    resume: Resume | None,
    errors_to: str | None,
    errors_key: tuple[str, ...] | None,
    absolute_store: bool = False,
) -> tuple[Sink, Ledger | None, ResumeStore | None]:
    """The sink to write to (the ledger's, with ``errors_to``), the ledger and the open resume
    store. ``absolute_store``: the store's path made absolute, for actors whose working
    directory is not the driver's (Ray)."""
    check_retry(plan, errors_to, caller, sink.path)
    ledger = None
    if errors_to is not None:
        ledger = Ledger(plan, errors_to, errors_key, caller)
        sink = LedgeredSink(sink, errors_to, ledger.table)
    store = None
    if resume:
        store = ResumeStore(sink.path, caller)
        if absolute_store:
            store.path = store.path.absolute()
        store.open(fingerprint(plan), restart=resume == "restart")
    return sink, ledger, store
