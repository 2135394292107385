"""pageshare for Python: NumPy arrays and Arrow tables over the pages R shares, and back.

R shares an object under a key (``share(x, key = "expr")`` in R); any process of
the same user on the same machine finds it by that key. In Python::

    import pageshare
    X = pageshare.shared_by_key("expr")      # a read-only NumPy array, no copy
    pageshare.share(numpy.arange(10.0), key="from-python")
    # in R: shared_by_key("from-python") is a view of the same pages

What R types become (``shared_by_key``):

* double -> float64, integer -> int32 (R's ``NA_integer_`` is the int32 value
  -2147483648), logical -> int32 holding R's values (1 TRUE, 0 FALSE,
  -2147483648 NA; ``a == 1`` gives booleans), raw -> uint8: read-only arrays over
  the shared pages (no copy). A double ``NA`` is a NaN.
* a vector with a ``dim`` attribute -> a Fortran-ordered array of that shape
  (still no copy).
* a factor -> an object array of its labels (None for NA), and a character
  vector -> an object array of str (None for NA): both are copies.
* a data frame (shared by key from R or from here) -> a dict of column name ->
  array as above, in column order; ``shared_by_key(key, arrow=True)`` gives a
  ``pyarrow.Table`` instead, whose numeric columns are the same pages (R's NAs
  stay values there: NaN, or -2147483648 in int32 columns).

What Python types become in R (``share``):

* float64 -> double, int32 -> integer, bool -> logical (one copy to R's 32-bit
  logicals, then the segment), str/object columns -> character. int64 (and any
  other dtype) is refused: R has no 64-bit integers; convert with
  ``a.astype(numpy.int32)`` when the values fit, or ``a.astype(numpy.float64)``.
* a 2-D (or N-D) array -> an R matrix (array) with ``dim``: the data are written
  in R's column-major order (one more temporary copy for a C-ordered array).
* a ``pyarrow.Table``, a ``pandas.DataFrame`` or a dict of 1-D arrays of equal
  length -> an R data frame (each column under its content key, as R's
  ``share(x, key = TRUE)`` does, and the frame's names under ``key``). Arrow
  nulls become R's NA (a copy of that column).

The objects stay valid while Python holds them: an array's base holds the
segment's mapping, as R's views do. This process holds every key it shared or
read (so that other processes find it, and the pages live) until
``release_key(key)`` or its end, however it ends: after ``kill -9`` the kernel
frees what only it held, and its index entries are swept by the next process
that looks. Only processes of the same user can read a key.

Errors are subclasses of ``pageshare.Error``, named as R's condition classes:
``NotRegistered`` (R: ``pageshare_not_registered``), ``KeyConflict``,
``KeyBusy``, ``InvalidSegment``, ``SegmentGone``, ``NoSpace``,
``PermissionDenied`` (R: ``pageshare_permission``), ``BadArgument``,
``UnsupportedType``, ``UnsupportedEnvironment``, ``TooManySegments``.
"""

from __future__ import annotations

import atexit
import os

import numpy as np

from . import _core
from ._core import (  # noqa: F401  (the exception classes, exported)
    BadArgument,
    Error,
    InvalidSegment,
    KeyBusy,
    KeyConflict,
    NoSpace,
    NotRegistered,
    PermissionDenied,
    SegmentGone,
    TooManySegments,
    UnsupportedEnvironment,
    UnsupportedType,
)

__all__ = [
    "share",
    "shared_by_key",
    "release_key",
    "Error",
    "NotRegistered",
    "KeyConflict",
    "KeyBusy",
    "InvalidSegment",
    "SegmentGone",
    "NoSpace",
    "PermissionDenied",
    "BadArgument",
    "UnsupportedType",
    "UnsupportedEnvironment",
    "TooManySegments",
]

#: The attribute that marks a key's segment as a data frame's list of column keys.
COLUMNS_MARK = "pageshare.columns"

#: R's NA_integer_ (and logical NA) as int32.
NA_INTEGER = -(2**31)
#: R's NA_real_ (a NaN with payload 1954).
NA_REAL = np.array([0x7FF00000000007A2], dtype="<u8").view("<f8")[0]

_DTYPES = {"double": np.dtype("<f8"), "integer": np.dtype("<i4"), "logical": np.dtype("<i4"), "raw": np.dtype("u1")}


def _dir() -> str:
    """The index's parent directory (R's option pageshare.dir, env PAGESHARE_DIR)."""
    return os.environ.get("PAGESHARE_DIR", "/dev/shm")


def _wait(wait) -> float:
    if wait is None:
        wait = float(os.environ.get("PAGESHARE_KEY_WAIT", "10"))
    if not wait >= 0:
        raise BadArgument(f"wait must be a number of seconds >= 0, not {wait!r}")
    return float(wait)


