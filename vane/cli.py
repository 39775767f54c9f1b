"""The ``vane`` command: SQL over files, a look at a file or folder, a plan, and one-shot AI
jobs, from the shell.

    vane sql "SELECT ... FROM read_parquet('data/*.parquet')" [-o out/ | --format csv]
    vane show data/
    vane explain "SELECT ..."
    vane prompt reviews.parquet --column text --model M --base-url URL -o answered/
    vane embed reviews.parquet --column text -o embedded/

A vane error prints its one-line message and exits with 1 (``--traceback`` shows the whole
traceback), a Ctrl-C one line and 130; a usage error exits with 2. vane's messages name the
Python arguments of the functions the commands call (``mode='overwrite'``): they are said here
in the command line's words (``--mode overwrite``), in one place, ``_in_shell_words``. Each
subcommand is one function below.
"""

from __future__ import annotations

import ast
import errno
import functools
import os
import re
import shlex
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import OptionInfo

import vane
from vane._display import terminal_width
from vane._sql import quote_ident
from vane._text import counted
from vane.errors import ConfigurationError, ExecutionError, VaneError
from vane.io.files import EXTENSIONS, SINGLE_FILE_SUFFIXES, FileFormat


class _ShellHelp:
    """Help as a shell reads it: an argument by its name in capitals (``vane sql [OPTIONS]
    QUERY``), and nothing after a flag that takes no value. (typer 0.2x prints ``{query}``
    and ``<bool>``.)"""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if param.param_type_name == "argument" and param.metavar is None:
                param.metavar = param.name.upper()
            elif getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        arguments = [p for p in self.get_params(ctx) if p.param_type_name == "argument"]
        shown = {p.metavar: p.metavar if p.required else f"[{p.metavar}]" for p in arguments}
        return [shown.get(piece.strip("{}[]."), piece) for piece in pieces]


class _Command(_ShellHelp, TyperCommand):
    pass


class _Group(_ShellHelp, TyperGroup):
    pass


app = typer.Typer(
    name="vane",
    cls=_Group,
    help="Batch inference over tables: DuckDB SQL, models and AI functions, from the shell.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
command = functools.partial(app.command, cls=_Command)
F = TypeVar("F", bound=Callable[..., Any])
_state = {"traceback": os.environ.get("VANE_TRACEBACK", "") not in ("", "0")}

Rows = Annotated[
    int | None,
    typer.Option("-n", "--rows", help="Rows to print (default: 20 in a table, all with --format)."),
]
Output = Annotated[
    str | None,
    typer.Option("-o", "--output", help="Write the result here instead (a path or a URL)."),
]
Format = Annotated[
    str | None,
    typer.Option(
        "--format", help="parquet, csv or json (default: from -o; without -o, to stdout)."
    ),
]
Mode = Annotated[str, typer.Option("--mode", help="error, overwrite or append.")]
ErrorColumn = Annotated[
    str | None,
    typer.Option(help="With --on-error null: a column for each failed row's error."),
]
# Named `width` as show(width=...) is, so that its messages read as this option (`--max-width 5`).
MaxWidth = Annotated[
    int | None,
    typer.Option(
        "--max-width", help="A printed table's width in characters (default: the terminal's)."
    ),
]
InputFormat = Annotated[
    str | None, typer.Option("--input-format", help="parquet, csv or json (default: detected).")
]


def _errors(function: F) -> F:
    """A vane error is one line on stderr and exit status 1, a Ctrl-C one line and status 130
    (128 + SIGINT, as a shell reports it), unless --traceback; warnings are one line each. All
    are said in the command line's words."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        def show_warning(message: Warning | str, *_: object, **__: object) -> None:
            typer.echo(f"warning: {_in_shell_words(str(message), function)}", err=True)

        try:
            with warnings.catch_warnings():
                warnings.showwarning = show_warning
                return function(*args, **kwargs)
        except VaneError as error:
            if _state["traceback"]:
                raise
            typer.echo(f"error: {_in_shell_words(str(error), function)}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            if _state["traceback"]:
                raise
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return run  # type: ignore[return-value]


# ---- vane's words for the shell's ----------------------------------------------------------

# The vane function each command calls, as messages name it ("prompt(): ...").
_CALLS = {"sql": "sql", "prompt": "prompt", "embed": "embed_text"}
_NUMBER = r"-?(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|inf)\b"
_LITERAL = rf"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|True|False|None|{_NUMBER}"
# What a message may say in Python's words, read left to right (a quoted value is read whole).
_PYTHON = re.compile(
    r"(?P<quoted>`[^`]*`)"  # a step or a query: left as it is
    rf"|\bwith_column\((?P<column>{_LITERAL}), (?P<expression>{_LITERAL})\)"
    rf"|\b(?P<name>[a-z][a-z0-9_]*)=(?P<value>{_LITERAL})?"  # mode='overwrite', template=
    r"|\b(?P<call>[a-z][a-z0-9_]*)\(\)(?P<prefix>: )?"  # prompt() needs, write_csv(): ...
    r"|\b(?P<identifier>[a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b"  # on_error (not mode: a word too)
)


def _options(function: Callable[..., Any]) -> dict[str, tuple[str, str]]:
    """The command's options by Python name: (its flag, the flag that turns it off)."""
    flags: dict[str, tuple[str, str]] = {}
    for name, annotation in get_type_hints(function, include_extras=True).items():
        info = next(
            (m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, OptionInfo)),
            None,
        )
        if info is None:
            continue
        # In Annotated, Option's first positional is a declaration, which typer keeps as the
        # default until the command is built: `Option("--max-width")` has no param_decls yet.
        first = [info.default] if isinstance(info.default, str) else []
        declared = [d for d in (*first, *(info.param_decls or ())) if d.startswith("--")]
        flag = declared[0] if declared else "--" + name.replace("_", "-")
        flags[name] = (flag, "--no-" + flag[2:])
    return flags


