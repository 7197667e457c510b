"""What a sweep may reuse from disk: the config key, the code stamps, the chunk
checkpoint of an interrupted run and the check of a finished results file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from .._io import atomic_path, atomic_write_text
from ..config import ConfigError, SweepConfig
from ..config._experiments import drop_unset_experiment_keys
from ..flows import Method
from ..solver import Summary, Trajectory
from ._devices import agree_same, is_writer


#: The stamp of chunks or results made before samflow recorded code stamps.
NO_STAMP = "none recorded (made before samflow stamped its results)"
_KEY_FILE, _STAMP_FILE = "sweep.key", "code.stamp"
#: Bytes an .npz holds per array beyond its data (zip entry and .npy header; about 300).
_NPZ_HEADER = 512


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
    """Finished chunks of a sweep, one `.npz` per (method, chunk), in a folder.

    Each chunk is written atomically (temporary name, then rename), so a run
    killed at any moment leaves only whole chunks. `key` identifies the sweep
    (a hash of its config): chunks made under another key are never reused.
    `stamp` (`samflow.store.code_stamp()`) identifies the code: chunks made
    under another stamp are refused too, unless `accept_other_stamp`; then
    `other_stamps` lists the stamps they were made under (the folder's
    `code.stamp` keeps every stamp its chunks were made under).

    **Raises:** `ConfigError` (one line, `partial_mismatch`) when the folder
    holds chunks of another config, or of another code stamp (not accepted).
    """

    def __init__(
        self, folder: "str | Path", key: str, stamp: "str | None" = None, *, accept_other_stamp: bool = False
    ):
        self.folder = Path(folder)
        self.key = key
        self.stamp = stamp
        self.folder.mkdir(parents=True, exist_ok=True)
        problem = partial_mismatch(self.folder, key, stamp)
        kf = self.folder / _KEY_FILE
        same_config = not kf.exists() or kf.read_text() == key
        if problem is not None and not (accept_other_stamp and same_config):
            raise ConfigError(problem)
        # Under jax.distributed only process 0 writes (the others read the same, shared, folder).
        self.writer = is_writer()
        if self.writer and not (kf.exists() and kf.read_text() == key):
            atomic_write_text(key, kf)  # atomic: another process never reads half a key
        have = _chunk_stamps(self.folder)
        self.other_stamps = [s for s in have if s != stamp] if stamp is not None else []
        if self.writer and stamp is not None and stamp not in have:
            atomic_write_text("".join(f"{line}\n" for line in have + [stamp]), self.folder / _STAMP_FILE)

    def _path(self, method: Method, k: int) -> Path:
        return self.folder / f"{method.value}-{k:06d}.npz"

    def load(self, method: Method, k: int) -> "Trajectory | Summary | None":
        """The stored chunk k of `method` (a `Trajectory`, or a `Summary` for a
        `summary` solve), or None when it was not finished."""
        path = self._path(method, k)
        if not agree_same(path.exists()):
            raise ConfigError(
                f"{self.folder}: the processes of this jax.distributed run see different finished chunks; "
                "the output folder must be one folder shared by every process"
            )
        if not path.exists():
            return None
        with np.load(path) as f:
            cls = Summary if "dominant" in f.files else Trajectory
            return cls(**{name: f[name] for name in f.files})

    def save(self, method: Method, k: int, piece: Trajectory) -> None:
        """Store chunk k of `method` atomically (only in process 0 of a jax.distributed run)."""
        if not self.writer:
            return
        path = self._path(method, k)
        arrays = {f.name: np.asarray(getattr(piece, f.name)) for f in dataclasses.fields(piece)}
        need = sum(a.nbytes + _NPZ_HEADER for a in arrays.values())  # the free space checked before writing
        with atomic_path(path, need=need) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def config_key(cfg: SweepConfig) -> str:
    """A hash of everything that determines a sweep's numbers (not its output folder).

    `output.save = "summary"` changes the key (its chunks and slices hold other
    variables than a full run's, so neither `--resume` nor the merge mixes the
    two); a full run keeps the key it had before `output.save` existed.
    """
    dump = drop_unset_experiment_keys(cfg.model_dump(mode="json"))  # keys of configs without them unchanged
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


def chunk_key(cfg: SweepConfig, data, grid_slice: "tuple[int, int] | None" = None) -> str:
    """The key of a run's checkpoint folder: `config_key(cfg)`, the digest of the data
    when it comes from `data.file` (the config names the file, not its contents: an
    edited file must not let `--resume` reuse chunks solved on the old data), and
    the slice `grid_slice = (i, K)`."""
    key = config_key(cfg)
    if cfg.data.file is not None:
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
