"""mpsgraph's benchmark harness: mpsgraph against the peers that are installed (numpy always;
PyTorch eager and torch.compile, JAX, MLX, ONNX Runtime when importable; `pip install
"mpsgraph[bench]"` installs them), each (workload, peer) in its own process so that no two
thread pools compete, on the same seeded inputs.

    python -m mpsgraph.bench                          # issue 10's table of workloads, CPU
    python -m mpsgraph.bench --all                    # and the kernel-level ones
    python -m mpsgraph.bench --only gemm1024 mlp_step --peers mpsgraph torch jax
    python -m mpsgraph.bench --device cuda:0          # mpsgraph (and torch, ORT) on a GPU
    python -m mpsgraph.bench --busy-loop 1 --only mlp_step    # beside one competing busy loop
    python -m mpsgraph.bench --json out.json --markdown       # the README's table on stdout
    python -m mpsgraph.bench --from-json out.json --markdown  # the table again, no run

Each measurement: one first call (compilation, lazy set-up), warm-up calls, then timed calls
for --time-box seconds (at least --min-iters); median, min and max. The ratio is the best
peer's median over mpsgraph's: above 1 mpsgraph is faster. Progress goes to stderr.
Nothing here is a test: speed is never asserted."""
import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time

from ._worker import RESULT_TAG, load_modules
from .workloads import PEERS, WORKLOADS, Workload, legacy

__all__ = ["main", "run", "environment", "markdown", "WORKLOADS", "PEERS", "Workload", "legacy"]

_PEER_MODULE = {"numpy": "numpy", "torch": "torch", "torch.compile": "torch", "jax": "jax", "mlx": "mlx",
                "onnxruntime": "onnxruntime"}


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment():
    """What the numbers depend on: versions, BLAS, CPU, cores, vector ISA, huge pages, load."""
    import numpy as np

    import mpsgraph as mg
    env = {"mpsgraph": mg.__version__, "python": platform.python_version(), "platform": platform.platform(),
           "machine": platform.machine(), "cpu_count": os.cpu_count(), "cpus_available": _cpus(),
           "mpsgraph_default_threads": mg.get_num_threads(), "cpu_isa": mg._core._cpu_isa()}
    cpuinfo = _read("/proc/cpuinfo") or ""
    env["cpu"] = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
                      platform.processor())
    if sys.platform == "darwin":
        try:
            env["cpu"] = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                        text=True).stdout.strip() or env["cpu"]
        except OSError:
            pass
    env["transparent_hugepage"] = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    env["transparent_hugepage_defrag"] = _read("/sys/kernel/mm/transparent_hugepage/defrag")
    try:
        env["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import scipy_openblas32
        env["mpsgraph_blas"] = {"name": "scipy-openblas32", "version": _version("scipy-openblas32"),
                                "config": scipy_openblas32.get_openblas_config()}
    except ImportError:
        env["mpsgraph_blas"] = {"name": "Accelerate" if sys.platform == "darwin" else "unknown"}
    try:
        env["numpy_blas"] = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas")
    except TypeError:  # numpy < 1.26 prints only
        env["numpy_blas"] = None
    env["versions"] = {d: _version(d) for d in ("numpy", "torch", "jax", "jaxlib", "mlx", "onnxruntime", "onnx")
                       if _version(d)}
    return env


def available_peers():
    return [p for p in PEERS if p == "mpsgraph" or importlib.util.find_spec(_PEER_MODULE[p]) is not None]


def _child_env(threads, device):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    if threads == 1:  # XLA's CPU client has no other thread knob
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    if device == "cpu":
        env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _measure(req, env, timeout):
    """Runs one (workload, peer) in a fresh interpreter; the result dict (ok False on failure)."""
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "mpsgraph.bench._worker"], input=json.dumps(req), env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"workload": req["workload"], "peer": req["peer"], "ok": False,
                "error": f"timed out after {timeout} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            res["process_s"] = time.perf_counter() - t
            return res
    return {"workload": req["workload"], "peer": req["peer"], "ok": False,
            "error": f"worker exited with {p.returncode}: {(p.stderr or p.stdout)[-1500:]}"}


class _Progress:
    """A plain-text bar on stderr: redrawn in place on a terminal, one line per step otherwise."""

    def __init__(self, total, quiet=False):
        self.total, self.done, self.quiet = total, 0, quiet
        self.tty = sys.stderr.isatty()

    def _bar(self):
        w = 24
        k = w * self.done // max(1, self.total)
        return f"[{'#' * k}{'.' * (w - k)}] {self.done}/{self.total}"

    def start(self, what):
        if self.tty and not self.quiet:
            sys.stderr.write(f"\r\033[K{self._bar()} {what} ...")
            sys.stderr.flush()

    def finish(self, what, note):
        self.done += 1
        if self.quiet:
            return
        sys.stderr.write(("\r\033[K" if self.tty else "") + f"{self._bar()} {what}: {note}\n")
        sys.stderr.flush()


