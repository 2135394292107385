"""pageshare from Python: round trips with R, zero copy, errors, kill -9, other users."""

import gc
import os
import shutil
import signal
import subprocess
import textwrap
import time

import numpy as np
import pytest

import pageshare
from pageshare import _core

from conftest import PYTHON, RHolder, memfd_holders, memfd_mappers, memfds, needs_r, rscript, status_kb

MB = 1 << 20


# ---------------------------------------------------------------- Python alone


def test_share_and_read_back_in_python(key):
    a = np.arange(10, dtype=np.float64) / 3
    v = pageshare.share(a, key=key)
    assert not v.flags.writeable
    np.testing.assert_array_equal(v, a)
    again = pageshare.shared_by_key(key)
    # the same pages: one mapping per segment in a process
    assert np.shares_memory(v, again)
    with pytest.raises(ValueError):
        again[0] = 1.0


def test_matrices_are_fortran_ordered_with_their_dim(key):
    m = np.arange(12, dtype=np.int32).reshape(3, 4)  # C order in, R's column-major order in the segment
    v = pageshare.share(m, key=key)
    assert v.shape == (3, 4) and v.flags.f_contiguous
    np.testing.assert_array_equal(v, m)


def test_bool_is_r_logical_and_int64_is_refused(key):
    v = pageshare.share(np.array([True, False, True]), key=key)
    assert v.dtype == np.int32
    np.testing.assert_array_equal(v, [1, 0, 1])
    with pytest.raises(pageshare.UnsupportedType, match="int64.*astype"):
        pageshare.share(np.arange(3), key=key + "-int64")
    with pytest.raises(pageshare.UnsupportedType):
        pageshare.share(np.zeros(3, dtype=np.float32), key=key + "-f32")


def test_classed_errors_name_the_key(key):
    with pytest.raises(pageshare.NotRegistered, match=key) as e:
        pageshare.shared_by_key(key)
    assert isinstance(e.value, pageshare.Error)
    pageshare.share(np.ones(3), key=key)
    with pytest.raises(pageshare.KeyConflict, match=f"'{key}'.*release_key"):
        pageshare.share(np.zeros(3), key=key)
    # the same contents again: no error, the same pages
    assert np.shares_memory(pageshare.share(np.ones(3), key=key), pageshare.shared_by_key(key))
    with pytest.raises(pageshare.BadArgument):
        pageshare.shared_by_key("")
    with pytest.raises(pageshare.BadArgument, match="content"):
        pageshare.shared_by_key("content:not-a-hash")
    assert issubclass(pageshare.KeyBusy, pageshare.Error)


def test_release_key(key):
    v = pageshare.share(np.ones(1000), key=key)
    assert pageshare.release_key(key) is True
    assert pageshare.release_key(key) is False
    with pytest.raises(pageshare.NotRegistered):
        pageshare.shared_by_key(key)
    assert v.sum() == 1000  # an array made before keeps its pages


def test_tables_in_python(key):
    pa = pytest.importorskip("pyarrow")
    t = pa.table({"x": np.arange(5.0), "n": np.arange(5, dtype=np.int32), "b": np.array([1, 0, 1, 1, 0], bool)})
    got = pageshare.share(t, key=key)
    assert list(got) == ["x", "n", "b"]
    np.testing.assert_array_equal(got["x"], np.arange(5.0))
    np.testing.assert_array_equal(got["b"], [1, 0, 1, 1, 0])
    back = pageshare.shared_by_key(key, arrow=True)
    assert back.column_names == ["x", "n", "b"]
    assert back.column("n").to_pylist() == [0, 1, 2, 3, 4]
    # the columns are held too, and let go of with the key
    assert sum(name.startswith("pageshare.k.content") for name in _core.held()) >= 3
    pageshare.release_key(key)
    assert not any(name.startswith("pageshare.k.") for name in _core.held())


def test_attribute_blobs_decode_and_reject_junk():
    blob = _core.encode_attributes([("dim", "integer", [2, 3]), ("names", "character", ["a", None])])
    assert dict(_core.decode_attributes(blob)) == {"dim": [2, 3], "names": ["a", None]}
    rng = np.random.default_rng(1)
    for _ in range(200):
        junk = bytes(rng.integers(0, 256, rng.integers(0, 64)).astype(np.uint8))
        with pytest.raises(pageshare.InvalidSegment):
            _core.decode_attributes(b"B\n" + junk)


