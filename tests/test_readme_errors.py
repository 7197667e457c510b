"""README's "Common errors" list quotes the refusals a user will see; each quote must
still match the real one-line message, or the list misleads the reader who searches
for their error (one quote had gone stale: the number-as-string message had gained
"; a number is written without quotes"). The quotes are read from README.md; in a
quote, '...' and '<key>' stand for any text and the depth 'L' for a number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import samflow as sf
from samflow.config import ConfigError, load_config

README = Path(__file__).resolve().parents[1] / "README.md"

BASE = """\
methods = ["gd", "l2"]
[data]
mu = [0.5, 1.0]
[grid]
alpha = [0.5, 2.0]
rho = [0.1]
[time]
t1 = 1.0
num = 4
"""


def _config(text: str):
    def provoke(tmp_path: Path):
        path = tmp_path / "c.toml"
        path.write_text(text)
        load_config(path)

    return provoke


def _settings(**kw):
    return lambda tmp_path: sf.SolverSettings(**kw)


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
}


def _common_errors() -> list[str]:
    block = README.read_text().split("Common errors:", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return [m.group(1) for line in block.splitlines() if (m := re.match(r"- `([^`]+)`", line))]


def _pattern(quote: str) -> "re.Pattern[str]":
    parts = [re.escape(p) for p in re.split(r"\.\.\.|<key>", quote)]
    return re.compile(".*".join(p.replace(r"depth\ L", r"depth\ \d+") for p in parts))


def test_readme_lists_the_quotes_this_test_checks():
    quotes = _common_errors()
    assert len(quotes) >= 10, quotes
    missing = [q for q in PROVOKE if q not in quotes]
    assert not missing, f"README's Common errors no longer quote {missing}; update PROVOKE"


@pytest.mark.parametrize("quote", list(PROVOKE), ids=[q[:30] for q in PROVOKE])
def test_readme_quote_is_the_real_message(tmp_path, quote):
    with pytest.raises((ConfigError, ValueError)) as err:
        PROVOKE[quote](tmp_path)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert _pattern(quote).search(message), f"README quotes {quote!r}; the message is {message!r}"
