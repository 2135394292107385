#!/usr/bin/env python3
"""A 1 GB double matrix between R and Python: pageshare keys against a file.

    python3 inst/benchmarks/bench-python.py [GB]

Needs the Python module (pip install ./python) and R with pageshare (R_LIBS).
For each way of moving the matrix it prints the wall time and the extra memory
of the two processes together: the peak of a memory cgroup of their own (v1 or
v2, made under this process's cgroup when that is writable, as root usually),
else the sum of their PSS (shared pages counted once). Rows:

  R -> Python, pageshare   R: share(X, key =); Python: shared_by_key() then X.sum()
  R -> Python, file        R: writeBin(X) (the bytes of a .npy without its header);
                           Python: numpy.fromfile() then X.sum()
  Python -> R, pageshare   Python: share(A, key=); R: shared_by_key() then sum()
  Python -> R, file        Python: A.tofile(); R: readBin() then sum()

reticulate (r_to_py() copies) and R's arrow (Feather) are not installed here;
the file rows stand for both (each writes and reads the whole matrix once).
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import pageshare

GB = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
NCOL = 10_000
NROW = int(GB * 1e9 / 8 / NCOL)


def pss_kb(pid) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


class Cgroup:
    """A memory cgroup of this benchmark's own, if one can be made."""

    def __init__(self):
        self.path = None
        for line in open("/proc/self/cgroup"):
            hier, controllers, rel = line.strip().split(":", 2)
            if "memory" in controllers.split(","):
                base = f"/sys/fs/cgroup/memory{rel}"
                self.v1 = True
            elif hier == "0" and os.path.exists(f"/sys/fs/cgroup{rel}/memory.peak"):
                base = f"/sys/fs/cgroup{rel}"
                self.v1 = False
            else:
                continue
            path = os.path.join(base, f"pageshare-bench-{os.getpid()}")
            try:
                os.mkdir(path)
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                self.path = path
                break
            except OSError:
                continue

    def usage(self) -> int:
        name = "memory.usage_in_bytes" if self.v1 else "memory.current"
        return int(open(os.path.join(self.path, name)).read())

    def reset_peak(self):
        if self.v1:
            open(os.path.join(self.path, "memory.max_usage_in_bytes"), "w").write("0")
        else:
            open(os.path.join(self.path, "memory.peak"), "w").write("0")  # (kernel >= 6.12)

    def peak(self) -> int:
        return int(open(os.path.join(self.path, "memory.max_usage_in_bytes" if self.v1 else "memory.peak")).read())

    def close(self):
        if self.path:
            parent = os.path.dirname(self.path)
            with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            os.rmdir(self.path)


def r_process(code):
    """An R process (in this cgroup) that runs `code`, prints READY, then waits for a line."""
    script = (
        "suppressPackageStartupMessages(library(pageshare))\n" + code + "\n"
        "cat('READY\\n'); flush(stdout()); invisible(readLines(file('stdin'), n = 1))\n"
    )
    p = subprocess.Popen(["Rscript", "-e", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = []
    for line in p.stdout:
        if line.strip() == "READY":
            return p, "".join(out)
        out.append(line)
    raise RuntimeError("R ended early:\n" + "".join(out))


def end(p):
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait()


rows = []


def measure(label, cg, before_pids, run):
    """Run `run()` (returns (seconds, pids)); extra memory beyond the state before it."""
    if cg.path:
        base = cg.usage()
        cg.reset_peak()
    else:
        base = sum(pss_kb(p) for p in before_pids) * 1024
    seconds, pids = run()
    extra = (cg.peak() if cg.path else sum(pss_kb(p) for p in pids) * 1024) - base
    rows.append((label, seconds, extra / 1e9))


def main():
    cg = Cgroup()
    how = "cgroup peak" if cg.path else "PSS sum"
    size = NROW * NCOL * 8 / 1e9
    print(f"matrix {NROW} x {NCOL} doubles ({size:.2f} GB); extra memory: {how}", flush=True)
    tmp = tempfile.mkdtemp(prefix="pageshare-bench-")
    key = f"bench-python-{os.getpid()}"
    try:
        # R -> Python through pageshare
        r, _ = r_process(f'X <- share(matrix(runif({NROW} * {NCOL}), {NROW}), key = "{key}"); invisible(gc())')

        def r_to_py():
            t = time.perf_counter()
            X = pageshare.shared_by_key(key)
            X.sum()
            return time.perf_counter() - t, [os.getpid(), r.pid]

        measure("R -> Python, pageshare (map + read all)", cg, [os.getpid(), r.pid], r_to_py)
        pageshare.release_key(key)
        end(r)
        # R -> Python through a file
        path = os.path.join(tmp, "x.bin")
        r, out = r_process(
            f'X <- matrix(runif({NROW} * {NCOL}), {NROW}); t <- system.time(writeBin(as.vector(X), "{path}"))[["elapsed"]]; '
            f"cat(t, '\\n')"
        )
        written = float(out.split()[0])

        def r_file_py():
            t = time.perf_counter()
            X = np.fromfile(path, dtype="<f8").reshape((NROW, NCOL), order="F")
            X.sum()
            return written + time.perf_counter() - t, [os.getpid(), r.pid]

        measure("R -> Python, file (writeBin + numpy.fromfile)", cg, [os.getpid(), r.pid], r_file_py)
        end(r)
        os.unlink(path)
        # Python -> R through pageshare
        A = np.asfortranarray(np.random.default_rng(1).random((NROW, NCOL)))

        def py_to_r():
            t = time.perf_counter()
            pageshare.share(A, key=key)
            r, out = r_process(f't <- system.time(s <- sum(shared_by_key("{key}")))[["elapsed"]]; cat(t, "\\n")')
            elapsed = time.perf_counter() - t
            pids = [os.getpid(), r.pid]
            py_to_r.r = r
            return elapsed, pids

        measure("Python -> R, pageshare (share + R start, map, read all)", cg, [os.getpid()], py_to_r)
        end(py_to_r.r)
        pageshare.release_key(key)

        def py_file_r():
            t = time.perf_counter()
            A.tofile(path)
            r, out = r_process(f'x <- readBin("{path}", "double", {NROW * NCOL}); s <- sum(x)')
            py_file_r.r = r
            return time.perf_counter() - t, [os.getpid(), r.pid]

        measure("Python -> R, file (tofile + R start, readBin, read all)", cg, [os.getpid()], py_file_r)
        end(py_file_r.r)
        os.unlink(path)
    finally:
        cg.close()
        os.rmdir(tmp)
    print(f"| way | seconds | extra GB ({how}) |\n|---|---|---|")
    for label, s, gb in rows:
        print(f"| {label} | {s:.2f} | {gb:.2f} |")


if __name__ == "__main__":
    main()
