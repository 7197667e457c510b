"""What a sweep may reuse from disk: the config key, the code stamps, the chunk
checkpoint of an interrupted run and the check of a finished results file."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import sys
import zipfile
from pathlib import Path

import numpy as np

from .._util.io import atomic_path, atomic_write_text
from ..config import ConfigError
from ..config._experiments import drop_unset_experiment_keys
from ..flows import Method
from ..solver import Summary, Trajectory
from ..store import locked_problem
from ._devices import agree_same, is_writer


#: The stamp of chunks or results made before samflow recorded code stamps.
NO_STAMP = "none recorded (made before samflow stamped its results)"
_KEY_FILE, _STAMP_FILE = "sweep.key", "code.stamp"
#: Bytes an .npz holds per array beyond its data (zip entry and .npy header; about 300).
_NPZ_HEADER = 512
#: What each chunk file carries besides its fields: the config key and code stamp it was made under.
_CHUNK_META = ("__config_key__", "__code_stamp__")


def _chunk_stamps(folder: Path) -> list[str]:
    """The code stamps under which the chunks in `folder` were made ([] when it holds none)."""
    if not any(folder.glob("*.npz")):
        return []
    f = folder / _STAMP_FILE
    stamps = [line for line in f.read_text().splitlines() if line] if f.exists() else []
    return stamps or [NO_STAMP]


def partial_mismatch(folder: "str | Path", key: str, stamp: "str | None") -> "str | None":
    """Why the partial results in `folder` cannot be resumed by a run with config
    key `key` and code stamp `stamp` (one line), or None when they can (or the
    folder holds none). `stamp` None skips the code check."""
    folder = Path(folder)
    kf = folder / _KEY_FILE
    if kf.exists() and kf.read_text() != key:
        return f"{folder}: partial results of a different config (or data file contents); rerun with --overwrite to start over"
    others = [s for s in _chunk_stamps(folder) if s != stamp] if stamp is not None else []
    if others:
        return (
            f"{folder}: partial results made under code stamp '{' and '.join(others)}', this code is "
            f"'{stamp}'; rerun with --overwrite to start over, or --resume-any-version to combine them "
            "(the results then record both stamps)"
        )
    return None


class ChunkCheckpoint:
    """Finished chunks of a sweep, one `.npz` per (method, chunk), in a folder
    (per (method, p, chunk) for lp-SAM: "lp-p=3.0-000000.npz", each exponent its own).

    Each chunk is written atomically (temporary name, then rename), so a run
    killed at any moment leaves only whole chunks. `key` identifies the sweep
    (a hash of its config): chunks made under another key are never reused.
    `stamp` (`samflow.store.code_stamp()`) identifies the code: chunks made
    under another stamp are refused too, unless `accept_other_stamp`; then
    `other_stamps` lists the stamps they were made under (the folder's
    `code.stamp` keeps every stamp its chunks were made under). Each chunk file
    carries the key and stamp it was made under too, checked when it is loaded
    (`load`): a chunk written into the folder by another run is never mixed in.

    **Raises:** `ConfigError` (one line, `partial_mismatch`) when the folder
    holds chunks of another config, or of another code stamp (not accepted).
    """

    def __init__(
        self, folder: "str | Path", key: str, stamp: "str | None" = None, *, accept_other_stamp: bool = False
    ):
        self.folder = Path(folder)
        self.key = key
        self.stamp = stamp
        self.accept_other_stamp = accept_other_stamp
        self.folder.mkdir(parents=True, exist_ok=True)
        problem = partial_mismatch(self.folder, key, stamp)
        kf = self.folder / _KEY_FILE
        same_config = not kf.exists() or kf.read_text() == key
        if problem is not None and not (accept_other_stamp and same_config):
            raise ConfigError(problem)
        # Under jax.distributed only process 0 writes (the others read the same, shared, folder).
        self.writer = is_writer()
        have = self._mark()
        self.other_stamps = [s for s in have if s != stamp] if stamp is not None else []

    def _mark(self) -> list[str]:
        """Write the folder's config key and add this run's stamp to its stamps (process 0
        of a jax.distributed run only); returns the stamps its chunks had before."""
        kf = self.folder / _KEY_FILE
        if self.writer and not (kf.exists() and kf.read_text() == self.key):
            atomic_write_text(self.key, kf)  # atomic: another process never reads half a key
        have = _chunk_stamps(self.folder)
        if self.writer and self.stamp is not None and self.stamp not in have:
            atomic_write_text("".join(f"{line}\n" for line in have + [self.stamp]), self.folder / _STAMP_FILE)
        return have

    def _path(self, method: Method, k: int, p: "float | None" = None) -> Path:
        tag = "" if p is None else f"-p={float(p)!r}"
        return self.folder / f"{method.value}{tag}-{k:06d}.npz"

    def load(self, method: Method, k: int, p: "float | None" = None) -> "tuple | None":
        """The stored chunk k of `method` (with lp-SAM's exponent `p`: of that
        exponent only) as `(piece, switches)`: a `Trajectory` (or a `Summary` for a
        `summary` solve) and its switch-time fields (name -> array, names with
        the prefix `switch_`; None when it was stored without them), or None when it was not finished, or when its file is
        damaged (truncated, unreadable: a one-line note names it, and the chunk
        is recomputed and rewritten).

        **Raises:** `ConfigError` (one line naming the file) when the chunk
        carries another config key than this run's, or another code stamp (not
        accepted): another run wrote into this folder.
        """
        path = self._path(method, k, p)
        if not agree_same(path.exists()):
            raise ConfigError(
                f"{self.folder}: the processes of this jax.distributed run see different finished chunks; "
                "the output folder must be one folder shared by every process"
            )
        if not path.exists():
            return None
        piece, meta = _read_chunk(path)
        if piece is None:
            print(f"note: checkpoint {path} is damaged ({meta['damage']}); its chunk is recomputed", file=sys.stderr)
        if not agree_same(piece is not None):
            raise ConfigError(
                f"{path}: the processes of this jax.distributed run read this chunk differently; "
                "rerun with --overwrite"
            )
        if piece is None:
            return None
        self._check_meta(path, meta)
        return piece, meta.get("switches")

    def _check_meta(self, path: Path, meta: dict) -> None:
        """Refuse a chunk whose own config key or code stamp is not this run's (chunks
        made before chunks carried them are judged by the folder's `sweep.key`)."""
        key = meta.get("__config_key__")
        if key is not None and key != self.key:
            raise ConfigError(
                f"{path} holds a chunk of another config (key {key[:12]}, this run's {self.key[:12]}): another "
                "run wrote into this folder; rerun with --overwrite to start over"
            )
        stamp = meta.get("__code_stamp__")
        if stamp is None or self.stamp is None or stamp == self.stamp:
            return
        if not self.accept_other_stamp:
            raise ConfigError(
                f"{path} holds a chunk made under code stamp '{stamp}', this code is '{self.stamp}'; rerun with "
                "--overwrite to start over, or --resume-any-version to combine them"
            )
        if stamp not in self.other_stamps:
            self.other_stamps.append(stamp)

    def save(self, method: Method, k: int, piece: Trajectory, p: "float | None" = None,
             switches: "dict | None" = None) -> None:
        """Store chunk k of `method` (and exponent `p`) atomically, with its switch-time
        fields (`switches`: name -> array, names prefixed `switch_`) if given, this run's config key and code
        stamp (only in process 0 of a jax.distributed run). A folder deleted during
        the run (by hand) is made again, with one note."""
        if not self.writer:
            return
        if not self.folder.is_dir():  # the chunks it held are in memory: this run's results are whole
            print(f"note: the checkpoint folder {self.folder} was deleted during the run; made again "
                  "(this run's results stay whole)", file=sys.stderr)
            self.folder.mkdir(parents=True, exist_ok=True)
            self._mark()
        path = self._path(method, k, p)
        arrays = {f.name: np.asarray(getattr(piece, f.name)) for f in dataclasses.fields(piece)}
        arrays.update({name: np.asarray(v) for name, v in (switches or {}).items()})
        arrays["__config_key__"] = np.asarray(self.key)
        if self.stamp is not None:
            arrays["__code_stamp__"] = np.asarray(self.stamp)
        need = sum(a.nbytes + _NPZ_HEADER for a in arrays.values())  # the free space checked before writing
        with atomic_path(path, need=need) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def _read_chunk(path: Path) -> "tuple[Trajectory | Summary | None, dict]":
    """The chunk stored in `path` and what it carries besides (`_CHUNK_META`: its config
    key and code stamp); for a damaged file (truncated, unreadable) None and
    {"damage": one line saying why}."""
    try:
        with np.load(path) as f:
            meta = {name: str(f[name]) for name in _CHUNK_META if name in f.files}
            fields = {name: f[name] for name in f.files if name not in _CHUNK_META}
        switches = {name: fields.pop(name) for name in list(fields) if name.startswith("switch_")}
        meta["switches"] = switches or None
        cls = Summary if "dominant" in fields else Trajectory
        return cls(**fields), meta
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError, TypeError) as err:  # any damage
        return None, {"damage": str(err).splitlines()[0] if str(err) else type(err).__name__}


