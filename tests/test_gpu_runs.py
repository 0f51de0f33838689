"""run_async's GPU futures (mpsgraph._gpu_runs) against a fake device, so they run everywhere:
every future completes exactly once, with its run's result or error, whoever completes it (the
queueing thread, the future itself, or the waiter thread), and concurrent.futures' own
helpers (wait, as_completed, callbacks, timeouts) behave as with an executor's futures. The
same futures on a real GPU: tests/test_cuda_flow.py."""
import concurrent.futures
import random
import threading
import time

import pytest

from mpsgraph import _gpu_runs


class FakeRun:
    """A queued run on a fake device: finished when the test sets it (a _core._QueuedRun's
    interface)."""

    def __init__(self, value, error=None):
        self.device_done = threading.Event()
        self.value, self.error = value, error
        self.results = 0

    def finished(self):
        return self.device_done.is_set()

    def wait_finished(self, linger_s):
        self.device_done.wait()
        time.sleep(linger_s)

    def result(self):
        self.device_done.wait()
        self.results += 1
        if self.error:
            raise self.error
        return self.value


@pytest.fixture
def completions():
    c = _gpu_runs.Completions()
    yield c
    c.shutdown()
    assert not c._waiter.is_alive()


def finish_later(runs, delay=0.02, order=None):
    def go():
        for r in order or runs:
            time.sleep(delay / len(runs))
            r.device_done.set()

    t = threading.Thread(target=go)
    t.start()
    return t


def test_result_blocks_until_the_device_finishes(completions):
    run = FakeRun([1, 2])
    f = completions.submit(run)
    assert isinstance(f, concurrent.futures.Future) and not f.done()
    t = finish_later([run], delay=0.05)
    assert f.result() == [1, 2]
    t.join()
    assert run.results == 1 and f.done()


def test_result_with_a_timeout_times_out_then_completes(completions):
    run = FakeRun("r")
    f = completions.submit(run)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(timeout=0.05)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.exception(timeout=0.01)
    run.device_done.set()
    assert f.result(timeout=10) == "r"  # completed by the waiter thread
    assert run.results == 1


def test_wait_as_completed_and_callbacks_complete_without_being_asked(completions):
    runs = [FakeRun(k) for k in range(20)]
    futs = [completions.submit(r) for r in runs]
    called = []
    for f in futs:
        f.add_done_callback(lambda f: called.append(f.result()))
    t = finish_later(runs)
    done, not_done = concurrent.futures.wait(futs, timeout=10)
    assert not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futs, timeout=10)) == list(range(20))
    t.join()
    deadline = time.monotonic() + 10  # callbacks run after wait() is woken
    while len(called) < 20 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sorted(called) == list(range(20))
    assert all(r.results == 1 for r in runs)


def test_submit_completes_the_runs_already_finished(completions):
    runs = [FakeRun(k) for k in range(5)]
    futs = [completions.submit(r) for r in runs]
    for r in runs[:3]:
        r.device_done.set()
    last = FakeRun(None)
    assert not completions.submit(last).cancel()  # running: it cannot be cancelled
    assert [concurrent.futures.Future.done(f) for f in futs] == [True, True, True, False, False]
    for r in runs[3:] + [last]:
        r.device_done.set()
    assert [f.result() for f in futs] == list(range(5))


def test_a_run_finished_when_queued_completes_at_once_unless_older_ones_wait(completions):
    done_run = FakeRun("sync")
    done_run.device_done.set()  # as a run that assigns variables: complete when run_async returns
    f = completions.submit(done_run)
    assert concurrent.futures.Future.done(f) and f.result() == "sync"
    slow = FakeRun("slow")
    fs = completions.submit(slow)
    later = FakeRun("later")
    later.device_done.set()
    fl = completions.submit(later)  # behind an unfinished run: in order, not at once
    assert not concurrent.futures.Future.done(fl)
    slow.device_done.set()
    assert fs.result() == "slow" and fl.result() == "later"
    assert done_run.results == slow.results == later.results == 1


def test_done_completes_a_finished_run_and_errors_come_through(completions):
    err = ValueError("[matmul] inner dimensions differ")
    run = FakeRun(None, error=err)
    f = completions.submit(run)
    run.device_done.set()
    while not f.done():
        pass
    assert f.exception() is err
    with pytest.raises(ValueError, match="inner dimensions"):
        f.result()
    assert run.results == 1


def test_runs_finishing_out_of_order_each_complete_once_under_many_threads(completions):
    rng = random.Random(5)
    runs = [FakeRun(k) for k in range(300)]
    futs = [completions.submit(r) for r in runs]
    order = runs[:]
    rng.shuffle(order)  # several streams: later runs may finish first
    t = finish_later(runs, delay=0.3, order=order)
    got = [None] * len(futs)

    def reader(seed):
        r = random.Random(seed)
        for k in r.sample(range(len(futs)), len(futs)):
            f = futs[k]
            if r.random() < 0.3:
                f.done()
            else:
                got[k] = f.result(timeout=None if r.random() < 0.5 else 30)

    readers = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for th in readers:
        th.start()
    for th in readers:
        th.join()
    t.join()
    assert [f.result() for f in futs] == list(range(300))
    assert all(r.results == 1 for r in runs)


def test_shutdown_completes_the_pending_runs():
    c = _gpu_runs.Completions()
    runs = [FakeRun(k) for k in range(4)]
    futs = [c.submit(r) for r in runs]
    t = finish_later(runs)
    c.shutdown()
    t.join()
    assert [concurrent.futures.Future.result(f, timeout=0) for f in futs] == list(range(4))
    assert not c._waiter.is_alive()