# ---------------------------------------------------------------- R -> Python


@needs_r
def test_r_vectors_matrices_and_data_frames_reach_python(key):
    code = f"""
    x <- share(c(1.5, NA, -Inf, 4), key = "{key}-d")
    i <- share(c(1L, NA, 3L), key = "{key}-i")
    l <- share(c(TRUE, NA, FALSE), key = "{key}-l")
    m <- share(matrix(as.double(1:6), 2, 3), key = "{key}-m")
    df <- share(data.frame(a = c(0.5, 1.5, 2.5), b = 1:3, f = factor(c("u", NA, "v")),
                           s = c("x", "é", NA), t = c(TRUE, FALSE, NA)), key = "{key}")
    """
    with RHolder(code):
        d = pageshare.shared_by_key(f"{key}-d")
        assert d.dtype == np.float64 and d[0] == 1.5 and np.isnan(d[1]) and d[2] == -np.inf
        np.testing.assert_array_equal(pageshare.shared_by_key(f"{key}-i"), [1, pageshare.NA_INTEGER, 3])
        np.testing.assert_array_equal(pageshare.shared_by_key(f"{key}-l"), [1, pageshare.NA_INTEGER, 0])
        m = pageshare.shared_by_key(f"{key}-m")
        assert m.shape == (2, 3) and m.flags.f_contiguous
        np.testing.assert_array_equal(m, np.arange(1.0, 7.0).reshape(2, 3, order="F"))
        df = pageshare.shared_by_key(key)
        assert list(df) == ["a", "b", "f", "s", "t"]
        np.testing.assert_array_equal(df["a"], [0.5, 1.5, 2.5])
        np.testing.assert_array_equal(df["b"], [1, 2, 3])
        assert list(df["f"]) == ["u", None, "v"]
        assert list(df["s"]) == ["x", "é", None]
        np.testing.assert_array_equal(df["t"], [1, 0, pageshare.NA_INTEGER])
        pa = pytest.importorskip("pyarrow")
        t = pageshare.shared_by_key(key, arrow=True)
        assert isinstance(t, pa.Table) and t.num_rows == 3
        for k in ("-d", "-i", "-l", "-m"):
            pageshare.release_key(key + k)


@needs_r
def test_r_matrix_is_read_without_a_copy(key):
    n = 2000  # 2000 x 2000 doubles: 32 MB
    with RHolder(f'X <- share(matrix(as.double(seq_len({n}^2)), {n}), key = "{key}")'):
        anon0 = status_kb("RssAnon")
        rss0 = status_kb("VmRSS")
        X = pageshare.shared_by_key(key)
        grew = status_kb("VmRSS") - rss0
        assert grew * 1024 < 0.05 * X.nbytes, f"RSS grew by {grew} kB before the data were read"
        seg = _core.retrieve(key, pageshare._dir())
        assert X.__array_interface__["data"][0] == seg.address  # the array is the mapping
        assert X[0, 0] == 1 and X[-1, -1] == n * n
        total = X.sum()
        assert total == n * n * (n * n + 1) / 2
        anon = status_kb("RssAnon") - anon0
        # reading all of it maps shared pages: no private copy
        assert anon * 1024 < 0.05 * X.nbytes, f"anonymous memory grew by {anon} kB while reading"


