"""The ``vane`` command: SQL over files, a look at a file or folder, a plan, and one-shot AI
jobs, from the shell.

    vane sql "SELECT ... FROM read_parquet('data/*.parquet')" [-o out/]
    vane show data/
    vane explain "SELECT ..."
    vane prompt reviews.parquet --column text --model M --base-url URL -o answered/
    vane embed reviews.parquet --column text -o embedded/

A vane error prints its one-line message and exits with 1 (``--traceback`` shows the whole
traceback); a usage error exits with 2. Each subcommand is one function below.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

import vane
from vane.errors import ConfigurationError, VaneError
from vane.io.files import EXTENSIONS, SINGLE_FILE_SUFFIXES

app = typer.Typer(
    name="vane",
    help="Batch inference over tables: DuckDB SQL, models and AI functions, from the shell.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
F = TypeVar("F", bound=Callable[..., Any])
_state = {"traceback": os.environ.get("VANE_TRACEBACK", "") not in ("", "0")}

Rows = Annotated[int, typer.Option("-n", "--rows", help="Rows to print.")]
Output = Annotated[
    Path | None, typer.Option("-o", "--output", help="Write the result here instead.")
]
Format = Annotated[
    str | None, typer.Option("--format", help="parquet, csv or json (default: from -o).")
]
Mode = Annotated[str, typer.Option("--mode", help="error, overwrite or append.")]
InputFormat = Annotated[
    str | None, typer.Option("--input-format", help="parquet, csv or json (default: detected).")
]


def _errors(command: F) -> F:
    """A vane error is one line on stderr and exit status 1, unless --traceback."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except VaneError as error:
            if _state["traceback"]:
                raise
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None

    return run  # type: ignore[return-value]


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
    location = Path(path)
    if not location.exists():
        raise vane.errors.SourceNotFoundError(f"{path!r} does not exist")
    fmt = _format_of(location, given)
    reader: Callable[..., vane.Relation] = getattr(vane, f"read_{fmt}")
    return reader(path)


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


def _write(rel: vane.Relation, output: Path, fmt: str | None, mode: str) -> None:
    fmt = _output_format(output, fmt)
    result = getattr(rel, f"write_{fmt}")(str(output), mode=mode)
    typer.echo(str(result))


def _print(rel: vane.Relation, rows: int) -> None:
    rel.show(rows)


# ---- commands -------------------------------------------------------------------------------


@app.command()
@_errors
def sql(
    query: Annotated[
        str, typer.Argument(help="One DuckDB query; read files with read_parquet(...).")
    ],
    rows: Rows = 20,
    output: Output = None,
    format: Format = None,
    mode: Mode = "error",
) -> None:
    """Run a DuckDB query: print its first rows, or write it all with -o."""
    rel = vane.sql(query)
    if output is None:
        _print(rel, rows)
    else:
        _write(rel, output, format, mode)


@app.command()
@_errors
def show(
    path: Annotated[str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder.")],
    rows: Rows = 10,
    input_format: InputFormat = None,
) -> None:
    """Print a file's or folder's schema, row count and first rows."""
    rel = _open(path, input_format)
    typer.echo(f"{path}: {rel.count():,} rows")
    for field in rel.schema:
        typer.echo(f"  {field.name} {vane.types.arrow_to_duckdb(field.type)}")
    _print(rel, rows)


@app.command()
@_errors
def explain(
    query: Annotated[str, typer.Argument(help="One DuckDB query.")],
    optimized: Annotated[bool, typer.Option(help="Show the plan as it will run.")] = False,
) -> None:
    """Print the plan of a query, one line per step."""
    typer.echo(vane.sql(query).explain(optimized=optimized))


@app.command()
@_errors
def prompt(
    input: Annotated[str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the answers.")],
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


@app.command()
@_errors
def embed(
    input: Annotated[str, typer.Argument(help="A Parquet, CSV or JSON file, or a folder.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the result.")],
    column: Annotated[str, typer.Option(help="The column holding each text.")],
    model: Annotated[str | None, typer.Option(help="The model (hub id or path).")] = None,
    provider: Annotated[str, typer.Option(help="sentence_transformers, openai...")] = (
        "sentence_transformers"
    ),
    base_url: Annotated[str | None, typer.Option(help="A server's address.")] = None,
    output_column: Annotated[str, typer.Option(help="The embeddings' column.")] = "embedding",
    normalize: Annotated[bool, typer.Option(help="Scale each vector to length 1.")] = False,
    input_format: InputFormat = None,
    format: Format = None,
    mode: Mode = "error",
) -> None:
    """Embed the text of every row of a table and write the table with the vectors."""
    options: dict[str, Any] = {"normalize": normalize}
    if base_url is not None:
        options["base_url"] = base_url
    rel = _open(input, input_format).embed_text(
        column, output_column=output_column, provider=provider, model=model, **options
    )
    _write(rel, output, format, mode)


def run() -> None:
    """The console script's entry point."""
    app(prog_name="vane")


if __name__ == "__main__":
    run()
