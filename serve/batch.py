"""Dynamic batching with per-request isolation: one request's failure never reaches another.

A batch takes every request queued while the worker was busy, then waits at most `max_wait_ms` for
more (up to `max_batch`); with `max_wait_ms` 0 it leaves as soon as the worker is free. It is
answered on a single worker thread (the models are not shared between threads), in three steps:

1. each question alone goes through the window check (serve/window.py); one that cannot fit gets its
   QuestionTooLong and never joins the batch;
2. the rest are answered in one `system.answer` call;
3. if that call still raises, the generator being unreachable (EndpointDown, ConnectionError) is every
   request's failure and is handed to all of them; anything else is answered one question at a time, so
   only the question that raises gets its exception and the others their answers.

Each request's future gets its Answer or its own exception; the server maps exceptions to statuses.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from lorarag.rag.generators.http import EndpointDown
from lorarag.rag.records import Answer
from lorarag.serve.window import Check, window_check

log = logging.getLogger(__name__)

Outcome = Answer | Exception  # what one question of a batch ends in


class AnswerSystem(Protocol):
    """What the server needs: batched answers with their Trace (fallback.system.AdvancedRAGSystem)."""

    def answer(self, questions: list[str]) -> list[Answer]: ...

    def close(self) -> None: ...


def answer_isolated(system: AnswerSystem, check: Check | None, questions: list[str]) -> list[Outcome]:
    """One outcome per question, in order: its Answer, or the exception that question alone raised."""
    out: list = [None] * len(questions)
    ok: list[int] = []
    for i, q in enumerate(questions):
        try:
            if check is not None:
                check(q)
            ok.append(i)
        except Exception as exc:  # noqa: BLE001 -- the isolation boundary: this question's failure is its own
            out[i] = exc
    if ok:
        try:
            answers = system.answer([questions[i] for i in ok])
            for i, a in zip(ok, answers, strict=True):
                out[i] = a
        except (EndpointDown, ConnectionError) as exc:  # the generator is down: every request's failure
            for i in ok:
                out[i] = exc
        except Exception as exc:  # noqa: BLE001 -- the isolation boundary: find the question(s) that raise, alone
            if len(ok) == 1:
                out[ok[0]] = exc
            else:
                log.warning(
                    "a batch of %d failed (%s: %s); answering its questions one at a time", len(ok), type(exc).__name__, exc
                )
                for i in ok:
                    try:
                        (out[i],) = system.answer([questions[i]])
                    except Exception as one:  # noqa: BLE001 -- this question's own failure
                        out[i] = one
    return out  # every slot was set above


class Batcher:
    """Collects concurrent questions into batches for one worker thread."""

    def __init__(self, system: AnswerSystem, settings) -> None:
        self.system, self.settings = system, settings
        self.check = window_check(system)
        self.queue: asyncio.Queue[tuple[str, asyncio.Future]] = asyncio.Queue()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lorarag-answer")
        self.task: asyncio.Task | None = None
        self.batches: list[int] = []  # the size of every batch answered (the benchmark reads it)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def ask(self, question: str) -> Answer:
        """The answer to `question`, or the exception answering it alone raised."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self.queue.put((question, fut))
        return await fut

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            # everything that queued while the worker was busy joins at once (max_wait_ms 0 included)
            while len(batch) < self.settings.max_batch and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            deadline = loop.time() + self.settings.max_wait_ms / 1000
            while len(batch) < self.settings.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            self.batches.append(len(batch))
            try:
                outcomes = await loop.run_in_executor(
                    self.pool, answer_isolated, self.system, self.check, [q for q, _ in batch]
                )
            except Exception as exc:  # a bug of the isolation itself: still answer every waiting request
                log.error("batch of %d failed outside isolation", len(batch), exc_info=exc)
                outcomes = [exc] * len(batch)
            for (_, fut), o in zip(batch, outcomes):
                if fut.done():
                    continue
                if isinstance(o, Exception):
                    fut.set_exception(o)
                else:
                    fut.set_result(o)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.pool.shutdown(wait=True)