def _in_shell_words(message: str, function: Callable[..., Any]) -> str:
    """``message``, whose words name the Python arguments of the vane function the command
    calls, as the command line says them: ``mode='overwrite'`` is ``--mode overwrite``,
    ``on_error`` ``--on-error``, ``base_url=`` ``--base-url``, ``prompt() needs`` ``vane
    prompt needs``; a ``write_csv(): `` in front is dropped (the command is known). Text in
    backticks (a step, a query) is left as it is."""
    flags = _options(function)
    verb = function.__name__

    def option(name: str, literal: str | None) -> str | None:
        """``name=literal`` (or ``name`` alone) as its option, or None for no option."""
        if name not in flags:
            return None
        flag, negative = flags[name]
        if literal is None:
            return flag
        if re.fullmatch(_NUMBER, literal):
            return f"{flag} {literal}"  # as Python wrote it: 1e-05, inf
        value = ast.literal_eval(literal)
        if isinstance(value, bool):
            return flag if value else negative
        return f"{flag} {shlex.quote(str(value))}"

    def said(match: re.Match[str]) -> str:
        if match["column"]:  # with_column('c', 'c::VARCHAR'): what the query can say
            name, expression = (
                ast.literal_eval(match["column"]),
                ast.literal_eval(match["expression"]),
            )
            return f"{expression} AS {quote_ident(str(name))} in the query"
        if match["name"]:
            return option(match["name"], match["value"]) or match[0]
        if match["call"]:
            if match["prefix"]:  # "write_csv(): " in front of what it says
                return ""
            return f"vane {verb}" if match["call"] == _CALLS.get(verb, verb) else match[0]
        if match["identifier"]:
            return option(match["identifier"], None) or match[0]
        return match[0]

    return _PYTHON.sub(said, message)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vane {vane.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    traceback: Annotated[
        bool, typer.Option("--traceback", help="Show the whole traceback of an error.")
    ] = False,
) -> None:
    """Batch inference over tables: DuckDB SQL, models and AI functions, from the shell."""
    _state["traceback"] = _state["traceback"] or traceback


# ---- helpers --------------------------------------------------------------------------------


def _format_of(path: Path, given: str | None) -> str:
    """The file format: given, else a file's extension, else what a folder holds."""
    if given:
        if given not in EXTENSIONS:
            raise ConfigurationError(f"--format must be one of {', '.join(EXTENSIONS)}")
        return given
    names = [path.name] if path.is_file() else [p.name for p in path.rglob("*") if p.is_file()]
    for fmt, suffixes in EXTENSIONS.items():
        if any(name.endswith(suffixes) for name in names if not name.startswith((".", "_"))):
            return fmt
    raise ConfigurationError(
        f"cannot tell the format of {str(path)!r}; pass --input-format parquet, csv or json"
    )


def _open(path: str, given: str | None) -> vane.Relation:
    from vane.io.files import is_uri

    if is_uri(path):
        return _open_remote(path, given)
    location = Path(path)
    if not location.exists():
        raise vane.errors.SourceNotFoundError(f"{path!r} does not exist")
    fmt = _format_of(location, given)
    reader: Callable[..., vane.Relation] = getattr(vane, f"read_{fmt}")
    return reader(path)


