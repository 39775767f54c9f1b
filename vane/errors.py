"""Every error vane raises, in one tree.

Each error says what went wrong, where (the step, column or row), and how to fix it. Errors from
DuckDB, Arrow and the operating system are translated at the boundary where they happen, and the
original is kept as ``__cause__``. Where a builtin exception is what a user would naturally catch,
the vane error also inherits it, so ``except ValueError`` keeps working::

    VaneError
    ├── ConfigurationError        (ValueError)  bad argument to a vane function or vane.configure
    │   ├── ArgumentError         (TypeError)   a call with an unknown, misspelled or missing
    │   │                                       argument (named, with the closest valid ones)
    │   └── LedgerError                         an error ledger (errors_to=, retry_failed) that
    │                                           cannot be written, read or retried here
    ├── SchemaError               (ValueError)  an invalid type name or schema specification
    │   └── SchemaMismatchError                 data that does not match the declared schema
    ├── PlanError                 (ValueError)  a step that cannot be built: SQL that does not bind,
    │                                           an unknown column, incompatible inputs
    ├── SourceError               (OSError)     input that cannot be read
    │   └── SourceNotFoundError   (FileNotFoundError)  a path or glob that matches no file
    ├── SinkError                 (OSError)     output that cannot be written or committed
    │   └── ResumeError                         a resumable write whose saved work belongs to
    │                                           another pipeline (says what changed)
    ├── StorageError              (OSError)     an object store or remote filesystem refused or
    │   │                                       failed a request, after its retries
    │   ├── StorageNotFoundError  (FileNotFoundError)  a bucket or object that does not exist
    │   └── StorageAccessError    (PermissionError)    credentials missing, wrong, or not allowed
    ├── ExecutionError            (RuntimeError) a failure while the plan runs
    │   ├── UDFError                            a user function raised (the cause is its error)
    │   ├── ActorDiedError                      a worker process died (exit code or signal)
    │   ├── ResourceWaitError                   an action on Ray waited longer than
    │   │                                       resource_wait_timeout_s for resources
    │   ├── BudgetExceededError                 a step spent past its max_cost or
    │   │                                       max_total_tokens (resume=True keeps its work)
    │   ├── ProviderError                       a model provider (an HTTP server, a local model)
    │   │                                       failed a request, after its retries
    │   └── ServerError                         a server vane started (``vane.ai.serve``) did
    │                                           not become healthy, or kept dying
    └── MissingDependencyError    (ImportError) an optional package that is not installed
"""

from __future__ import annotations

__all__ = [
    "ActorDiedError",
    "ArgumentError",
    "BudgetExceededError",
    "ConfigurationError",
    "ExecutionError",
    "LedgerError",
    "MissingDependencyError",
    "PlanError",
    "ProviderError",
    "ResourceWaitError",
    "ResumeError",
    "SchemaError",
    "SchemaMismatchError",
    "ServerError",
    "SinkError",
    "SourceError",
    "SourceNotFoundError",
    "StorageAccessError",
    "StorageError",
    "StorageNotFoundError",
    "UDFError",
    "VaneError",
]


class VaneError(Exception):
    """The base of every error vane raises."""


class ConfigurationError(VaneError, ValueError):
    """An argument to a vane function, or a setting of ``vane.configure``, is not valid."""


class ArgumentError(ConfigurationError, TypeError):
    """A call with an argument the function does not take (a misspelled keyword, say) or
    without one it needs; the message names the closest valid ones."""


class LedgerError(ConfigurationError):
    """An error ledger (``write_*(errors_to=...)``, ``retry_failed``) that cannot be used as
    asked: a path that is not a ledger, a ledger another pipeline wrote, rows that cannot be
    retried without holding them twice. The message says which and how to go on."""


class SchemaError(VaneError, ValueError):
    """A type name or schema specification is not valid."""


class SchemaMismatchError(SchemaError):
    """Data does not match the schema it was declared with."""


class PlanError(VaneError, ValueError):
    """A step of the plan cannot be built: its SQL does not bind, or its inputs do not fit."""


class SourceError(VaneError, OSError):
    """Input data cannot be read."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """A path, directory or glob given to a source matches no file."""


class SinkError(VaneError, OSError):
    """Output cannot be written or committed; the destination is left as it was."""


class ResumeError(SinkError):
    """A ``resume=True`` write found saved work it cannot continue: another pipeline's, or
    unreadable. It says what changed; ``resume="restart"`` starts over."""


class StorageError(VaneError, OSError):
    """An object store (S3, GCS, Azure) or a remote filesystem refused or failed a request
    after vane's retries; the message names the URL and what to check, never a credential."""


class StorageNotFoundError(StorageError, FileNotFoundError):
    """A bucket, container or object that does not exist."""


class StorageAccessError(StorageError, PermissionError):
    """The store refused the credentials vane found (missing, wrong, expired or not allowed)."""


class ExecutionError(VaneError, RuntimeError):
    """A failure while the plan runs; the original error is the ``__cause__``."""


class MissingDependencyError(VaneError, ImportError):
    """An optional package is needed and not installed; the message names the extra to install."""


class UDFError(ExecutionError):
    """A user function raised; the message names the step and the rows, and the user's own
    exception (with its traceback) is the ``__cause__``."""


class ActorDiedError(ExecutionError):
    """A worker process running a UDF died (crash, ``os._exit``, killed for memory) more times
    than vane retries; the message gives its exit code or signal."""


class ResourceWaitError(ExecutionError):
    """An action on Ray waited, with nothing moving, longer than ``resource_wait_timeout_s``
    for CPUs, GPUs or memory that the cluster did not free; the message says what waited for
    what, and what held it."""


class BudgetExceededError(ExecutionError):
    """A step's answers passed its budget (``max_cost=``, ``max_total_tokens=``): the job
    stopped there, saying what was spent. With ``resume=True`` the answers so far are kept,
    and a rerun with a larger budget goes on from them."""


class ProviderError(ExecutionError):
    """A model provider failed a request after its retries (an HTTP error, a timeout, an answer
    that is not what was asked for); the message names the server and what it said."""


class ServerError(ExecutionError):
    """A server that ``vane.ai.serve`` started did not answer its health check in time, exited
    before it did, or kept dying after restarts; the message ends with the tail of its log. It
    fails the action whatever ``on_error`` says: no row is to blame."""
