"""What a UDF step did, counted one way on every runner: rows in and out, rows ``on_error``
skipped or nulled, rows a resumable write answered from saved work, the first error, rows that
killed their actor, the UDF's usage counters, and the step's time.

A batch's counts are made from its outcome (``StepCounts.of_batch``) where the batch was
answered, and added to the step's: the local stage adds them as its batches come back; on Ray
each actor sends them to the action's tally, which adds them (``ray/tally.py``). What the step
then says (its ``BatchDone`` and ``StageFinished`` events, whose ``summary()`` is the line of
``explain(analyze=True)`` and whose usage is ``WriteResult.usage``; the warning about the rows
``on_error`` handled; the error of a budget passed) is built here from the counts alone, so
that the two runners say the same things in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vane._text import counted
from vane.errors import BudgetExceededError
from vane.observe.events import BatchDone, StageFinished, add_counts
from vane.udf.runtime import BatchOutcome
from vane.udf.spec import Budget, UdfSpec


@dataclass
class StepCounts:
    """A step's counts so far (or one batch's). Plain data: a Ray actor sends a batch's to the
    tally, and the driver reads the step's back."""

    rows_in: int = 0
    rows_out: int = 0
    skipped: int = 0  # rows on_error="skip" dropped
    nulled: int = 0  # rows on_error="null" kept as nulls
    resumed: int = 0  # rows answered from a resumable write's saved work
    first_error: str | None = None
    poisoned: list[str] = field(default_factory=list)  # rows that killed or hung their actor
    usage: dict[str, int] = field(default_factory=dict)  # the UDF's counters (requests, ...)
    # Seconds the function's calls took, summed over its batches (its actors', and an async
    # function's overlapping calls, each counted): saved answers took none.
    busy: float = 0.0
    # The step's time runs from its first stamp to its latest, by whatever clock stamps it: the
    # local stage's pool start and end, the Ray tally's first actor start and last answer.
    first: float | None = None
    last: float | None = None

    @classmethod
    def of_batch(cls, rows_in: int, outcome: BatchOutcome, *, resumed: int = 0) -> StepCounts:
        """One answered batch of ``rows_in`` rows (``resumed`` of them from saved work)."""
        return cls(
            rows_in=rows_in,
            rows_out=outcome.table.num_rows,
            skipped=outcome.rows_skipped,
            nulled=outcome.rows_nulled,
            resumed=resumed,
            first_error=outcome.first_error,
            poisoned=list(outcome.poisoned),
            usage=dict(outcome.usage),
            busy=0.0 if resumed else outcome.seconds,  # a saved answer took no time
        )

    def add(self, other: StepCounts) -> None:
        """``other``'s counts (a batch's, or another part of the step's) added to these; the
        first error stays the one seen first."""
        self.rows_in += other.rows_in
        self.rows_out += other.rows_out
        self.skipped += other.skipped
        self.nulled += other.nulled
        self.resumed += other.resumed
        self.first_error = self.first_error or other.first_error
        self.poisoned.extend(other.poisoned)
        self.usage = add_counts(self.usage, other.usage)
        self.busy += other.busy
        for stamp in (other.first, other.last):
            if stamp is not None:
                self.stamp(stamp)

    def stamp(self, now: float) -> None:
        """The step was at work at ``now``: its time spans every stamp."""
        self.first = now if self.first is None else min(self.first, now)
        self.last = now if self.last is None else max(self.last, now)

    @property
    def seconds(self) -> float:
        return self.last - self.first if self.first is not None and self.last is not None else 0.0

    def since(self, earlier: StepCounts) -> StepCounts:
        """What moved from ``earlier`` (these counts, as they were then) to now: rows and the
        counters that grew. (A progress poll's; the errors and stamps are not carried.)"""
        usage = {k: v - earlier.usage.get(k, 0) for k, v in self.usage.items()}
        return StepCounts(
            rows_in=self.rows_in - earlier.rows_in,
            rows_out=self.rows_out - earlier.rows_out,
            skipped=self.skipped - earlier.skipped,
            nulled=self.nulled - earlier.nulled,
            resumed=self.resumed - earlier.resumed,
            usage={k: v for k, v in usage.items() if v},
        )

    def progress(self, step: str, step_id: int, *, busy: int, actors: int) -> BatchDone:
        """The event for these counts as a batch's (or a poll's) progress, with the step's
        actors busy and up."""
        return BatchDone(
            step, step_id, self.rows_in, self.rows_out, busy, actors, self.usage, self.resumed
        )

    def finished(self, step: str, step_id: int) -> StageFinished:
        """The step's summary: the event at its end, ``explain(analyze=True)``'s note and
        ``WriteResult.steps``."""
        return StageFinished(
            step,
            step_id,
            self.rows_in,
            self.rows_out,
            self.skipped,
            self.nulled,
            self.seconds,
            self.usage,
            self.resumed,
            self.busy,
        )

    def warning(self, spec: UdfSpec, step: str) -> str | None:
        """What a step says at its end about the rows on_error handled (None: there were
        none)."""
        if not self.skipped and not self.nulled:
            return None
        if self.skipped:
            what = f"skipped {counted(self.skipped, 'row')} on which the function failed"
        elif spec.error_shown_as is not None:
            what = (
                f"kept {counted(self.nulled, 'failing row')} as nulls, with the error text in "
                f"column {spec.error_shown_as!r}"
            )
        else:
            what = (
                f"kept {counted(self.nulled, 'failing row')} as nulls (pass error_column='error' "
                "to the UDF to keep each row's error in a column)"
            )
        killed = ""
        if self.poisoned:
            poisoned = self.poisoned
            shown = "; ".join(poisoned[:3]) + ("; ..." if len(poisoned) > 3 else "")
            killed = (
                f". {len(poisoned):,} of them killed or hung their actor, which was replaced: "
                f"{shown}"
            )
        return f"{spec.verb} step `{step}` {what}; first error: {self.first_error}{killed}"

    def over_budget(
        self, spec: UdfSpec, step: str, budget: Budget, *, kept: bool
    ) -> BudgetExceededError:
        """What a step says when its answers passed its budget. ``kept``: a resumable write's
        checkpoint holds the answers so far."""
        tokens, cost = budget.spent(self.usage)
        spent = f"{tokens:,} tokens" + (f" (${cost:,.4f})" if cost is not None else "")
        limits = []
        if budget.max_cost is not None:
            limits.append(f"max_cost={budget.max_cost:g}")
        if budget.max_total_tokens is not None:
            limits.append(f"max_total_tokens={budget.max_total_tokens:,}")
        said = (
            "the answers so far are kept: rerun with a larger budget to go on from them"
            if kept
            else "write with resume=True to keep the answers so far for a rerun"
        )
        return BudgetExceededError(
            f"{spec.verb} step `{step}` spent {spent} on {counted(self.rows_in, 'row')}, past "
            f"its budget ({', '.join(limits)}); the job stopped there, and {said}"
        )
