"""The benchmark harness (python -m mpsgraph.bench) as a program: it runs a tiny workload with
mpsgraph and the numpy peer, each in its own process, and writes a report with the fields it
promises. No timing is asserted."""
import json
import os
import subprocess
import sys

import pytest

from mpsgraph.bench import main

QUICK = ["--time-box", "0.02", "--warmup", "0.01", "--min-iters", "3", "--threads", "1"]


def bench(*args, cwd=None):
    p = subprocess.run([sys.executable, "-m", "mpsgraph.bench", *args], capture_output=True, text=True, timeout=900,
                       cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "report.json"
    p = bench("--only", "run_overhead", "--peers", "mpsgraph", "numpy", "--busy-loop", "1", "--json", str(path), *QUICK)
    with open(path) as f:
        return json.load(f), p, path


def test_report_fields(report):
    r, _, _ = report
    env = r["environment"]
    for key in ("mpsgraph", "python", "cpu", "cpu_count", "cpus_available", "cpu_isa", "transparent_hugepage",
                "mpsgraph_blas", "numpy_blas", "versions"):
        assert key in env, key
    assert env["cpu"] and env["versions"]["numpy"]
    assert env["mpsgraph_blas"]["name"]
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):
        assert "[" in env["transparent_hugepage"]  # e.g. "always [madvise] never"
    assert r["settings"] == {**r["settings"], "device": "cpu", "threads": 1, "busy_loop": 1}
    assert r["command"].startswith("python -m mpsgraph.bench")
    assert r["workloads"]["run_overhead"]


def test_each_peer_measured_in_its_own_process(report):
    r, _, _ = report
    res = {x["peer"]: x for x in r["results"]}
    assert set(res) == {"mpsgraph", "mpsgraph Graph.run", "numpy"}
    for x in res.values():
        assert x["ok"], x
        assert x["n"] >= 3 and 0 < x["min_s"] <= x["median_s"] <= x["max_s"]
        assert x["first_s"] > 0 and x["setup_s"] >= 0
    assert res["mpsgraph"]["threads"] == 1  # --threads reached mg.set_num_threads
    pids = {x["pid"] for x in res.values()}
    assert len(pids) == 3 and os.getpid() not in pids
    (s,) = r["summary"]
    assert s["best_peer"] == "numpy"  # mpsgraph's own variants are not peers
    assert s["ratio"] == pytest.approx(res["numpy"]["median_s"] / res["mpsgraph"]["median_s"])


def test_progress_and_tables(report, capsys):
    r, p, path = report
    assert "3/3" in p.stderr  # the progress bar
    assert "run_overhead" in p.stdout and "numpy" in p.stdout
    assert main(["--from-json", str(path), "--markdown"]) == 0
    md = capsys.readouterr().out
    lines = md.splitlines()
    assert any(ln.startswith("Made with `" + r["command"] + "`") for ln in lines)
    header = next(ln for ln in lines if ln.startswith("| workload"))
    assert header.split("|")[2:5] == [" mpsgraph ", " mpsgraph Graph.run ", " numpy "]
    row = next(ln for ln in lines if ln.startswith("| run_overhead"))
    assert row.count("|") == header.count("|")


def test_extra_workload_file_and_failing_peer(tmp_path):
    """A workload in the older form from a file (as benchmarks/bench.py holds them): each
    framework's entry runs in its process; a failing one is reported, the run goes on."""
    (tmp_path / "extra.py").write_text(
        "import numpy as np\n"
        "def w_tiny(device):\n"
        "    x = np.ones(4, np.float32)\n"
        "    def broken():\n"
        "        raise ValueError('broken peer')\n"
        "    return {'mpsgraph': lambda: x + 1, 'numpy': broken}, 'x + 1 on 4 floats'\n"
        "def w_mine(device):\n"
        "    return {'mpsgraph': lambda: None}, 'mpsgraph only'\n"
        "WORKLOADS = {'tiny_extra': w_tiny, 'tiny_mine': w_mine}\n")
    out = tmp_path / "r.json"
    bench("--modules", str(tmp_path / "extra.py"), "--only", "tiny_extra", "tiny_mine", "--peers", "mpsgraph", "numpy",
          "--json", str(out), *QUICK)
    r = json.loads(out.read_text())
    res = {(x["workload"], x["peer"]): x for x in r["results"]}
    assert res["tiny_extra", "mpsgraph"]["ok"] and res["tiny_extra", "mpsgraph"]["description"] == "x + 1 on 4 floats"
    assert not res["tiny_extra", "numpy"]["ok"] and "broken peer" in res["tiny_extra", "numpy"]["error"]
    assert res["tiny_mine", "numpy"]["skipped"]  # no entry: skipped, not failed
    assert [s["ratio"] for s in r["summary"]] == [None, None]


def test_list_names_the_table_workloads(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for w in ("gemm1024", "gemm4096", "chain100", "mlp_step", "chain16m", "small_cnn_b32", "resnet18_b1",
              "resnet18_b8", "mobilenetv2_b1", "mobilenetv2_b8"):
        assert w in out
    assert "installed peers: mpsgraph, numpy" in out