def fmt_time(s):
    if s is None:
        return "—"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale or unit == "µs":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"


def _note(r):
    if r.get("ok"):
        return f"{fmt_time(r['median_s'])} (min {fmt_time(r['min_s'])}, max {fmt_time(r['max_s'])}, n={r['n']})"
    return ("skipped: " if r.get("skipped") else "FAILED: ") + r.get("error", "").splitlines()[0][:200]


def summarize(results):
    """Per workload: mpsgraph's median, the best peer and ratio = best peer median / mpsgraph median."""
    out = []
    for name in dict.fromkeys(r["workload"] for r in results):
        rs = [r for r in results if r["workload"] == name and r.get("ok")]
        mine = next((r["median_s"] for r in rs if r["peer"] == "mpsgraph"), None)
        peers = [r for r in rs if not r["peer"].startswith("mpsgraph")]
        best = min(peers, key=lambda r: r["median_s"]) if peers else None
        out.append({"workload": name, "mpsgraph_s": mine, "best_peer": best and best["peer"],
                    "best_peer_s": best and best["median_s"],
                    "ratio": best["median_s"] / mine if best and mine else None})
    return out


def run(workloads, peers, device="cpu", threads=None, time_box=2.0, min_iters=5, max_iters=100000, warmup_s=0.5,
        busy_loop=0, timeout=900, modules=(), quiet=False, json_path=None):
    """Measures every (workload, peer) pair the workload implements, each in its own process;
    returns the report dict, also written to json_path after each measurement."""
    threads = threads or _cpus()
    env = _child_env(threads, device)
    pairs = [(w, p) for w in workloads for p in WORKLOADS[w].impls if p in peers or
             (p.startswith("mpsgraph") and "mpsgraph" in peers)]
    results, prog = [], _Progress(len(pairs), quiet)
    report = {"schema": 1, "command": "python -m mpsgraph.bench " + " ".join(map(shlex.quote, sys.argv[1:])),
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "settings": {"device": device, "threads": threads, "time_box_s": time_box, "min_iters": min_iters,
                           "warmup_s": warmup_s, "busy_loop": busy_loop, "peers": list(peers)},
              "environment": environment(), "workloads": {w: WORKLOADS[w].desc for w in workloads},
              "results": results, "complete": False}

    def save():
        report["summary"] = summarize(results)
        report["environment"]["load_average"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        if json_path:
            with open(json_path, "w") as f:
                json.dump(report, f, indent=1)
    busy = []
    try:
        busy += [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
                 for _ in range(busy_loop)]
        for w, p in pairs:
            prog.start(f"{w} · {p}")
            req = {"workload": w, "peer": p, "device": device, "threads": threads, "time_box": time_box,
                   "min_iters": min_iters, "max_iters": max_iters, "warmup_s": warmup_s,
                   "modules": [os.path.abspath(m) for m in modules]}
            r = _measure(req, env, timeout)
            results.append(r)
            if "description" in r:
                report["workloads"][w] = r["description"]
            prog.finish(f"{w} · {p}", _note(r))
            save()  # a partial report survives an interrupted run
    finally:
        for b in busy:
            b.kill()
            b.wait()
    report["complete"] = True
    save()
    return report


def text_table(report):
    lines = [f"{'workload':<16}{'peer':<20}{'median':>10}{'min':>10}{'max':>10}{'n':>8}  peer/mpsgraph"]
    for s in report["summary"]:
        for r in (r for r in report["results"] if r["workload"] == s["workload"]):
            if not r.get("ok"):
                lines.append(f"{s['workload']:<16}{r['peer']:<20}  {_note(r)}")
                continue
            ratio = f"{r['median_s'] / s['mpsgraph_s']:.2f}x" if s["mpsgraph_s"] else "—"
            lines.append(f"{s['workload']:<16}{r['peer']:<20}{fmt_time(r['median_s']):>10}{fmt_time(r['min_s']):>10}"
                         f"{fmt_time(r['max_s']):>10}{r['n']:>8}  {ratio}")
    return "\n".join(lines)


def markdown(report):
    """The README's table: one row per workload, a column per peer that ran, the best peer and
    the ratio (best peer's median / mpsgraph's; below 1, in bold, mpsgraph is behind)."""
    env, st = report["environment"], report["settings"]
    peers = [p for p in ["mpsgraph", "mpsgraph Graph.run"] + list(PEERS[1:])
             if any(r["peer"] == p and r.get("ok") for r in report["results"])]
    vers = ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items())
    busy = f", beside {st['busy_loop']} busy-loop process(es)" if st.get("busy_loop") else ""
    partial = "" if report.get("complete", True) else " (an interrupted run: partial)"
    load = ", ".join(f"{v:.1f}" for v in env.get("load_average", []))
    out = [f"Made with `{report['command']}` on {report['started'][:10]}: {env.get('cpu')} "
           f"({env.get('cpus_available')} cores available, mpsgraph's kernels on {env.get('cpu_isa')}), "
           f"device {st['device']}, {st['threads']} threads for every framework{busy}, transparent huge pages "
           f"`{env.get('transparent_hugepage')}`, load average {load} "
           f"at the end{partial}; mpsgraph {env.get('mpsgraph')}, {vers}. Medians of runs time-boxed to "
           f"{st['time_box_s']} s per workload and framework, each in its own process.", "",
           "| workload | " + " | ".join(peers) + " | best peer | ratio |",
           "|---|" + "---|" * (len(peers) + 2)]
    for s in report["summary"]:
        cells = []
        for p in peers:
            r = next((r for r in report["results"] if r["workload"] == s["workload"] and r["peer"] == p), None)
            cells.append(fmt_time(r["median_s"]) if r and r.get("ok") else "—")
        ratio = "—" if s["ratio"] is None else (f"**{s['ratio']:.2f}**" if s["ratio"] < 1 else f"{s['ratio']:.2f}")
        desc = report["workloads"].get(s["workload"], s["workload"])
        out.append(f"| {s['workload']}: {desc} | " + " | ".join(cells) + f" | {s['best_peer'] or '—'} | {ratio} |")
    return "\n".join(out)