def _check_key(key) -> str:
    if not isinstance(key, str) or not key:
        raise BadArgument(f"key must be a non-empty string, not {key!r}")
    return key


def _attributes(seg) -> dict:
    return dict(seg.attributes())


def _array(seg, attrs: dict):
    """The data of one segment as NumPy (see the module's documentation)."""
    kind = seg.kind
    n = seg.length
    classes = attrs.get("class") or []
    if kind == "character":
        out = np.empty(n, dtype=object)
        out[:] = seg.strings()
    elif kind == "integer" and "factor" in classes and attrs.get("levels") is not None:
        levels = np.array(list(attrs["levels"]) + [None], dtype=object)
        codes = np.frombuffer(seg, dtype="<i4", count=n)
        # (R's codes run from 1; NA, or anything out of range, becomes None)
        index = np.where((codes >= 1) & (codes <= len(levels) - 1), codes - 1, len(levels) - 1)
        out = levels[index]
    elif kind in _DTYPES:
        out = np.frombuffer(seg, dtype=_DTYPES[kind], count=n)
    else:
        raise UnsupportedType(f"R {kind} vectors are not read in Python (double, integer, logical, raw, character)")
    dim = attrs.get("dim")
    if dim is not None and len(dim) >= 1 and all(d is not None and d >= 0 for d in dim):
        out = out.reshape(tuple(dim), order="F")
    return out


def shared_by_key(key: str, arrow: bool = False):
    """The object some process of this user shares under ``key``, without a copy.

    A vector or matrix comes back as a read-only NumPy array over the shared
    pages; a data frame as a dict of column name -> array, or with
    ``arrow=True`` as a ``pyarrow.Table`` (see the module's documentation for
    each type). This process then holds the key too, until ``release_key(key)``
    or its end. Raises ``NotRegistered`` when no live process shares it.
    """
    key = _check_key(key)
    seg = _core.retrieve(key, _dir())
    attrs = _attributes(seg)
    if COLUMNS_MARK not in attrs:
        return _array(seg, attrs)
    names = attrs.get("names") or []
    columns = {}
    for i, column_key in enumerate(seg.strings()):
        col = _core.retrieve(column_key, _dir())
        name = names[i] if i < len(names) and names[i] is not None else f"V{i + 1}"
        columns[name] = _array(col, _attributes(col))
    if not arrow:
        return columns
    import pyarrow as pa

    return pa.table({name: pa.array(a) if a.dtype != object else pa.array(list(a)) for name, a in columns.items()})


def release_key(key: str) -> bool:
    """Stop holding what this process shared or read under ``key`` (for a data
    frame, its columns too); False if it held nothing. Arrays already made keep
    their pages until they are collected."""
    return _core.release(_check_key(key))


def _vector_bytes(a: np.ndarray):
    """(kind, length, attribute blob, flat bytes) of an array for a segment."""
    if a.dtype.kind in "OUS":
        raise UnsupportedType("character arrays are shared as data frame columns only")
    if a.dtype == np.bool_:
        flat = np.asarray(a, dtype="<i4", order="F")  # (a copy: R's logicals are 32-bit)
        kind = "logical"
    elif a.dtype == np.float64:
        flat, kind = a, "double"
    elif a.dtype == np.int32:
        flat, kind = a, "integer"
    elif a.dtype == np.int64:
        raise UnsupportedType(
            "int64 arrays are refused: R has no 64-bit integers. Convert with a.astype(numpy.int32) if the values "
            "fit in 32 bits (R's integers), or with a.astype(numpy.float64) (exact up to 2**53)"
        )
    else:
        raise UnsupportedType(
            f"arrays of {a.dtype} are not shared with R: use float64 (R double), int32 (R integer) or bool (R logical)"
        )
    flat = np.asfortranarray(flat.astype(flat.dtype.newbyteorder("<"), copy=False))
    attrs = []
    if a.ndim >= 2:
        attrs.append(("dim", "integer", [int(d) for d in a.shape]))
    elif a.ndim == 0:
        flat = flat.reshape(1)
    raw = flat.reshape(-1, order="F").view(np.uint8)
    return kind, int(flat.size), _core.encode_attributes(attrs) if attrs else b"", raw


def _columns(obj) -> dict:
    """A table's columns as {name: 1-D NumPy array} (nulls as R's NA)."""
    if isinstance(obj, dict):
        return {str(k): _column_array(v) for k, v in obj.items()}
    mod = type(obj).__module__.split(".")[0]
    if mod == "pyarrow":
        return {name: _column_array(obj.column(name)) for name in obj.column_names}
    if mod == "pandas":
        return {str(name): _column_array(obj[name]) for name in obj.columns}
    raise UnsupportedType(
        f"cannot share a {type(obj).__name__}: share NumPy arrays, pyarrow Tables, pandas DataFrames or dicts of arrays"
    )


