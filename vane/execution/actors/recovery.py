"""What becomes of a batch whose actor was lost: the recovery policy an actor pool consults.

The pool (``base.py``) is the mechanism: it notices that an actor is lost (its process died, or
a call overran ``batch_timeout_s`` and cannot be stopped), starts a replacement and sends the
batches that never started elsewhere. For the batch that *was* running it asks
``Recovery.after_loss`` and carries out the answer, a ``Decision``:

- ``Retry``: send the batch again, with its retries or deaths counted;
- ``Split``: run these consecutive pieces of it as batches of their own and join their outcomes;
- ``GiveUp``: fail the batch (and so the step) with this error;
- ``PoisonRow``: settle the batch with this outcome (its one row dropped or kept as nulls).

The rules:

- ``on_error="raise"``: a batch whose worker died is sent again, up to ``MAX_DEATHS_PER_BATCH``
  times (a process killed for memory may succeed next time); a batch that hung is an attempt
  that failed, retried up to ``max_retries`` times. Then the step fails.
- ``"skip"``/``"null"``: bisection, as for a function that raises: a batch of several rows is
  split in halves that run on their own (a hang first uses up its retries); a single row that
  kills or hangs its actor is a *poison row*: dropped, or kept as nulls with the error text, and
  listed in the step's warning. One poison row among n costs about log2(n) + 1 lost actors.

A lost *unit* (several of the function's batches sent as one: ``Task.call_rows``) is first
split into its batches, each sent again on its own and uncharged, since which of them was
running is not known; the rules above then apply to each. A poison row costs one more actor.

The policy is pure: it reads the batch, what it has survived and how it was lost, and changes
nothing; a decision is all it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa

from vane.errors import ActorDiedError, ExecutionError, UDFError
from vane.udf.runtime import BatchOutcome, Task, failed_rows
from vane.udf.spec import UdfSpec

MAX_DEATHS_PER_BATCH = 3


@dataclass(frozen=True)
class Loss:
    """Why an actor lost the batch it was running: its process died, or the call hung."""

    hung: bool
    text: str  # "the worker process (pid 12) exited with code 137"
    attempt: int = 0  # for a hang, the attempt that hung
    where: str = ""  # for a hang, where the call was stuck

    @property
    def row_error(self) -> str:
        return f"{'TimeoutError' if self.hung else 'ActorDiedError'}: {self.text}"


@dataclass(frozen=True)
class Retry:
    """Send the batch again as ``task`` (a hang's attempt counted in it), the batch having
    survived ``deaths`` deaths of its actor."""

    task: Task
    deaths: int


@dataclass(frozen=True)
class Split:
    """Run ``tasks``, consecutive pieces of the batch, as batches of their own (each starting
    with no deaths); the batch's outcome is theirs joined in order, or the first error."""

    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class GiveUp:
    """The batch fails with ``error``, and with it the step."""

    error: ExecutionError


@dataclass(frozen=True)
class PoisonRow:
    """The batch, a single row that kills or hangs its actor, ends with ``outcome``: the row
    dropped, or kept as nulls, with the error text (``on_error``)."""

    outcome: BatchOutcome


Decision = Retry | Split | GiveUp | PoisonRow


@dataclass(frozen=True)
class Recovery:
    """The recovery policy of one step's pool. ``where`` names the step in messages."""

    spec: UdfSpec
    schema: pa.Schema
    where: str

    def after_loss(self, task: Task, deaths: int, loss: Loss, abandon_note: str = "") -> Decision:
        """What to do with ``task``, lost with its actor as ``loss`` says, after ``deaths``
        earlier deaths of the actors running it. ``abandon_note`` is said of an actor given up
        on while its code still runs (``Actor.abandon_note``)."""
        spec = self.spec
        if task.calls > 1:
            # A unit of several calls (``Task.call_rows``): which of them hung or killed the
            # actor is not known, so none is charged. Each is sent again as a batch of its own,
            # and is charged as below if it is lost again.
            return Split(tuple(task.split_calls()))
        if loss.hung:
            attempts = loss.attempt + 1
            if attempts <= spec.max_retries:
                return Retry(replace(task, attempts_done=attempts), deaths)
        else:
            deaths += 1
            if spec.on_error == "raise" and deaths <= MAX_DEATHS_PER_BATCH:
                return Retry(task, deaths)
        if spec.on_error == "raise":
            return GiveUp(self._error(task, deaths, loss, abandon_note))
        if task.table.num_rows > 1:
            # A hang used up the batch's retries; a death did not touch them.
            return Split(task.halves(spec.max_retries if loss.hung else task.attempts_done))
        poisoned = [f"input row {task.row(0)}: {loss.text}"]
        attempts = max(deaths, loss.attempt + 1 if loss.hung else 1)
        return PoisonRow(
            failed_rows(spec, self.schema, task.table, loss.row_error, poisoned, attempts=attempts)
        )

    def _error(self, task: Task, deaths: int, loss: Loss, abandon_note: str) -> ExecutionError:
        rows = task.rows
        if not loss.hung:
            return ActorDiedError(
                f"{self.where}: {loss.text} while running input rows {rows}, {deaths} "
                f"times; vane retries a batch {MAX_DEATHS_PER_BATCH} times. Check the worker's "
                "output above, and its memory use (a process killed by SIGKILL is often out of "
                "memory); on_error='skip' drops the rows that kill their worker"
            )
        tries = self.spec.max_retries + 1
        error = UDFError(
            f"{self.where}: input rows {rows} did not finish within batch_timeout_s="
            f"{self.spec.batch_timeout_s:g} s (after {tries} attempt{'s' * (tries != 1)}); "
            f"the call was stuck at {loss.where}{abandon_note}. Raise batch_timeout_s, "
            "or pass on_error='skip' to drop rows that hang or on_error='null' to keep them "
            "as nulls"
        )
        error.__cause__ = TimeoutError(loss.text)
        return error
