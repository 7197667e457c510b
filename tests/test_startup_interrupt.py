"""Ctrl-C in the first seconds of `python -m samflow.sweep` / `python -m samflow.plot`,
while they import JAX, pydantic, matplotlib (issue 35, fault 3): it printed a
KeyboardInterrupt traceback from inside the imports; now one line and exit 130, as
a Ctrl-C later in the run.

Deterministic, with no timing: a `sitecustomize` (on PYTHONPATH, only in these
child processes) puts a finder first on `sys.meta_path` that sends the process a
SIGINT when it is asked for the module named in SAMFLOW_TEST_SIGINT_AT. Python
runs the handler at the finder's next bytecode, so the KeyboardInterrupt is
raised inside that very import, whatever the machine's load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = '''\
import os, signal, sys

# A pytest-xdist worker ignores SIGINT and its children inherit that: Python would
# then raise no KeyboardInterrupt. Ctrl-C's default, as in a shell.
signal.signal(signal.SIGINT, signal.default_int_handler)
TARGET = os.environ.get("SAMFLOW_TEST_SIGINT_AT")


class _InterruptAt:
    def find_spec(self, name, path=None, target=None):
        if name == TARGET and name not in sys.modules:
            os.kill(os.getpid(), signal.SIGINT)
        return None


if TARGET:
    sys.meta_path.insert(0, _InterruptAt())
'''

LINE = "interrupted (SIGINT) while starting (importing); nothing was done: rerun the command"
CONFIG = """\
name = "startup"
methods = ["gd"]
[data]
mu = [1.0, 2.0]
[grid]
alpha = [0.5]
rho = [0.1]
[time]
t1 = 1.0
num = 2
"""


def _run(tmp_path: Path, module: str, at: str, *args: str) -> subprocess.CompletedProcess:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)]), "SAMFLOW_TEST_SIGINT_AT": at,
           "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)


# The line of the sweep's main before the solve (samflow.sweep._cli).
SWEEP_LINE = "interrupted (SIGINT) before the solve started; rerun the command"
# run_command's line (samflow._util.cli_common), which the rest of the plot command prints.
PLOT_LINE = "interrupted (SIGINT); figures already written are whole; rerun to draw the rest"


@pytest.mark.parametrize("module, at, line", [
    ("samflow.sweep", "jax", LINE),            # samflow/__init__: while Python locates samflow.sweep
    ("samflow.sweep", "pydantic", LINE),       # samflow/sweep/__init__ -> _cli -> config
    ("samflow.sweep", "matplotlib", LINE),     # samflow/sweep/__main__.py: prepare_process
    ("samflow.sweep", "samflow._util.lock", SWEEP_LINE),  # main: its checks, before anything is written
    ("samflow.plot", "jax", LINE),             # samflow/__init__
    ("samflow.plot", "pydantic", LINE),        # samflow/plot.py run as __main__: its own imports
    ("samflow.plot", "matplotlib", PLOT_LINE),  # run_command: prepare_process
    ("samflow.plot", "xarray", PLOT_LINE),     # main: reading the results file
])
def test_ctrl_c_while_importing_is_one_line_and_exit_130(tmp_path, module, at, line):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    target = str(cfg) if module == "samflow.sweep" else str(tmp_path / "results.nc")
    out = tmp_path / "out"
    proc = _run(tmp_path, module, at, target, "--out", str(out))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_the_hook_reaches_the_import_it_names(tmp_path):
    """The hook interrupts nothing without its variable: the command runs as usual (here,
    its one-line refusal of a missing results file)."""
    proc = _run(tmp_path, "samflow.plot", "", str(tmp_path / "nowhere.nc"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr


def test_a_program_importing_samflow_keeps_its_keyboard_interrupt(tmp_path):
    """Only a command line turns the Ctrl-C into a line: a program that imports samflow gets
    the KeyboardInterrupt to handle as it likes."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)]), "SAMFLOW_TEST_SIGINT_AT": "jax",
           "JAX_PLATFORMS": "cpu"}
    code = "try:\n    import samflow\nexcept KeyboardInterrupt:\n    print('caught')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout == "caught\n", proc.stderr
