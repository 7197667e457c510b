"""Files written whole or not at all: the one atomic writer of the package.

Every result file (netCDF, checkpoints, figures, captions, reports, tables) is
written under a temporary name in its own folder and renamed into place, so that
a reader never sees a half-written file and a crash or an interrupt leaves no
partial result. tests/test_io.py checks that no other module of the package calls
`savefig`, `write_text`, `write_bytes` or `to_netcdf` on a target path itself.

A full disk (or quota) is one `DiskFullError` naming the folder and the bytes
needed, checked before writing where the size is known and caught while writing
otherwise; the temporary file is removed either way.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["DiskFullError", "atomic_path", "atomic_savefig", "atomic_write_bytes", "atomic_write_netcdf",
           "atomic_write_text", "figure_bytes", "free_bytes", "size_text"]

_FULL = (errno.ENOSPC, errno.EDQUOT)


def size_text(n: float) -> str:
    """Bytes for a person: "512 bytes", "3.2 MiB", "1.5 GiB" (powers of 1024, as `df -h`
    and the sweep's memory messages)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def free_bytes(folder: "str | Path") -> int:
    """Bytes free for this user on the file system of `folder` (or of its nearest
    existing parent, for a folder not made yet)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


class DiskFullError(OSError):
    """No space left (ENOSPC, or over quota: EDQUOT) for a file in `folder`:
    `need` bytes (None: unknown, more than `written`), `free` bytes free.
    `str()` is one line naming the folder, the file and both sizes."""

    def __init__(self, path: "str | Path", need: "int | None", free: int, written: int = 0):
        path = Path(path)
        self.path, self.folder, self.need, self.free, self.written = path, path.parent, need, free, written
        size = (f"about {size_text(need)}" if need is not None
                else f"more than {size_text(written)}" if written else "more space")
        super().__init__(errno.ENOSPC, f"no space left in {path.parent} for {path.name}: it needs {size}, "
                                       f"{size_text(free)} free")

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):  # rebuilt whole in the parent of a worker process (OSError's would lose the path)
        return DiskFullError, (self.path, self.need, self.free, self.written)


@contextlib.contextmanager
def atomic_path(path: "str | Path", need: "int | None" = None) -> Iterator[str]:
    """A temporary file name beside `path` to write to; when the block ends
    without an exception the file gets the permissions of a normally created
    one (0666 & ~umask; mkstemp makes it 0600) and is renamed onto `path`,
    otherwise it is removed and the exception goes on. The folder must exist.
    Write to the name with an explicit format (e.g. `savefig(tmp, format="png")`,
    `np.savez` to an open file): it does not end in the target's suffix.

    **Raises:** `DiskFullError` before anything is written when `need` (the
    file's size in bytes, or an estimate) exceeds the free space, and in place
    of the `OSError` of a write that ran out of space (ENOSPC, EDQUOT)."""
    path = Path(path)
    if need is not None and need > (free := free_bytes(path.parent)):
        raise DiskFullError(path, need, free)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:  # no room even for an empty file (inodes)
        if err.errno in _FULL:
            raise DiskFullError(path, need, free_bytes(path.parent)) from None
        raise
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as err:
        written = _size(tmp)
        Path(tmp).unlink(missing_ok=True)
        if err.errno in _FULL and not isinstance(err, DiskFullError):
            raise DiskFullError(path, need, free_bytes(path.parent), written) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def atomic_write_bytes(data: "bytes | memoryview", path: "str | Path") -> Path:
    """Write `data` to `path` atomically (`atomic_path`, which checks the free
    space first); returns the path. **Raises:** `DiskFullError`."""
    with atomic_path(path, need=memoryview(data).nbytes) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
    return Path(path)


def atomic_write_netcdf(ds, path: "str | Path", encoding: "dict | None" = None) -> Path:
    """Write the `xarray.Dataset` `ds` to `path` (netCDF4 via h5netcdf) atomically,
    with xarray's per-variable `encoding` (None: xarray's defaults).

    The file is made in memory, then written as bytes (`atomic_write_bytes`): a
    full disk is then an ordinary `DiskFullError`, where HDF5 writing to a file
    that runs out of space fails in its C library (and can crash the process at
    exit). Peak memory: the dataset and its file (about as large again; no third copy).
    """
    return atomic_write_bytes(ds.to_netcdf(engine="h5netcdf", encoding=encoding), path)


def atomic_write_text(text: str, path: "str | Path") -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns the path."""
    return atomic_write_bytes(text.encode("utf-8"), path)


def figure_bytes(fig, fmt: str, *, laid_out: bool = False, **kwargs) -> bytes:
    """The bytes of `fig.savefig(file, format=fmt, **kwargs)` (`fmt` "png", "pdf", ...).

    `savefig` draws a figure twice when it has a layout engine: a layout pass
    (ticks, titles, labels placed), then the draw that renders. `fig.tight_layout()`
    leaves matplotlib's placeholder engine, whose layout does nothing, yet the pass
    is made for every file saved: a third of the time of a many-axes figure (the
    sweep's trajectories). `laid_out=True` says the figure was just laid out at the
    dpi of this file (`fig.set_dpi(dpi)` then `fig.draw_without_rendering()`, as
    `samflow.plots._common.save_png_pdf` measures its box): then a placeholder's
    pass is skipped (set aside while rendering, put back after) and the figure is
    drawn once, with the bytes of `savefig`. A real engine (tight, constrained) and
    `bbox_inches="tight"` keep their pass; so does any file of another dpi (its
    pass moves text by the last bits of a coordinate).

    **Returns:** the file's bytes (nothing is written)."""
    buf = io.BytesIO()
    engine = fig.get_layout_engine() if laid_out else None
    idle = engine is not None and _placeholder(engine)
    if idle:
        fig.set_layout_engine(None)  # None, with the rcParams of an automatic layout off: no engine
    try:
        fig.savefig(buf, format=fmt, **kwargs)
    finally:
        if idle:
            fig.set_layout_engine(engine)
    return buf.getvalue()


def _placeholder(engine) -> bool:
    """Whether `engine` is matplotlib's placeholder layout engine (its layout does
    nothing) and `set_layout_engine(None)` removes it (no automatic layout in rcParams)."""
    from matplotlib import rcParams
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    return (isinstance(engine, PlaceHolderLayoutEngine)
            and not rcParams["figure.autolayout"] and not rcParams["figure.constrained_layout.use"])


def atomic_savefig(fig, path: "str | Path", **kwargs) -> Path:
    """`fig.savefig(path, **kwargs)` written atomically (`atomic_path`), in the
    format named by the suffix of `path` (".png", ".pdf", ...); returns the path.
    The file's bytes are those of a direct `savefig(path, ...)` (`figure_bytes`).
    **Raises:** `DiskFullError`."""
    path = Path(path)
    # drawn first: its size is known before the disk is touched
    return atomic_write_bytes(figure_bytes(fig, path.suffix.lstrip(".").lower(), **kwargs), path)
