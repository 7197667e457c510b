"""A lock on what a command writes: one run at a time per results file.

Two runs writing the same output (a second sweep started with `--overwrite`
while the first still runs) used to mix their numbers silently. A run takes the
lock before it reads or changes anything there, and gives it back when it ends
(normally, on an error, or on Ctrl-C / SIGTERM, which the command lines turn
into an exception). The lock is a small file created atomically
(`O_CREAT | O_EXCL`: of two runs, exactly one creates it) that names its owner:
pid, host, start time, and the process's own start time where the system
shows it (Linux `/proc`), so a reused pid is not mistaken for the owner.

A lock whose owner is gone (same host, pid not running, e.g. a run killed with
SIGKILL) is stale: the next run takes it over, with a one-line note. A lock of
another host cannot be checked from here: it is honoured, and the refusal names
the file to delete if that run is known to be gone.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from pathlib import Path

__all__ = ["LockedError", "OutputLock", "lock_owner_text", "remove_empty", "take_lock"]


class LockedError(ValueError):
    """The lock is held by a live run (one line: who, since when, what to do)."""


def _proc_start(pid: int) -> "str | None":
    """The start time of process `pid` in clock ticks since boot (Linux `/proc/<pid>/stat`
    field 22), or None where the system does not show it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def lock_owner_text(pid: int, what: str) -> str:
    """The content of a lock held by process `pid` of this host for a run of kind
    `what` (JSON: pid, host, started, proc_start, what); `take_lock` writes it
    for this process."""
    return json.dumps({
        "pid": int(pid),
        "host": socket.gethostname(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "proc_start": _proc_start(pid),
        "what": what,
    })


def _alive(owner: dict) -> bool:
    """Whether the owner of a lock of this host still runs (its pid exists and, where
    recorded, has the same process start time)."""
    pid = int(owner["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    recorded, now = owner.get("proc_start"), _proc_start(pid)
    return recorded is None or now is None or str(recorded) == now


def _read(path: Path) -> "dict | None":
    """The owner a lock file names, or None when it cannot be read or parsed."""
    try:
        owner = json.loads(path.read_text())
        int(owner["pid"]), str(owner["host"])
        return owner
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_empty(folders: "list[Path]") -> None:
    """Remove each of `folders` (in the order given: deepest first) that is empty; leave the others."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            pass


class OutputLock:
    """A lock taken by `take_lock`; `release()` (or leaving the `with` block) gives it back.

    `note` is a one-line note when a stale lock was taken over, else None;
    `tidy` lists folders (deepest first) to remove on release when empty.
    """

    def __init__(self, path: Path, text: str, note: "str | None"):
        self.path, self._text, self.note = path, text, note
        self.tidy: "list[Path]" = []

    def release(self) -> None:
        """Remove the lock file, if it still is this run's, then the empty `tidy`
        folders (idempotent)."""
        try:
            if self.path.read_text() == self._text:
                self.path.unlink()
        except OSError:
            pass
        remove_empty(self.tidy)

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _create(path: Path, text: str) -> bool:
    """Create `path` holding `text`, atomically; False when it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return True


def take_lock(path: "str | Path", what: str) -> OutputLock:
    """Take the lock file `path` (its folder must exist) for this process.

    `what` names the run that takes it ("sweep", "merge", "CNN study"); it is kept
    in the file, and a refused run reads it there ("another sweep, pid ...").

    **Returns:** the `OutputLock` (with `note` set when a stale lock, of a process
    of this host that no longer runs, was taken over).

    **Raises:** `LockedError` (one line naming the owner's pid, host and start
    time, or the file to delete) when a live run holds it; `OSError` when the
    folder cannot be written.
    """
    path = Path(path)
    text = lock_owner_text(os.getpid(), what)
    note = None
    for _ in range(3):  # a lost race with another run taking over the same stale lock: look again
        if _create(path, text):
            return OutputLock(path, text, note)
        owner = _read(path)
        if owner is None:
            raise LockedError(
                f"{path.parent}: the lock {path} cannot be read; if no run is writing here, delete it and rerun"
            )
        since = f"started at {owner.get('started', '?')}"
        held_by = f"another {owner.get('what') or 'run'}"
        if owner["host"] != socket.gethostname():
            raise LockedError(
                f"{path.parent}: {held_by}, pid {owner['pid']} on host {owner['host']}, {since}, is writing here; "
                f"wait for it or use another --out (if that run is gone, delete {path})"
            )
        if _alive(owner):
            raise LockedError(
                f"{path.parent}: {held_by}, pid {owner['pid']}, {since}, is writing here; "
                "wait for it to finish or use another --out"
            )
        # Stale: move it aside (atomic: of two runs taking it over, one moves it), then check that
        # what was moved is the stale lock read above, not a fresh one another run just made.
        aside = path.with_name(f"{path.name}.stale-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            continue
        moved = _read(aside)
        if moved != owner:  # a live lock: put it back where it was (never over another)
            try:
                os.link(aside, path)
            except OSError:
                pass
            aside.unlink(missing_ok=True)
            continue
        aside.unlink(missing_ok=True)
        note = (f"note: took over the lock of {path.parent} from pid {owner['pid']} ({since}), "
                "which no longer runs (its run was killed?)")
    raise LockedError(f"{path.parent}: another run keeps taking the lock {path}; rerun when it is done")