def main(argv=None, modules=()):
    ap = argparse.ArgumentParser(prog="python -m mpsgraph.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="mpsgraph's device: cpu, metal, cuda:0 (default cpu)")
    ap.add_argument("--only", nargs="+", metavar="WORKLOAD", help="these workloads (see --list)")
    ap.add_argument("--all", action="store_true", help="the kernel-level workloads too")
    ap.add_argument("--skip", nargs="+", default=[], metavar="WORKLOAD")
    ap.add_argument("--peers", nargs="+", metavar="PEER", help=f"frameworks to run (default: all installed of "
                    f"{', '.join(PEERS)})")
    ap.add_argument("--threads", type=int, help="threads for mpsgraph and every peer (default: the CPUs available)")
    ap.add_argument("--time-box", type=float, default=2.0, help="seconds of timed runs per workload and peer")
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=100000)
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up runs (after the first call)")
    ap.add_argument("--busy-loop", type=int, default=0, metavar="N",
                    help="run N competing busy-loop processes during the run (a shared machine)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before one peer's process is abandoned")
    ap.add_argument("--json", metavar="PATH", help="write the report (environment, settings, results) here")
    ap.add_argument("--markdown", action="store_true", help="print the README's performance table on stdout")
    ap.add_argument("--from-json", metavar="PATH", help="no run: format this earlier report")
    ap.add_argument("--list", action="store_true", help="list the workloads and installed peers")
    ap.add_argument("--modules", nargs="+", default=[], metavar="FILE", help="extra workload files to load")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    modules = list(modules) + args.modules
    load_modules(modules)
    if args.from_json:
        with open(args.from_json) as f:
            report = json.load(f)
    else:
        if args.list:
            for w in WORKLOADS.values():
                print(f"{w.name:<18}{w.group:<7}{w.desc}  [{', '.join(w.impls)}]")
            print("installed peers:", ", ".join(available_peers()))
            return 0
        unknown = [w for w in (args.only or []) + args.skip if w not in WORKLOADS]
        if unknown:
            ap.error(f"unknown workload(s) {', '.join(unknown)}; --list shows them")
        names = args.only or [w.name for w in WORKLOADS.values() if args.all or w.group == "table"]
        names = [w for w in names if w not in args.skip]
        installed = available_peers()
        peers = [p for p in (args.peers or installed) if p in installed]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the running worker is killed too
        report = run(names, peers, args.device, args.threads, args.time_box, args.min_iters, args.max_iters,
                     args.warmup, args.busy_loop, args.timeout, modules, args.quiet, args.json)
    print(markdown(report) if args.markdown else text_table(report))
    failed = [r for r in report["results"] if r["peer"] == "mpsgraph" and not r.get("ok") and not r.get("skipped")]
    return 1 if failed else 0
