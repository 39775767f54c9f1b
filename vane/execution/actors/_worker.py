"""The entry point of a subprocess actor: ``python -m vane.execution.actors._worker IN OUT``.

It reads the INIT frame (the cloudpickled UDF spec), constructs the UDF once, answers READY,
then runs batches until STOP or until the driver's end of the pipe closes. Batches run as
coroutines on one event loop, so an async UDF overlaps up to its concurrency limit.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import threading
from typing import Any

import cloudpickle

from vane.execution.actors import ipc


def error_payload(error: BaseException) -> bytes:
    """``error`` to raise in the driver, its ``__cause__`` (the user's exception) when it has
    one, and the formatted traceback of the cause (or of the error itself)."""
    from vane.udf.runtime import format_traceback

    cause = error.__cause__
    payload: dict[str, Any] = {"traceback": format_traceback(cause or error)}
    for key, value in (("error", error), ("cause", cause)):
        if value is None:
            payload[key] = None
            continue
        try:
            payload[key] = cloudpickle.dumps(value)
            pickle.loads(payload[key])  # some exceptions pickle but do not unpickle
        except Exception:
            payload[key] = cloudpickle.dumps(RuntimeError(f"{type(value).__name__}: {value}"))
    data: bytes = cloudpickle.dumps(payload)
    return data


def main(read_fd: int, write_fd: int) -> None:
    kind, body = ipc.read_frame(read_fd)
    assert kind == ipc.INIT, kind
    init = cloudpickle.loads(body)
    sys.path[:0] = [p for p in init["sys_path"] if p not in sys.path]
    from vane.udf.runtime import Task, UdfRuntime

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    write_lock = threading.Lock()

    def send(kind: bytes, *parts: Any) -> None:
        with write_lock:
            ipc.write_frame(write_fd, kind, *parts)

    try:
        spec = cloudpickle.loads(init["spec"])
        runtime = UdfRuntime(spec, init["schema"], init["step"])
    except BaseException as exc:
        send(ipc.FAILED, ipc.pack_ids(-1, 0), error_payload(exc))
        return
    send(ipc.READY)
    slots = asyncio.Semaphore(spec.max_concurrency_per_actor if spec.is_async else 1)

    async def run(seq: int, offset: int, table_body: memoryview) -> None:
        async with slots:
            task = Task(seq, offset, ipc.buffer_to_table(table_body))
            try:
                outcome = await runtime.run(task)
            except Exception as exc:
                send(ipc.FAILED, ipc.pack_ids(seq, 0), error_payload(exc))
                return
            except (KeyboardInterrupt, SystemExit) as exc:
                # A UDF calling sys.exit() fails its batch; it does not take the worker down.
                send(ipc.FAILED, ipc.pack_ids(seq, 0), error_payload(runtime.failure(task, exc)))
                return
            meta = json.dumps(
                [outcome.rows_skipped, outcome.rows_nulled, outcome.first_error, outcome.dropped]
            ).encode()
            send(
                ipc.RESULT,
                ipc.pack_ids(seq, len(meta)),
                meta,
                ipc.table_to_buffer(outcome.table),
            )

    pending: set[asyncio.Future[None]] = set()

    def reader() -> None:
        # Requests are read on their own thread so a long batch never stops the next one from
        # being received (hazard 1 in ipc.py, seen from the worker's side).
        while True:
            try:
                kind, body = ipc.read_frame(read_fd)
            except EOFError:
                kind = ipc.STOP
            if kind == ipc.STOP:
                loop.call_soon_threadsafe(loop.stop)
                return
            seq, offset, rest = ipc.unpack_ids(body)
            loop.call_soon_threadsafe(_spawn, seq, offset, rest)

    def _spawn(seq: int, offset: int, rest: memoryview) -> None:
        future = asyncio.ensure_future(run(seq, offset, rest))
        pending.add(future)
        future.add_done_callback(pending.discard)

    threading.Thread(target=reader, name="vane-worker-reader", daemon=True).start()
    loop.run_forever()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
