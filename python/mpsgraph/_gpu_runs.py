"""run_async's futures for GPU runs, completed without a thread switch per run.

A run on a GPU is queued by the calling thread (``Executable._start``); what is left is to wait
for the device and set the future's result. Handing every run to a worker thread made each
``run_async`` cost several thread switches (about 50 µs per call on a 16-core host, four
times ``run()``). Here a run's future is completed by whichever comes first:

* the thread queueing runs: each ``run_async`` first completes the runs the device has
  finished, oldest first (a non-blocking event query each);
* the future itself, when asked: ``result()`` and ``exception()`` without a timeout wait for
  the device in the calling thread, ``done()`` completes a finished run;
* one waiter thread per process, for ``concurrent.futures.wait``, ``as_completed`` and done
  callbacks when nothing else asks: it blocks on the oldest pending run without the GIL, then
  lingers ``LINGER_S`` so that a thread still queueing runs completes it instead.

Runs complete in the order they were queued, per executable and across them: a future behind
a longer run on another executable's stream is completed by the waiter only after it (its own
``result()`` does not wait for that).
"""
import collections
import concurrent.futures
import threading

LINGER_S = 200e-6


class RunFuture(concurrent.futures.Future):
    """A concurrent.futures.Future of one queued GPU run (see the module's docstring)."""

    def __init__(self, queued, owner):
        super().__init__()
        self._queued = queued  # the _core._QueuedRun; None once completed
        self._owner = owner
        self._claimed = False  # a thread has taken it on to complete (under owner._lock)
        self.set_running_or_notify_cancel()

    def done(self):
        if not super().done():
            self._owner.claim(self, block=False)
        return super().done()

    def result(self, timeout=None):
        if not super().done():
            self._owner.claim(self, block=timeout is None)
        return super().result(timeout)

    def exception(self, timeout=None):
        if not super().done():
            self._owner.claim(self, block=timeout is None)
        return super().exception(timeout)


class Completions:
    def __init__(self):
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._pending = collections.deque()  # futures in queueing order; claimed ones leave from the front
        self._waiter_idle = False
        self._stopping = False
        self._waiter = threading.Thread(target=self._wait_loop, name="mpsgraph-gpu-runs", daemon=True)
        self._waiter.start()

    def submit(self, queued):
        """The future of a run just queued. Completes the runs the device has finished, this one
        too where it finished while queued (one that assigns variables) with none pending
        before it; wakes the waiter only for what is left."""
        f = RunFuture(queued, self)
        with self._lock:
            self._pending.append(f)
        self.complete_finished()
        with self._lock:
            self._drop_claimed()
            if self._pending and self._waiter_idle:
                self._work.notify()
        return f

    def claim(self, f, block):
        """Completes f in this thread unless another thread has taken it on; without block,
        only if the device has finished it."""
        with self._lock:
            if f._claimed or not (block or f._queued.finished()):
                return
            f._claimed = True
        self._complete(f)

    def complete_finished(self):
        while True:
            with self._lock:
                self._drop_claimed()
                if not self._pending or not self._pending[0]._queued.finished():
                    return
                f = self._pending.popleft()
                f._claimed = True
            self._complete(f)

    def _drop_claimed(self):
        while self._pending and self._pending[0]._claimed:
            self._pending.popleft()

    @staticmethod
    def _complete(f):
        queued, f._queued = f._queued, None
        error = None
        try:
            r = queued.result()
        except BaseException as e:  # raised through the future, as from an executor's worker
            r, error = None, e
        # the run's references (its executable's among them) go before anyone is woken, so that
        # an executable is not destroyed on this thread behind its owner's back
        del queued
        if error is None:
            f.set_result(r)
        else:
            f.set_exception(error)

    def _wait_loop(self):
        while True:
            with self._lock:
                self._drop_claimed()
                while not self._pending and not self._stopping:
                    self._waiter_idle = True
                    self._work.wait()
                    self._waiter_idle = False
                    self._drop_claimed()
                if not self._pending:
                    return
                queued = self._pending[0]._queued
            queued.wait_finished(LINGER_S)  # without the GIL
            self.complete_finished()

    def shutdown(self):
        """At interpreter exit: completes every pending run, then stops the waiter."""
        with self._lock:
            self._stopping = True
            pending = list(self._pending)
            self._work.notify()
        for f in pending:
            self.claim(f, block=True)
        self._waiter.join(1.0)


_completions = None
_lock = threading.Lock()


def completions():
    global _completions
    with _lock:
        if _completions is None:
            _completions = Completions()
            # before the interpreter joins its threads, as concurrent.futures' own workers do
            try:
                threading._register_atexit(_completions.shutdown)
            except (AttributeError, RuntimeError):  # not in this Python, or already shutting down
                pass
        return _completions


def forget():
    """After fork(): the child has no waiter thread; make a new one there when needed."""
    global _completions, _lock
    _completions = None
    _lock = threading.Lock()
