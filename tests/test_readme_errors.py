"""The documentation's list of one-line refusals (docs/troubleshooting.md, "One-line
refusals"; README's "Common errors" was its first home) quotes the refusals a user will
see; each quote must still match the real one-line message, or the list misleads the
reader who searches for their error (one quote had gone stale: the number-as-string
message had gained "; a number is written without quotes"). In a quote, '...' and
'<key>' stand for any text and the depth 'L' for a number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import samflow as sf
from samflow.config import ConfigError, load_config

from helpers import toml_text

TROUBLESHOOTING = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"

BASE = toml_text({"methods": ["gd", "l2"], "data": {"mu": [0.5, 1.0]}, "grid": {"alpha": [0.5, 2.0], "rho": [0.1]},
                  "time": {"t1": 1.0, "num": 4}})


def _config(text: str):
    def provoke(tmp_path: Path):
        path = tmp_path / "c.toml"
        path.write_text(text)
        load_config(path)

    return provoke


def _settings(**kw):
    return lambda tmp_path: sf.SolverSettings(**kw)


def _disk_full(tmp_path: Path):
    """A file that needs more than the free space (DiskFullError, before anything is written)."""
    from samflow._util.io import atomic_path

    with atomic_path(tmp_path / "results.nc", need=1 << 62):
        pass


def _no_platform(tmp_path: Path):
    """JAX 0.10's bare AssertionError for JAX_PLATFORMS=cuda without CUDA (the real one is
    provoked in a fresh process by tests/test_cli_common.py)."""
    import os
    from unittest import mock

    import jax

    from samflow._util.backend import require_backend

    if jax.config.jax_platforms:  # set for this process: the message names it, not "cuda"
        pytest.skip(f"JAX_PLATFORMS={jax.config.jax_platforms!r} is set for the tests")
    with mock.patch.object(jax, "devices", side_effect=AssertionError()), \
            mock.patch.dict(os.environ, {"JAX_PLATFORMS": "cuda"}):
        require_backend()


# The first backticked quote of a Common-errors bullet -> what provokes it.
PROVOKE = {
    "unknown key (did you mean 'rtol'?)": _config(BASE + "[solver]\nrtoll = 1e-8\n"),
    "Input should be a valid number; a number is written without quotes (got '1e-8')": _config(
        BASE + '[solver]\nrtol = "1e-8"\n'),
    "clock = 'tau' ... needs a single sample": _config(
        'clock = "tau"\n' + BASE.replace("mu = [0.5, 1.0]", "X = [[0.5, 1.0], [1.0, 0.5]]\ny = [1.0, 1.0]")),
    "<key>: non-finite value: give a finite number (nan and inf are not allowed)": _config(
        BASE.replace("t1 = 1.0", "t1 = nan")),
    "grid.rho: rho = 0 with grid.alpha_relative_to_rho = true gives alpha = multiple x 0 = 0, which cannot move at depth L": (
        _config(BASE.replace("rho = [0.1]", "rho = [0.0, 0.1]\nalpha_relative_to_rho = true"))),
    "solver.rtol must be a finite number > 0 and < 1, got 2.0": _settings(rtol=2.0),
    "no space left in ... for ...: it needs about ..., ... free": _disk_full,
    "JAX could not start the platform JAX_PLATFORMS='cuda' (...)": _no_platform,
}


def _common_errors() -> list[str]:
    section = TROUBLESHOOTING.read_text().split("## One-line refusals", 1)[1].split("\n## ", 1)[0]
    block = section.split("\n\n- ", 1)[1].split("\n\n", 1)[0]
    block = "- " + block
    return [m.group(1) for line in block.splitlines() if (m := re.match(r"- `([^`]+)`", line))]


def _pattern(quote: str) -> "re.Pattern[str]":
    parts = [re.escape(p) for p in re.split(r"\.\.\.|<key>", quote)]
    return re.compile(".*".join(p.replace(r"depth\ L", r"depth\ \d+") for p in parts))


def test_readme_lists_the_quotes_this_test_checks():
    quotes = _common_errors()
    assert len(quotes) >= 10, quotes
    missing = [q for q in PROVOKE if q not in quotes]
    assert not missing, f"docs/troubleshooting.md's One-line refusals no longer quote {missing}; update PROVOKE"


@pytest.mark.parametrize("quote", list(PROVOKE), ids=[q[:30] for q in PROVOKE])
def test_readme_quote_is_the_real_message(tmp_path, quote):
    with pytest.raises((ConfigError, ValueError, OSError, RuntimeError)) as err:  # OSError: DiskFullError
        PROVOKE[quote](tmp_path)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert _pattern(quote).search(message), f"docs/troubleshooting.md quotes {quote!r}; the message is {message!r}"


def _sweep(*args: str, results: bool = False, partial: bool = False):
    """Run `python -m samflow.sweep` on BASE with `args`, into tmp_path/o (holding an old
    results.nc or partial results when asked); the one-line refusal is its stderr."""
    def provoke(tmp_path: Path, capsys) -> str:
        from samflow.sweep import main

        cfg, out = tmp_path / "c.toml", tmp_path / "o"
        cfg.write_text(BASE)
        if results:
            out.mkdir()
            (out / "results.nc").write_text("")
        if partial:
            (out / ".partial").mkdir(parents=True)
        assert main([str(cfg), "--out", str(out), "--quiet", *args]) == 2
        return capsys.readouterr().err

    return provoke


def _merge(tmp_path: Path, capsys) -> str:
    from samflow.merge import main

    assert main([str(tmp_path / "o")]) == 2
    return capsys.readouterr().err


# The first backticked quote of a bullet of "Refusals of the command line" -> what provokes it.
PROVOKE_CLI = {
    ".../results.nc exists; pass --overwrite to replace it, --resume to keep it if it holds this config's "
    "complete results, or another --out": _sweep(results=True),
    "... holds partial results of an interrupted run; pass --resume to continue it or --overwrite to start over":
        _sweep(partial=True),
    "--num-slices and --slice-index go together: give both": _sweep("--num-slices", "2"),
    "--num-slices ... is more than the ... (alpha, rho) cell(s) of the grid; use at most ...":
        _sweep("--num-slices", "5", "--slice-index", "0"),
    "--slice-index must be in ... for --num-slices ... (got ...)": _sweep("--num-slices", "2", "--slice-index", "3"),
    "no slices in ...; run python -m samflow.sweep CONFIG --num-slices K --slice-index i (with the same --out) first":
        _merge,
}


def _cli_quotes() -> list[str]:
    section = TROUBLESHOOTING.read_text().split("## Refusals of the command line", 1)[1].split("\n## ", 1)[0]
    return [q for line in section.splitlines() for q in re.findall(r"`([^`]{20,})`", line)]


@pytest.mark.parametrize("quote", list(PROVOKE_CLI), ids=[q[:30] for q in PROVOKE_CLI])
def test_troubleshooting_quotes_the_real_command_line_refusal(tmp_path, capsys, quote):
    assert quote in _cli_quotes(), f"docs/troubleshooting.md no longer quotes {quote!r}; update PROVOKE_CLI"
    err = PROVOKE_CLI[quote](tmp_path, capsys).strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert _pattern(quote).search(err), f"docs/troubleshooting.md quotes {quote!r}; the message is {err!r}"
