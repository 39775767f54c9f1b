"""Thread actors: each actor is a thread in the driver process with its own event loop and its
own UDF instance, constructed in that thread. Right for GIL-releasing (torch, numpy, DuckDB) and
I/O-bound or async UDFs."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pyarrow as pa

from vane.execution.actors.base import Actor, ActorPool
from vane.udf.runtime import BatchOutcome, Task, UdfRuntime
from vane.udf.spec import UdfSpec


class ThreadActor(Actor):
    def __init__(self, index: int, spec: UdfSpec, schema: pa.Schema, step: str) -> None:
        self.index = index
        self._loop = asyncio.new_event_loop()
        self._ready: Future[UdfRuntime] = Future()
        self._thread = threading.Thread(
            target=self._main, args=(spec, schema, step), name=f"vane-actor-{index}", daemon=True
        )
        self._thread.start()
        self._runtime = self._ready.result()  # the constructor's error, if any, raises here
        self._slots = asyncio.Semaphore(spec.max_concurrency_per_actor if spec.is_async else 1)

    def _main(self, spec: UdfSpec, schema: pa.Schema, step: str) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            runtime = UdfRuntime(spec, schema, step)
        except BaseException as exc:
            self._ready.set_exception(exc)
            self._loop.close()
            return
        self._ready.set_result(runtime)
        self._loop.run_forever()
        self._loop.close()

    async def _run(self, task: Task) -> BatchOutcome:
        async with self._slots:
            try:
                return await self._runtime.run(task)
            except (KeyboardInterrupt, SystemExit) as exc:
                # Raised out of the event loop these would end this actor's thread and leave
                # the batch's future waiting forever: report them as the UDF's failure.
                raise self._runtime.failure(task, exc) from exc

    def submit(self, task: Task) -> Future[BatchOutcome]:
        return asyncio.run_coroutine_threadsafe(self._run(task), self._loop)

    def stop(self, *, graceful: bool = True) -> None:
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            # Cancel batches still queued here (after an error elsewhere) instead of leaving
            # coroutines that never ran; a call already running finishes first.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join()


class ThreadPool(ActorPool):
    def _start_actor(self, index: int) -> Actor:
        return ThreadActor(index, self.spec, self.schema, self.step)
