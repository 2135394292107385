"""Helpers: R processes that share or read keys (Rscript, with the library in
R_LIBS that holds this checkout's pageshare), and what the kernel says of
memory and descriptors."""

import os
import shutil
import subprocess
import sys
import uuid

import pytest

RSCRIPT = shutil.which("Rscript")


def r_has_pageshare() -> bool:
    if RSCRIPT is None:
        return False
    r = subprocess.run([RSCRIPT, "-e", "library(pageshare)"], capture_output=True, text=True)
    return r.returncode == 0


HAS_R = r_has_pageshare()
needs_r = pytest.mark.skipif(not HAS_R, reason="Rscript with pageshare installed (R_LIBS) not found")


@pytest.fixture
def key():
    """A key of this test alone, released at the end."""
    import pageshare

    k = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield k
    pageshare.release_key(k)


def rscript(code: str, timeout: float = 120) -> str:
    """Run R code (pageshare attached); its standard output. Fails the test on an R error."""
    r = subprocess.run(
        [RSCRIPT, "-e", "suppressPackageStartupMessages(library(pageshare))", "-e", code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, f"R failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


class RHolder:
    """An R process that runs `code` (which shares under keys), prints READY,
    then holds until told to end (a line on its standard input)."""

    def __init__(self, code: str):
        script = (
            "suppressPackageStartupMessages(library(pageshare))\n"
            + code
            + "\ncat('READY\\n'); flush(stdout())\ninvisible(readLines(file('stdin'), n = 1))\n"
        )
        self.proc = subprocess.Popen(
            [RSCRIPT, "-e", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"R ended before READY:\n{''.join(lines)}\n{self.proc.stderr.read()}")
            if line.strip() == "READY":
                break
            lines.append(line)
        self.output = "".join(lines)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def status_kb(field: str, pid="self") -> int:
    """A field of /proc/<pid>/status in kB (VmRSS, RssAnon, RssShmem ...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def memfds(pid) -> dict:
    """{(device, inode): fd} of the pageshare memfds process `pid` holds."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if os.readlink(path).startswith("/memfd:pageshare"):
                st = os.stat(path)
                out[(st.st_dev, st.st_ino)] = int(fd)
        except OSError:
            continue
    return out


def memfd_holders(ident):
    """The pids of every process whose descriptors hold the memfd `ident` ((device, inode))."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if ident in memfds(pid):
                out.append(int(pid))
        except OSError:
            continue
    return out


PYTHON = sys.executable


def memfd_mappers(ident):
    """The pids of every process that maps the pageshare memfd `ident` ((device, inode)):
    a mapping holds the memfd's pages as a descriptor does, without one."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith("/memfd:pageshare") and int(fields[4]) == ident[1]:
                        out.append(int(pid))
                        break
        except (OSError, ValueError):
            continue
    return out