@needs_r
def test_r_data_frame_of_numeric_columns_is_read_without_a_copy(key):
    n = 500_000  # 6 double and 3 integer columns: 30 MB
    code = f"""
    n <- {n}
    cols <- c(lapply(1:6, function(j) as.double(seq_len(n)) * j), lapply(1:3, function(j) seq_len(n) + j))
    names(cols) <- c(paste0("d", 1:6), paste0("i", 1:3))
    df <- share(structure(cols, class = "data.frame", row.names = c(NA, -n)), key = "{key}")
    """
    with RHolder(code):
        anon0 = status_kb("RssAnon")
        d = pageshare.shared_by_key(key)
        assert list(d) == [f"d{j}" for j in range(1, 7)] + [f"i{j}" for j in range(1, 4)]
        nbytes = sum(a.nbytes for a in d.values())
        assert nbytes == n * (6 * 8 + 3 * 4)
        for j in range(1, 7):
            assert d[f"d{j}"].dtype == np.float64 and not d[f"d{j}"].flags.writeable
            assert d[f"d{j}"].sum() == j * n * (n + 1) / 2
        for j in range(1, 4):
            assert d[f"i{j}"].dtype == np.int32
            assert d[f"i{j}"].sum(dtype=np.int64) == n * (n + 1) // 2 + j * n
        anon = status_kb("RssAnon") - anon0
        assert anon * 1024 < 0.05 * nbytes, f"anonymous memory grew by {anon} kB while reading the columns"
        pa = pytest.importorskip("pyarrow")
        t = pageshare.shared_by_key(key, arrow=True)
        for name, a in d.items():
            # the Table's columns are the same pages
            assert t.column(name).chunk(0).buffers()[1].address == a.__array_interface__["data"][0]


# ---------------------------------------------------------------- Python -> R


@needs_r
def test_python_arrays_and_tables_reach_r_identical(key):
    pa = pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    n = 100_000
    pageshare.share(np.arange(1, n + 1) / 7, key=f"{key}-d")
    pageshare.share(np.arange(n, dtype=np.int32), key=f"{key}-i")
    pageshare.share(np.arange(n) % 3 == 0, key=f"{key}-l")
    pageshare.share(np.arange(6.0).reshape(2, 3), key=f"{key}-m")
    pageshare.share(
        pa.table({"x": np.arange(5.0), "n": pa.array([1, None, 3, 4, 5], pa.int32()), "b": [True, False, None, True, True]}),
        key=f"{key}-t",
    )
    pageshare.share(pd.DataFrame({"u": np.arange(3.0), "s": ["a", "b", None]}), key=f"{key}-p")
    out = rscript(
        textwrap.dedent(
            f"""
            n <- {n}
            d <- shared_by_key("{key}-d"); i <- shared_by_key("{key}-i"); l <- shared_by_key("{key}-l")
            m <- shared_by_key("{key}-m"); t <- shared_by_key("{key}-t"); p <- shared_by_key("{key}-p")
            stopifnot(identical(d, seq_len(n) / 7), is_shared(d))
            stopifnot(identical(i, 0:(n - 1L)), is_shared(i))
            stopifnot(identical(l, (0:(n - 1)) %% 3 == 0))
            stopifnot(identical(m, matrix(c(0, 3, 1, 4, 2, 5), 2, 3)))
            stopifnot(identical(t, data.frame(x = as.double(0:4), n = c(1L, NA, 3L, 4L, 5L),
                                              b = c(TRUE, FALSE, NA, TRUE, TRUE))))
            stopifnot(is_shared(t$x), is_shared(t$n), is_shared(t$b))
            stopifnot(identical(p, data.frame(u = c(0, 1, 2), s = c("a", "b", NA))))
            cat("OK\\n")
            """
        )
    )
    assert "OK" in out
    for k in ("-d", "-i", "-l", "-m", "-t", "-p"):
        pageshare.release_key(key + k)


# ---------------------------------------------------------------- nothing left behind


