"""Files written whole or not at all: the one atomic writer of the package.

Every result file (netCDF, checkpoints, figures, captions, reports, tables) is
written under a temporary name in its own folder and renamed into place, so that
a reader never sees a half-written file and a crash or an interrupt leaves no
partial result. tests/test_io.py checks that no other module of the package calls
`savefig`, `write_text`, `write_bytes` or `to_netcdf` on a target path itself.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "atomic_savefig", "atomic_write_bytes", "atomic_write_text"]


@contextlib.contextmanager
def atomic_path(path: "str | Path") -> Iterator[str]:
    """A temporary file name beside `path` to write to; when the block ends
    without an exception the file gets the permissions of a normally created
    one (0666 & ~umask; mkstemp makes it 0600) and is renamed onto `path`,
    otherwise it is removed and the exception goes on. The folder must exist.
    Write to the name with an explicit format (e.g. `savefig(tmp, format="png")`,
    `np.savez` to an open file): it does not end in the target's suffix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(data: bytes, path: "str | Path") -> Path:
    """Write `data` to `path` atomically (`atomic_path`); returns the path."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
    return Path(path)


def atomic_write_text(text: str, path: "str | Path") -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns the path."""
    return atomic_write_bytes(text.encode("utf-8"), path)


def atomic_savefig(fig, path: "str | Path", **kwargs) -> Path:
    """`fig.savefig(path, **kwargs)` written atomically (`atomic_path`), in the
    format named by the suffix of `path` (".png", ".pdf", ...); returns the path.
    The file's bytes are those of a direct `savefig(path, ...)`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower(), **kwargs)
    return path
