#!/usr/bin/env bash
# The Python module's tests (python/tests, pytest): builds and installs the
# module with `pip install ./python` into a fresh venv under /tmp (Rust from
# ~/.cargo/bin, numpy/pyarrow/pandas/pytest wheels from PyPI), then runs
# pytest, whose round trips call Rscript with the pageshare that
# tools/test.sh installed. Without python3 or its venv module this says
# "skipped: no python3-venv" and succeeds. Run from tools/test.sh; alone:
#   bash tools/test-python.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
repo=$(pwd)

py=$(command -v python3 || true)
venv=$(mktemp -d /tmp/pageshare-pyvenv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
chmod 755 "$venv"   # (the test run as another user, nobody, runs this venv's Python)
if [ -z "$py" ] || ! "$py" -m venv "$venv" >/dev/null 2>&1; then
  echo "Python: skipped: no python3-venv (apt-get install python3 python3-venv python3-pip)"
  exit 0
fi
echo "   $("$venv/bin/python" --version), venv in $venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# numpy, pyarrow and pandas as wheels only: a Python too new for their wheels
# says so at once instead of compiling them for many minutes (or failing to).
if ! "${pip[@]}" install --only-binary numpy ./python pytest numpy; then
  echo "Python: pip install ./python failed (above)"
  exit 1
fi
# (optional: the tests of tables skip themselves without them)
"${pip[@]}" install --only-binary pyarrow,pandas pyarrow pandas ||
  echo "   (no pyarrow or pandas wheel for this Python: their tests are skipped)"
"$venv/bin/python" - <<'PY'
import importlib
found = []
for name in ("numpy", "pyarrow", "pandas"):
    try:
        found.append(f"{name} {importlib.import_module(name).__version__}")
    except ImportError:
        found.append(f"no {name}")
print("   " + ", ".join(found))
PY
# From the venv's folder: the checkout's python/pageshare (no compiled module)
# must not shadow the installed package.
cd "$venv" && "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$repo/python/tests"
