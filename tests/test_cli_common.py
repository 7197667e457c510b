"""The shared command-line scaffolding (samflow._util.cli_common) and the shared list checks of
the configs (samflow.config.increasing / distinct / field_check), on their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from samflow._util.cli_common import EXIT_BAD_INPUT, existing_file, fail, fail_config, writable_folder
from samflow.config import ConfigError, ConfigModel, distinct, field_check, increasing, validate

ROOT = Path(__file__).resolve().parents[1]


def test_writable_folder_makes_nested_folders_and_leaves_no_probe(tmp_path):
    folder = tmp_path / "a" / "b"
    assert writable_folder(folder) is None
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_writable_folder_names_the_folder_and_the_reason(tmp_path):
    (tmp_path / "file").write_text("x")
    folder = tmp_path / "file" / "out"
    assert writable_folder(folder) == f"--out / output.dir: cannot write to {folder}: Not a directory"


def test_existing_file_is_the_first_in_the_given_order(tmp_path):
    assert existing_file(tmp_path, ["a.nc", "b.csv"]) is None
    (tmp_path / "b.csv").write_text("")
    (tmp_path / "a.nc").write_text("")
    assert existing_file(tmp_path, ["b.csv", "a.nc"]) == tmp_path / "b.csv"


def test_fail_prints_one_error_line_per_problem_and_returns_2(capsys):
    assert EXIT_BAD_INPUT == 2
    assert fail("bad --out") == 2
    assert fail_config(ConfigError("c.toml: a: x\nc.toml: b: y")) == 2
    assert capsys.readouterr().err.splitlines() == ["error: bad --out", "error: c.toml: a: x", "error: c.toml: b: y"]


class _Lists(ConfigModel):
    xs: list[float] | None = None
    names: list[str] = []
    _xs = field_check("xs", check=increasing("xs", empty="xs is empty: give one"))
    _names = field_check("names", check=distinct("names must not repeat, got {}"))


def test_field_check_lets_an_omitted_key_pass_and_checks_a_given_one():
    assert _Lists(xs=None).xs is None  # an explicit None (TOML has none; the API may give it)
    assert _Lists(xs=[1.0, 2.5]).xs == [1.0, 2.5]
    with pytest.raises(ConfigError) as err:
        validate(_Lists, {"xs": [2.0, 1.0], "names": ["a", "a"]}, "t.toml")
    assert str(err.value).splitlines() == [
        "t.toml: xs: must be strictly increasing, got [2.0, 1.0]",
        "t.toml: names: must not repeat, got ['a', 'a']",  # format_errors says the key once
    ]
    with pytest.raises(ValidationError, match="xs is empty: give one"):
        _Lists(xs=[])
    with pytest.raises(ValueError, match=r"^e must be strictly increasing, got \[1, 1\]$"):
        increasing("e")([1, 1])  # equal neighbours are not increasing


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_run_command_turns_an_interrupt_into_one_line_and_128_plus_the_signal(sig):
    """python -m samflow.atlas / .experiments.cnn / .cnn_study printed a 70-line
    traceback from inside JAX on Ctrl-C (the atlas then segfaulted at exit, 139)."""
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # an xdist worker's child inherits SIG_IGN\n"
        "from samflow._util.cli_common import run_command\n"
        "def main():\n"
        "    print('ready', flush=True)\n"
        "    for _ in range(6000):  # short sleeps: the handler runs even if a thread of JAX took the signal\n"
        "        time.sleep(0.1)\n"
        "    return 0\n"
        "run_command(main, 'nothing was written')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines() == [f"interrupted ({signal.Signals(sig).name}); nothing was written"]


def test_print_figures_lists_the_pdf_written_beside_each_png(tmp_path, capsys):
    from samflow._util.cli_common import print_figures

    (tmp_path / "a.png").write_bytes(b"png")
    (tmp_path / "a.pdf").write_bytes(b"pdf")
    (tmp_path / "b.png").write_bytes(b"png")  # no pdf beside it
    print_figures([tmp_path / "a.png", tmp_path / "b.png", tmp_path / "a.pdf"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"figure: {tmp_path / 'a.png'}", f"figure: {tmp_path / 'a.pdf'}", f"figure: {tmp_path / 'b.png'}"]


@pytest.mark.parametrize(
    "platform, command, why",
    [
        # JAX 0.10 raises a bare AssertionError for "cuda" without CUDA; the sweep blamed the config.
        ("cuda", ["-m", "samflow.sweep", "configs/default.toml"], "no JAX plugin for it is installed"),
        ("gpu", ["-m", "samflow.sweep", "configs/default.toml"], "Unable to initialize backend"),  # was 71 lines
        ("cuda", ["-m", "samflow.atlas", "configs/atlas.toml", "--quick"], "no JAX plugin for it is installed"),
    ],
)
def test_a_platform_jax_cannot_start_is_one_line_naming_it(tmp_path, platform, command, why):
    import jax

    if platform in {d.platform for d in jax.devices()} or jax.default_backend() == "gpu":
        pytest.skip(f"this machine has {platform}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": platform}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, *command, "--out", str(out)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=240)
    assert r.returncode == EXIT_BAD_INPUT, r.stderr[-1500:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-1500:]
    assert lines[0].startswith(f"error: JAX could not start the platform JAX_PLATFORMS='{platform}' ("), lines[0]
    assert why in lines[0] and lines[0].endswith("set JAX_PLATFORMS=cpu to run on the CPU, or unset JAX_PLATFORMS "
                                                 "to let JAX choose")
    assert "(set JAX_PLATFORMS=''" not in lines[0]  # JAX's own hint, replaced by ours
    assert not out.exists()


def test_the_python_api_names_a_platform_jax_cannot_start_in_one_line(tmp_path):
    """`load_config` and `samflow.sweep.run_sweep` from Python with JAX_PLATFORMS=cuda
    and no CUDA: the inline data set is made in a config validator, where JAX's bare
    AssertionError became the config error "(top level): Assertion failed"; a config
    with a data file reached JAX only in run_sweep, as that AssertionError. Both are now
    the command line's one line, as a BackendError (a RuntimeError)."""
    import jax

    if jax.default_backend() == "gpu" or "cuda" in {d.platform for d in jax.devices()}:
        pytest.skip("this machine has cuda")
    from tests.helpers import SMALL_SWEEP

    (tmp_path / "inline.toml").write_text(SMALL_SWEEP)
    (tmp_path / "file.toml").write_text(SMALL_SWEEP.replace("mu = [0.2, 0.6, 1.0]", 'file = "d.npz"'))
    code = (
        "import sys, numpy as np\n"
        "from samflow._util.backend import BackendError\n"
        "from samflow.config import load_config\n"
        "from samflow.sweep import run_sweep\n"
        "d = sys.argv[1]\n"
        "np.savez(d + '/d.npz', X=np.array([[0.2, 0.6, 1.0]]), y=np.ones(1))\n"
        "try:\n"
        "    load_config(d + '/inline.toml')\n"
        "except BackendError as err:\n"
        "    print('inline:', err)\n"
        "cfg = load_config(d + '/file.toml')\n"  # no JAX array in its validation
        "try:\n"
        "    run_sweep(cfg, progress=False, base_dir=d)\n"
        "except BackendError as err:\n"
        "    print('file:', err)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cuda"}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr[-1500:]
    line = ("JAX could not start the platform JAX_PLATFORMS='cuda' (no JAX plugin for it is installed, or no device "
            "of it is visible); set JAX_PLATFORMS=cpu to run on the CPU, or unset JAX_PLATFORMS to let JAX choose")
    assert r.stdout.splitlines() == [f"inline: {line}", f"file: {line}"], r.stdout + r.stderr[-1500:]


def test_run_command_turns_a_full_disk_into_one_line_and_exit_2(tmp_path):
    """The atlas, the CNN experiments and the merge: a DiskFullError from any write."""
    code = (
        "from samflow._util.cli_common import run_command\n"
        "from samflow._util.io import DiskFullError\n"
        "def main():\n"
        f"    raise DiskFullError({str(tmp_path / 'atlas.nc')!r}, 3 * 2**20, 2**20)\n"
        "run_command(main, 'nothing was written', 'free space, then rerun with --resume')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == EXIT_BAD_INPUT
    assert r.stderr.strip().splitlines() == [
        f"error: no space left in {tmp_path} for atlas.nc: it needs about 3 MiB, 1 MiB free; "
        "free space, then rerun with --resume"
    ]
