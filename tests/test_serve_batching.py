"""The batcher dispatches as soon as its worker is free: every question that queued while a batch
was being answered joins the next batch at once, even with no fill window (max_wait_ms 0).

The answering system is a stand-in that blocks its first call until released: the batcher is what
is tested, not the model behind it."""

from __future__ import annotations

import asyncio
import threading

from lorarag.rag.records import Answer
from lorarag.serve.app import ServeSettings
from lorarag.serve.batch import Batcher


class Blocking:
    """Answers each question with itself; the first call waits until `release` is set."""

    def __init__(self) -> None:
        self.release, self.started, self.calls = threading.Event(), threading.Event(), []

    def answer(self, questions):
        self.calls.append(list(questions))
        self.started.set()
        self.release.wait(10)
        return [Answer(question=q, text=q) for q in questions]

    def close(self) -> None:
        pass


def test_questions_queued_while_busy_leave_together_without_a_fill_window():
    system = Blocking()

    async def main():
        b = Batcher(system, ServeSettings(max_wait_ms=0.0, max_batch=32))
        b.start()
        first = asyncio.ensure_future(b.ask("q0"))
        while not system.started.is_set():
            await asyncio.sleep(0.005)
        rest = [asyncio.ensure_future(b.ask(f"q{i}")) for i in range(1, 6)]
        await asyncio.sleep(0.05)  # all five are queued behind the running batch
        system.release.set()
        got = [a.text for a in await asyncio.gather(first, *rest)]
        await b.stop()
        return got, b.batches

    got, batches = asyncio.run(main())
    assert got == [f"q{i}" for i in range(6)]
    assert system.calls == [["q0"], [f"q{i}" for i in range(1, 6)]]
    assert batches == [1, 5]
