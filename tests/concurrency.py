"""Running test work on several Python threads at once."""
import threading


def run_concurrently(work, cases):
    """work(*case) for each case on its own Python thread: every one finishes, none raises."""
    errors = []

    def guarded(*case):
        try:
            work(*case)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=c) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run did not finish"
    assert not errors, errors