def _open_remote(url: str, given: str | None) -> vane.Relation:
    """A URL (``s3://in/``): the format given, else its name's, else the first format whose
    files the prefix holds."""
    if given is not None:
        _format_of(Path("."), given)  # checks the name
        return cast("vane.Relation", getattr(vane, f"read_{given}")(url))
    name = url.rstrip("/").rsplit("/", 1)[-1].lower()
    named = next((f for f, endings in EXTENSIONS.items() if name.endswith(endings)), None)
    for fmt in [named] if named else list(EXTENSIONS):
        try:
            return cast("vane.Relation", getattr(vane, f"read_{fmt}")(url))
        except vane.errors.SourceNotFoundError:
            continue
    raise vane.errors.SourceNotFoundError(
        f"{url!r} holds no parquet, csv or json objects; pass --input-format if their names "
        "do not end in the format's extension"
    )


def _output_format(output: Path, given: str | None) -> str:
    """The format to write ``output`` in: ``--format``, else the one its name ends in, else
    Parquet. A name that says one format while --format says another is refused: writing
    Parquet into a folder called ``out.csv`` would exit 0 and leave no ``out.csv`` file."""
    if given is not None and given not in EXTENSIONS:
        raise ConfigurationError(f"--format must be one of {', '.join(EXTENSIONS)}")
    name = output.name.lower()
    named = next((fmt for fmt, endings in EXTENSIONS.items() if name.endswith(endings)), None)
    if named is None:
        return given or "parquet"  # a folder (out/, out.v2): files of the format inside
    endings = SINGLE_FILE_SUFFIXES[named]
    if not output.name.endswith(endings):  # the writers read the ending as it is spelled
        raise ConfigurationError(
            f"-o {output}: vane writes {named} uncompressed, to a file whose name ends in "
            f"{' or '.join(endings)} (lower case), or into a folder; name the output that way"
        )
    if given is not None and given != named:
        raise ConfigurationError(
            f"-o {output} names a {named} file, but --format is {given}: name the output for "
            f"its format ({output.with_name(output.name[: -len(_ending(name))])}"
            f"{SINGLE_FILE_SUFFIXES[given][0]}), or a folder, or drop --format"
        )
    return named


def _ending(name: str) -> str:
    return next(e for endings in EXTENSIONS.values() for e in endings if name.endswith(e))


def _write(rel: vane.Relation, output: str | Path, fmt: str | None, mode: str) -> None:
    # A URL stays a string: Path("s3://b/out/") would be "s3:/b/out".
    text = os.fspath(output)
    fmt = _output_format(Path(text.split("://", 1)[-1]), fmt)
    result = getattr(rel, f"write_{fmt}")(text, mode=mode)
    typer.echo(str(result))


def _print(rel: vane.Relation, rows: int, width: int | None) -> None:
    rel.show(rows, width=width)


def _to_stdout(rel: vane.Relation, fmt: str) -> None:
    """All of ``rel``, as a file of ``fmt`` holds it, on stdout, as it is produced: for a pipe
    (``vane sql ... --format csv | head``) or a redirection."""
    from vane.io.sinks import write_stream

    if fmt not in EXTENSIONS:
        raise ConfigurationError(f"--format must be one of {', '.join(EXTENSIONS)}")
    out = sys.stdout.buffer
    if fmt == "parquet" and out.isatty():
        raise ConfigurationError(
            "--format parquet without -o writes binary to stdout, which is a terminal here: "
            "redirect it (> out.parquet) or pipe it, or pass -o out.parquet"
        )
    sys.stdout.flush()
    try:
        batches = rel.iter_batches()
        try:
            write_stream(cast("FileFormat", fmt), rel.schema, batches, out)
        finally:  # a pipe closed early: the job stops, its workers with it
            getattr(batches, "close", lambda: None)()
        out.flush()
    except OSError as exc:
        if exc.errno != errno.EPIPE and not isinstance(exc, BrokenPipeError):
            raise ExecutionError(f"writing to stdout failed: {exc}") from exc
        # The reader is gone (`| head`): stop quietly, with the status of a process SIGPIPE
        # ended (128 + 13), and point stdout elsewhere so that Python's final flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(141) from None


# ---- commands -------------------------------------------------------------------------------


@command()
@_errors
def sql(
    query: Annotated[
        str, typer.Argument(help="One DuckDB query; read files with read_parquet(...).")
    ],
    rows: Rows = None,
    output: Output = None,
    format: Format = None,
    mode: Mode = "error",
    width: MaxWidth = None,
) -> None:
    """Run a DuckDB query: print its first rows, write them all with -o, or --format them.

    With --format and no -o, every row goes to stdout as CSV, JSON lines or Parquet, for a
    pipe or a redirection."""
    terminal_width(width)  # checked before anything runs
    rel = vane.sql(query)
    if output is not None:
        _write(rel if rows is None else rel.limit(rows), output, format, mode)
    elif format is not None:
        _to_stdout(rel if rows is None else rel.limit(rows), format)
    else:
        _print(rel, 20 if rows is None else rows, width)


