#!/usr/bin/env python3
# Python shares a 1 GB float64 array and a
# 3-column table; R's shared_by_key() views are identical() to the same data read from files.
# Run with the module installed (pip install ./python numpy pyarrow) and R with pageshare:
#   python3 inst/benchmarks/check-python-identical.py
import numpy as np, pyarrow as pa, pageshare, subprocess, os
n = 125_000_000  # 1.0 GB of doubles
A = np.random.default_rng(7).random(n)
A.tofile("/tmp/py1g-A.bin")
pageshare.share(A, key="py1g-A")
m = 1_000_000
tab = pa.table({"d": np.random.default_rng(8).random(m), "i": np.arange(m, dtype=np.int32), "b": np.arange(m) % 3 == 0})
tab.column("d").to_numpy().tofile("/tmp/py1g-d.bin")
pageshare.share(tab, key="py1g-T")
code = r'''
library(pageshare)
x <- shared_by_key("py1g-A")
cat("A: is_shared", is_shared(x), "typeof", typeof(x), "length", length(x),
    "identical", identical(x, readBin("/tmp/py1g-A.bin", "double", 125e6)), "\n")
t <- shared_by_key("py1g-T")
cat("T: class", class(t), "types", sapply(t, typeof), "views", sapply(t, is_shared),
    "identical d", identical(t$d, readBin("/tmp/py1g-d.bin", "double", 1e6)),
    "i", identical(t$i, 0:(1e6 - 1L)), "b", identical(t$b, (0:(1e6 - 1)) %% 3 == 0), "\n")
'''
print(subprocess.run(["Rscript", "-e", code], capture_output=True, text=True).stdout)
pageshare.release_key("py1g-A"); pageshare.release_key("py1g-T")
os.remove("/tmp/py1g-A.bin"); os.remove("/tmp/py1g-d.bin")
