"""The CPU thread pool's cost per parallel step: each step gives every thread one task that is
busy for a set time (5 and 25 µs), and the median of the step's time past that is printed, at
the thread count given (default: all), three times each:

    python benchmarks/cpu_pool.py            # two threads on a 2-core machine
    python benchmarks/cpu_pool.py --threads 1

The cost is the hand-out of the tasks, the worker's wake from its spin and the hand-back. Inside
a network it is paid once per parallel step (MobileNetV2 at batch 1 runs 54 steps). Nothing
here is a test: speed is never asserted."""
import argparse

import mpsgraph as mg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="mg.set_num_threads (0: all)")
    ap.add_argument("--steps", type=int, default=20000, help="parallel steps per measurement")
    a = ap.parse_args()
    mg.set_num_threads(a.threads)
    for work_us in (5.0, 25.0):
        runs = [mg._core._cpu_pool_step_overhead_us(work_us, a.steps) for _ in range(3)]
        print(f"{mg.get_num_threads()} thread(s), tasks of {work_us:g} us: "
              + ", ".join(f"{r:.2f}" for r in runs) + " us past the task (median of each run's steps)")


if __name__ == "__main__":
    main()