@command()
@_errors
def show(
    path: Annotated[str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder.")],
    rows: Annotated[int, typer.Option("-n", "--rows", help="Rows to print.")] = 10,
    input_format: InputFormat = None,
    width: MaxWidth = None,
) -> None:
    """Print a file's or folder's schema, row count and first rows."""
    terminal_width(width)  # checked before anything runs
    rel = _open(path, input_format)
    count = rel.count()
    typer.echo(f"{path}: {counted(count, 'row')}")
    for field in rel.schema:
        typer.echo(f"  {field.name} {vane.types.arrow_to_duckdb(field.type)}")
    _print(rel, rows, width)


@command()
@_errors
def explain(query: Annotated[str, typer.Argument(help="One DuckDB query.")]) -> None:
    """Print how DuckDB will run a query: its plan, one box per operator.

    Each box shows an operator with the files it reads, the filters pushed into the scans
    and the rows it expects."""
    from vane.backend.connection import query_plan

    vane.sql(query)  # checked as `vane sql` checks it: one query, that binds
    typer.echo(query_plan(query))


@command()
@_errors
def prompt(
    input: Annotated[
        str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder; or a URL (s3://).")
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="Where to write the answers (a path or URL).")
    ],
    column: Annotated[str | None, typer.Option(help="The column holding each prompt.")] = None,
    template: Annotated[
        str | None, typer.Option(help="A prompt with {column} placeholders, instead.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="The model's name.")] = None,
    provider: Annotated[str, typer.Option(help="openai, lm_studio, ollama, vllm...")] = "openai",
    base_url: Annotated[str | None, typer.Option(help="The server's address.")] = None,
    api_key: Annotated[str | None, typer.Option(help="Else OPENAI_API_KEY.")] = None,
    system: Annotated[str | None, typer.Option(help="A system message.")] = None,
    output_column: Annotated[str, typer.Option(help="The answers' column.")] = "response",
    cache: Annotated[Path | None, typer.Option(help="A directory of kept answers.")] = None,
    max_concurrent_requests: Annotated[int, typer.Option(help="In flight per actor.")] = 64,
    requests_per_minute: Annotated[float | None, typer.Option(help="A rate limit.")] = None,
    on_error: Annotated[str, typer.Option(help="raise, null or skip, per row.")] = "raise",
    error_column: ErrorColumn = None,
    input_format: InputFormat = None,
    format: Format = None,
    mode: Mode = "error",
) -> None:
    """Ask an LLM about every row of a table and write the table with the answers."""
    options: dict[str, Any] = {
        "max_concurrent_requests": max_concurrent_requests,
        "on_error": on_error,
    }
    for name, value in (
        ("base_url", base_url),
        ("api_key", api_key),
        ("cache", cache),
        ("requests_per_minute", requests_per_minute),
        ("error_column", error_column),
    ):
        if value is not None:
            options[name] = value
    rel = _open(input, input_format).prompt(
        column,
        template=template,
        output_column=output_column,
        provider=provider,
        model=model,
        system=system,
        **options,
    )
    _write(rel, output, format, mode)


@command()
@_errors
def embed(
    input: Annotated[
        str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder; or a URL (s3://).")
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="Where to write the result (a path or URL).")
    ],
    column: Annotated[str, typer.Option(help="The column holding each text.")],
    model: Annotated[str | None, typer.Option(help="The model (hub id or path).")] = None,
    provider: Annotated[str, typer.Option(help="sentence_transformers, openai...")] = (
        "sentence_transformers"
    ),
    base_url: Annotated[str | None, typer.Option(help="A server's address.")] = None,
    api_key: Annotated[
        str | None, typer.Option(help="A server's key, else OPENAI_API_KEY.")
    ] = None,
    output_column: Annotated[str, typer.Option(help="The embeddings' column.")] = "embedding",
    normalize: Annotated[bool, typer.Option(help="Scale each vector to length 1.")] = False,
    on_error: Annotated[str, typer.Option(help="raise, null or skip, per row.")] = "raise",
    error_column: ErrorColumn = None,
    input_format: InputFormat = None,
    format: Format = None,
    mode: Mode = "error",
) -> None:
    """Embed the text of every row of a table and write the table with the vectors."""
    options: dict[str, Any] = {"normalize": normalize, "on_error": on_error}
    for name, value in (
        ("base_url", base_url),
        ("api_key", api_key),
        ("error_column", error_column),
    ):
        if value is not None:
            options[name] = value
    rel = _open(input, input_format).embed_text(
        column, output_column=output_column, provider=provider, model=model, **options
    )
    _write(rel, output, format, mode)


def run() -> None:
    """The console script's entry point."""
    app(prog_name="vane")


if __name__ == "__main__":
    run()
