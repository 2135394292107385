#!/usr/bin/env python3
"""A 1 GB double matrix between R and Python: pageshare keys against reticulate and a file.

    python3 inst/benchmarks/bench-python.py [GB]

Needs the Python module (pip install ./python) and R with pageshare (R_LIBS);
the reticulate rows need R's reticulate and a Python whose NumPy it can load
(RETICULATE_PYTHON, else this Python; reticulate 1.28, Debian 12's, needs
NumPy < 2, so there a venv of its own: python3 -m venv V && V/bin/pip install
'numpy<2'). For each way of moving the data it prints the wall time and the
extra memory of the processes involved together: the peak of a memory cgroup
of their own (v1 or v2, made under this process's cgroup when that is
writable, as root usually), else the sum of their PSS (shared pages counted
once). Rows:

  R -> Python, pageshare   R: share(X, key =); Python: shared_by_key() then X.sum()
  R -> Python, reticulate  R: r_to_py(X) (NumPy array), then its sum() in the
                           Python that reticulate embeds in the R process
  R -> Python, file        R: writeBin(X) (the bytes of a .npy without its header);
                           Python: numpy.fromfile() then X.sum()
  data frame R -> Python   R: share(df, key =), df of numeric columns as large as X;
                           Python: shared_by_key() (dict of arrays, or arrow=True
                           for a pyarrow Table) then the sum of every column
  Python -> R, pageshare   Python: share(A, key=); R: shared_by_key() then sum()
  Python -> R, reticulate  R's embedded Python makes A; R: py_to_r(A) then sum()
  Python -> R, file        Python: A.tofile(); R: readBin() then sum()

R's arrow package (Feather) is not in Debian (no r-cran-arrow): the file rows
stand for it (each writes and reads the whole matrix once).
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


def r_process(code, env=None):
    """An R process (in this cgroup) that runs `code`, prints READY, then runs
    each line it is sent (r_eval) until an empty one (end)."""
    script = (
        "suppressPackageStartupMessages(library(pageshare))\n" + code + "\n"
        "cat('READY\\n'); flush(stdout()); con <- file('stdin'); open(con)\n"
        "repeat { l <- readLines(con, n = 1); if (!length(l) || !nzchar(l)) break\n"
        "  eval(parse(text = l), globalenv()); cat('READY\\n'); flush(stdout()) }\n"
    )
    p = subprocess.Popen(
        ["Rscript", "-e", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(os.environ, **env),
    )
    return p, _until_ready(p)


def _until_ready(p):
    out = []
    for line in p.stdout:
        if line.strip() == "READY":
            return "".join(out)
        out.append(line)
    raise RuntimeError("R ended early:\n" + "".join(out))


def r_eval(p, code):
    """Run one line of R code in R process `p`; what it printed."""
    p.stdin.write(code.replace("\n", " ") + "\n")
    p.stdin.flush()
    return _until_ready(p)


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
        # R -> Python through reticulate: r_to_py() in the Python embedded in R
        ret_env = {"RETICULATE_PYTHON": os.environ.get("RETICULATE_PYTHON", sys.executable)}
        try:
            r, _ = r_process(
                'suppressPackageStartupMessages(library(reticulate)); np <- import("numpy", convert = FALSE); '
                f"X <- matrix(runif({NROW} * {NCOL}), {NROW}); invisible(gc())",
                env=ret_env,
            )
        except RuntimeError as e:
            print(f"reticulate rows skipped (R's reticulate, or a NumPy it can load, missing): {e}", flush=True)
            r = None
        if r is not None:

            def r_reticulate_py():
                out = r_eval(
                    r,
                    't <- system.time({p <- r_to_py(X); s <- py_to_r(p$sum())})[["elapsed"]]; '
                    'cat(t, py_to_r(p$flags$owndata), "\\n")',
                )
                t, owndata = out.split()[:2]
                print(f"reticulate r_to_py(X): a NumPy array with OWNDATA={owndata}", flush=True)
                return float(t), [os.getpid(), r.pid]

            measure("R -> Python, reticulate (r_to_py + sum in R's embedded Python)", cg, [os.getpid(), r.pid], r_reticulate_py)
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
        # a data frame of numeric columns, R -> Python through pageshare: 4 double
        # columns for each integer one, as many bytes as the matrix
        nd, ni = 80, 40
        nrow_df = int(size * 1e9 / (nd * 8 + ni * 4))
        r, _ = r_process(
            f"n <- {nrow_df}; cols <- c(lapply(seq_len({nd}), function(j) runif(n)), "
            f"lapply(seq_len({ni}), function(j) sample.int(1000L, n, TRUE))); "
            f"names(cols) <- c(paste0('d', seq_len({nd})), paste0('i', seq_len({ni}))); "
            f'df <- share(structure(cols, class = "data.frame", row.names = c(NA, -n)), key = "{key}"); '
            "rm(cols); invisible(gc())"
        )
        df_gb = nrow_df * (nd * 8 + ni * 4) / 1e9

        def df_dict():
            t = time.perf_counter()
            d = pageshare.shared_by_key(key)
            sum(float(a.sum()) for a in d.values())
            assert len(d) == nd + ni
            return time.perf_counter() - t, [os.getpid(), r.pid]

        measure(f"data frame R -> Python, pageshare, dict of arrays ({nd} double + {ni} integer columns, {df_gb:.2f} GB)",
                cg, [os.getpid(), r.pid], df_dict)
        pageshare.release_key(key)
        try:
            import pyarrow.compute as pc
        except ImportError:
            pc = None
            print("arrow row skipped: no pyarrow", flush=True)
        if pc is not None:

            def df_arrow():
                t = time.perf_counter()
                tab = pageshare.shared_by_key(key, arrow=True)
                sum(pc.sum(c).as_py() for c in tab.columns)
                assert tab.num_columns == nd + ni
                return time.perf_counter() - t, [os.getpid(), r.pid]

            measure("data frame R -> Python, pageshare, pyarrow Table (the same)", cg, [os.getpid(), r.pid], df_arrow)
            pageshare.release_key(key)
        end(r)
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

        # Python -> R through reticulate: py_to_r() of an array made in R's embedded Python
        try:
            r, _ = r_process(
                "suppressPackageStartupMessages(library(reticulate)); main <- import_main(convert = FALSE); "
                f'py_run_string("import numpy as np; A = np.asfortranarray(np.random.default_rng(1).random(({NROW}, {NCOL})))")',
                env=ret_env,
            )
        except RuntimeError as e:
            print(f"reticulate Python -> R skipped: {e}", flush=True)
            r = None
        if r is not None:

            def py_reticulate_r():
                out = r_eval(r, 't <- system.time({x <- py_to_r(main$A); s <- sum(x)})[["elapsed"]]; cat(t, "\\n")')
                return float(out.split()[0]), [os.getpid(), r.pid]

            measure("Python -> R, reticulate (py_to_r in R's embedded Python, read all)", cg, [os.getpid(), r.pid], py_reticulate_r)
            end(r)

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