def _column_array(col) -> np.ndarray:
    mod = type(col).__module__.split(".")[0]
    if mod == "pyarrow":
        import pyarrow as pa
        import pyarrow.compute as pc

        t = col.type
        if col.null_count:
            if pa.types.is_floating(t):
                col = pc.fill_null(col.cast(pa.float64()), NA_REAL)
            elif pa.types.is_boolean(t) or pa.types.is_integer(t):
                if pa.types.is_integer(t) and t.bit_width > 32:
                    raise UnsupportedType(f"an Arrow column of {t} cannot become an R column: cast it to int32")
                kind_dtype = pa.int32()
                col = pc.fill_null(col.cast(kind_dtype), NA_INTEGER)
                if pa.types.is_boolean(t):
                    return np.asarray(col.to_numpy(), dtype="<i4").view(_LogicalColumn)
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                return np.array(col.to_pylist(), dtype=object)
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
            return np.array(col.to_pylist(), dtype=object)
        return np.asarray(col.to_numpy())
    if mod == "pandas":
        return np.asarray(col.to_numpy())
    return np.asarray(col)


class _LogicalColumn(np.ndarray):
    """int32 R logicals (with NA) made from a nullable Arrow boolean column."""


def share(obj, key: str, wait: float | None = None):
    """Share ``obj`` under ``key`` for R (and Python) processes of this user.

    ``obj``: a NumPy array of float64, int32 or bool (any shape; 2-D and more
    become R matrices and arrays), or a table (pyarrow Table, pandas DataFrame,
    dict of 1-D arrays) of such columns and string columns, which becomes an R
    data frame. Returns what ``shared_by_key(key)`` returns: read-only arrays
    over the shared pages. If a holder of ``key`` already shares exactly these
    contents, its segment is used (no copy); other contents under the key raise
    ``KeyConflict``. ``wait``: seconds to wait for another process sharing
    under the same key at the same moment (default PAGESHARE_KEY_WAIT or 10),
    then ``KeyBusy``.
    """
    key = _check_key(key)
    wait = _wait(wait)
    if isinstance(obj, np.ndarray) and obj.dtype.kind not in "OUS":
        kind, n, attrs, raw = _vector_bytes(obj)
        seg = _core.share_vector(key, _dir(), kind, n, attrs, raw, wait)
        return _array(seg, _attributes(seg))
    if isinstance(obj, (list, tuple)) or np.isscalar(obj):
        raise UnsupportedType("share a NumPy array (numpy.asarray(x)) or a table, not a Python list or scalar")
    columns = _columns(obj)
    lengths = {len(a) for a in columns.values()}
    if len(lengths) > 1:
        raise BadArgument(f"the columns of a table must have one length, not {sorted(lengths)}")
    nrow = lengths.pop() if lengths else 0
    column_keys = []
    for name, a in columns.items():
        if a.ndim != 1:
            raise BadArgument(f"column '{name}' is not one-dimensional")
        if a.dtype.kind in "OUS":
            items = [None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in a]
            ck = _core.content_key_strings(items, b"")
            _core.share_strings(ck, _dir(), items, b"", wait)
        else:
            if isinstance(a, _LogicalColumn):
                kind, n, attrs, raw = "logical", len(a), b"", np.ascontiguousarray(a).view(np.uint8)
            else:
                try:
                    kind, n, attrs, raw = _vector_bytes(a)
                except UnsupportedType as e:
                    raise UnsupportedType(f"column '{name}': {e}") from None
            ck = _core.content_key(kind, n, attrs, raw)
            _core.share_vector(ck, _dir(), kind, n, attrs, raw, wait)
        column_keys.append(ck)
    attrs = _core.encode_attributes(
        [
            ("names", "character", list(columns)),
            ("class", "character", ["data.frame"]),
            ("row.names", "integer", [None, -nrow]),
            (COLUMNS_MARK, "logical", [True]),
        ]
    )
    try:
        _core.share_strings(key, _dir(), column_keys, attrs, wait)
    except Error:
        for ck in column_keys:
            _core.release(ck)
        raise
    return shared_by_key(key)


def _at_exit():
    try:
        _core.withdraw_at_exit()
    except Exception:  # (never fail an exit)
        pass


atexit.register(_at_exit)

try:  # index entries of processes that died (kill -9): swept as R's package load does
    _core.sweep(_dir())
except Exception:
    pass