@needs_r
def test_kill_9_of_a_python_holder_leaves_nothing(key):
    child = subprocess.Popen(
        [
            PYTHON,
            "-c",
            textwrap.dedent(
                f"""
                import numpy as np, pageshare, sys, time
                from pageshare import _core
                pageshare.share(np.ones(1 << 20), key="{key}")
                print("READY", flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "READY"
        (ident,) = memfds(child.pid)  # the one segment it holds
        assert memfd_holders(ident) == [child.pid]
        # R reads it while Python holds it
        assert "8388608" in rscript(f'cat(sum(shared_by_key("{key}")) * 8)')
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.time() + 10
    while memfd_holders(ident) and time.time() < deadline:
        time.sleep(0.1)
    assert memfd_holders(ident) == []
    # no live entry, and the next process that looks sweeps the stale one
    assert not [n for n in _core.live_names(pageshare._dir()) if key in n]
    _core.sweep(pageshare._dir())
    index = f"{pageshare._dir()}/pageshare-{os.getuid()}"
    assert not [f for f in os.listdir(index) if key in f]
    with pytest.raises(pageshare.NotRegistered):
        pageshare.shared_by_key(key)


@needs_r
def test_kill_9_of_an_r_holder_while_python_reads(key):
    n = 1 << 20
    r = RHolder(f'X <- share(as.double(seq_len({n})), key = "{key}"); cat(Sys.getpid(), tempdir(), "\\n")')
    rtmp = None
    try:
        rpid, rtmp = r.output.split()[:2]
        rpid = int(rpid)
        (ident,) = memfds(rpid)  # the one segment R holds
        X = pageshare.shared_by_key(key)
        assert X[0] == 1 and X[-1] == n
        assert os.getpid() in memfd_mappers(ident) and rpid in memfd_holders(ident)
    finally:
        r.proc.send_signal(signal.SIGKILL)
        r.proc.wait()
        r.close()
        if rtmp:
            shutil.rmtree(rtmp, ignore_errors=True)  # (R killed leaves its session's temporary directory)
    deadline = time.time() + 10
    while rpid in memfd_holders(ident) + memfd_mappers(ident) and time.time() < deadline:
        time.sleep(0.1)
    # R is gone; this process's own mapping (and descriptor) hold the pages
    assert rpid not in memfd_holders(ident) + memfd_mappers(ident)
    assert set(memfd_holders(ident) + memfd_mappers(ident)) == {os.getpid()}
    assert X.sum() == n * (n + 1) / 2
    # R's entry is stale: swept; this process may still list the key as its own
    _core.sweep(pageshare._dir())
    assert not [name for name in _core.live_names(pageshare._dir()) if key in name and str(rpid) in name]
    del X
    gc.collect()
    pageshare.release_key(key)
    assert memfd_holders(ident) == [] and memfd_mappers(ident) == []
    assert not [name for name in _core.live_names(pageshare._dir()) if key in name]
    _core.sweep(pageshare._dir())
    index = f"{pageshare._dir()}/pageshare-{os.getuid()}"
    assert not [f for f in os.listdir(index) if key in f]
    with pytest.raises(pageshare.NotRegistered):
        pageshare.shared_by_key(key)


OTHER_USER = 65534  # nobody


@needs_r
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user (setpriv)")
def test_another_user_cannot_read_keys(key):
    pageshare.share(np.ones(1000), key=f"{key}-py")
    fd_py = list(memfds(os.getpid()).values())
    with RHolder(f'x <- share(rep(2, 1000), key = "{key}-r"); cat(Sys.getpid(), "\\n")') as r:
        rpid = int(r.output.split()[0])
        fd_r = list(memfds(rpid).values())
        probe = textwrap.dedent(
            f"""
            import os, pageshare
            for k in ("{key}-py", "{key}-r"):
                try:
                    pageshare.shared_by_key(k)
                    print("READ", k)
                except pageshare.Error as e:
                    print("REFUSED", type(e).__name__)
            for path in ["{pageshare._dir()}/pageshare-{os.getuid()}",
                         *["/proc/{os.getpid()}/fd/%d" % fd for fd in {fd_py}],
                         *["/proc/{rpid}/fd/%d" % fd for fd in {fd_r}]]:
                try:
                    os.listdir(path) if path.endswith("{os.getuid()}") else open(path, "rb").read(1)
                    print("OPENED", path)
                except OSError as e:
                    print("DENIED", e.errno)
            """
        )
        env = dict(os.environ, HOME="/tmp")
        p = subprocess.run(
            ["setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups", PYTHON, "-c", probe],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    if p.returncode != 0 and "ModuleNotFoundError" in p.stderr or "Permission denied" in p.stderr and not p.stdout:
        pytest.skip(f"user {OTHER_USER} cannot run this Python: {p.stderr.strip()[-200:]}")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    assert "READ" not in p.stdout and "OPENED" not in p.stdout, p.stdout
    assert sum(line.startswith("REFUSED NotRegistered") for line in lines) == 2, p.stdout
    assert sum(line.startswith("DENIED") for line in lines) == 1 + len(fd_py) + len(fd_r), p.stdout