def damaged_chunks(folder: "str | Path") -> list[Path]:
    """The chunk files in a checkpoint folder that do not read back whole (each is
    read: truncated by a full disk, a copy cut short...); a resumed run recomputes
    them (`ChunkCheckpoint.load`), so they are not among its chunks already done."""
    folder = Path(folder)
    return [p for p in sorted(folder.glob("*.npz")) if _read_chunk(p)[0] is None] if folder.is_dir() else []


def config_key(config: dict) -> str:
    """A hash of everything that determines a sweep's numbers (not its output folder),
    from the config's JSON values: `SweepConfig.model_dump(mode="json")`, or the
    attribute `config` of a results file (`json.loads(ds.attrs["config"])`).

    `output.save = "summary"` changes the key (its chunks and slices hold other
    variables than a full run's, so neither `--resume` nor the merge mixes the
    two); a full run keeps the key it had before `output.save` existed.

    **Raises:** `TypeError` (one line) for a config object (0.2's argument): pass its
    `model_dump(mode="json")`.
    """
    if not isinstance(config, dict):
        raise TypeError("config_key takes the config's JSON values since samflow 0.3.0: pass "
                        f"cfg.model_dump(mode=\"json\"), not a {type(config).__name__}")
    dump = drop_unset_experiment_keys(copy.deepcopy(config))  # keys of configs without them unchanged
    save = dump.pop("output", {}).get("save", "full")
    if save != "full":
        dump["output.save"] = save
    dump.pop("name", None)
    dump.pop("description", None)
    text = json.dumps(dump, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def data_digest(data) -> str:
    """The first 16 hex digits of the sha256 of a `Dataset`'s X and y (float64, with their shapes)."""
    h = hashlib.sha256()
    for a in (data.X, data.y):
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(repr(a.shape).encode() + a.tobytes())
    return h.hexdigest()[:16]


def chunk_key(key: str, data, grid_slice: "tuple[int, int] | None" = None, *, from_file: bool = False) -> str:
    """The key of a run's checkpoint folder: the config's `key` (`config_key`), the
    digest of the data when it comes from a data file (`from_file`: the config names
    the file, not its contents, so an edited file must not let `--resume` reuse
    chunks solved on the old data), and the slice `grid_slice = (i, K)`."""
    if from_file:
        key = f"{key} data {data_digest(data)}"
    if grid_slice is not None:
        key = f"{key} slice {grid_slice[0]} of {grid_slice[1]}"
    return key


def _finished_mismatch(path: Path, key: str, stamp: str, grid_slice, accept_other_stamp: bool, data=None):
    """Compare a finished results file with this run: returns (problem, note).

    `problem` is None when `path` holds the complete results of this config
    (`key`, and for a slice the same `grid_slice`) on this `data` (its
    `data_X`, `data_y`; not compared when `data` is None) under this code stamp
    (or under another one, with `accept_other_stamp`; then `note` says so);
    otherwise one line saying why it is not this run's result.
    """
    import xarray as xr

    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            attrs = dict(ds.attrs)
            stored = {name: ds[name].values for name in ("data_X", "data_y") if name in ds}
    except (OSError, ValueError) as err:
        if (locked := locked_problem(path, err)) is not None:
            return locked, None
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"{path} exists but cannot be read ({why}); pass --overwrite to replace it", None
    old_key = str(attrs.get("config_key", ""))
    same_slice = grid_slice is None or (
        int(attrs.get("slice_index", -1)), int(attrs.get("num_slices", -1))) == tuple(grid_slice)
    if old_key != key or not same_slice:
        return (
            f"{path} exists and holds the results of a different config (hash {old_key[:12] or 'none'} vs "
            f"{key[:12]}); pass --overwrite to replace it, or another --out"
        ), None
    if data is not None and not all(
        name in stored and np.array_equal(stored[name], np.asarray(value, np.float64))
        for name, value in (("data_X", data.X), ("data_y", data.y))
    ):
        return (
            f"{path} exists and holds the results of other data than this config's (data_X / data_y differ: "
            "was data.file edited?); pass --overwrite to recompute it, or another --out"
        ), None
    old_stamp = str(attrs.get("code_stamp", NO_STAMP))
    if old_stamp != stamp:
        if accept_other_stamp:
            return None, f"note: {path} was made under code stamp '{old_stamp}', this code is '{stamp}'; kept as it is"
        return (
            f"{path} exists, made under code stamp '{old_stamp}', this code is '{stamp}'; pass --overwrite "
            "to recompute it, or --resume-any-version to keep it"
        ), None
    return None, None
