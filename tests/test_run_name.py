"""`name` of a command's config is one plain folder name (samflow.config.RunConfig).

Before, a name with a path in it was joined as given: `name = "/tmp/x"` replaced
output.dir (the sweep wrote to /tmp/x), `"../x"` left it, and the CNN study's
`--overwrite` removed `<output.dir>/<name>/runs` wherever that pointed."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from samflow.atlas._config import load_atlas_config
from samflow.config import NAME_RULE, ConfigError, RunConfig, load_config
from samflow.experiments.cnn_config import load_cnn_config
from samflow.experiments.cnn_study_config import load_study_config

ROOT = Path(__file__).resolve().parents[1]
LOADERS = {
    "default.toml": load_config,
    "atlas.toml": load_atlas_config,
    "cnn_mnist.toml": load_cnn_config,
    "cnn_study.toml": load_study_config,
}
BAD = ["/tmp/x", "../x", "a/b", "a\\b", ".", "..", ".hidden", "-x", "a b", "run\n"]


def _with_name(tmp_path: Path, config: str, name: str) -> Path:
    src = (ROOT / "configs" / config).read_text()
    assert tomllib.loads(src)["name"]  # every shipped config names its run
    line = "name = " + ('"' + name.replace("\\", "\\\\").replace("\n", "\\n") + '"')
    new, n = re.subn(r'^name = "[^"]*"', lambda m: line, src, count=1, flags=re.M)
    assert n == 1
    path = tmp_path / "c.toml"
    path.write_text(new)
    return path


# Issue 25 item 16: one rule, said in the message. Before, "use letters" refused a
# Greek letter (a letter) while a task name took a zero-width space, and a study
# task named "../x" stored its runs outside runs/.
INVISIBLE_OR_NOT_ASCII = ["a\u200bb", "run\u00a0x", "a\u2060", "\u200b", "x\u202e", "\u03b1_sweep", "rho\u0301"]


@pytest.mark.parametrize("config", list(LOADERS))
@pytest.mark.parametrize("name", BAD + INVISIBLE_OR_NOT_ASCII)
def test_a_name_with_a_path_or_an_invisible_character_is_refused_in_one_line(tmp_path, config, name):
    from samflow.config import NAME_RULE

    with pytest.raises(ConfigError) as err:
        LOADERS[config](_with_name(tmp_path, config, name))
    lines = str(err.value).splitlines()
    assert lines == [f"{tmp_path / 'c.toml'}: name: not a plain folder name, got {name!r} (it names the run's folder "
                     f"under output.dir; leave it empty for the config file's name): {NAME_RULE}"]
    assert lines[0].isprintable()  # an invisible character shows as its escape (\u200b)


@pytest.mark.parametrize("config", list(LOADERS))
@pytest.mark.parametrize("name", ["run_1.v2", "A-b", "_x", "0"])
def test_a_plain_name_is_the_run_folder_under_output_dir(tmp_path, config, name):
    cfg = LOADERS[config](_with_name(tmp_path, config, name))
    assert cfg.name == name
    assert cfg.run_folder("res", "whatever/c.toml") == Path("res") / name


@pytest.mark.parametrize("config", list(LOADERS))
def test_an_empty_name_takes_the_config_files_stem(tmp_path, config):
    cfg = LOADERS[config](_with_name(tmp_path, config, ""))
    assert cfg.run_folder("res", tmp_path / "my_run.toml") == Path("res") / "my_run"


@pytest.mark.parametrize("config", list(LOADERS))
@pytest.mark.parametrize("stem", ["..", ".hidden", "a b", "r\u200bun"])
def test_an_empty_name_and_a_stem_that_is_no_folder_name_is_refused(tmp_path, config, stem):
    cfg = LOADERS[config](_with_name(tmp_path, config, ""))
    with pytest.raises(ConfigError) as err:
        cfg.run_folder("res", tmp_path / f"{stem}.toml")  # a file '...toml' would write into res/..
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and f"name: empty, and the config file's name {stem!r} is no plain folder name" in lines[0]
    assert NAME_RULE in lines[0]


def test_the_sweep_command_refuses_a_config_file_named_dot_dot_and_writes_nothing(tmp_path):
    cfg = _with_name(tmp_path, "default.toml", "")
    bad = cfg.rename(tmp_path / "...toml")
    out = subprocess.run([sys.executable, "-m", "samflow.sweep", str(bad)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "name: empty, and the config file's name '..'" in lines[0], out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["...toml"]


def test_every_command_config_is_a_run_config():
    from samflow.atlas._config import AtlasConfig
    from samflow.config import SweepConfig
    from samflow.experiments.cnn_config import CnnConfig
    from samflow.experiments.cnn_study_config import StudyConfig

    for schema in (SweepConfig, AtlasConfig, CnnConfig, StudyConfig):
        assert issubclass(schema, RunConfig)


def test_the_sweep_command_refuses_an_absolute_name_and_writes_nothing(tmp_path):
    cfg = _with_name(tmp_path, "default.toml", str(tmp_path / "elsewhere"))
    out = subprocess.run([sys.executable, "-m", "samflow.sweep", str(cfg)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "name: " in lines[0] and "plain folder name" in lines[0], out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]  # no folder made, here or there


@pytest.mark.parametrize("config, task", [("cnn_mnist.toml", "binary"), ("cnn_study.toml", "mnist")])
@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "a\u200bb", "\u03b1", "a b"])
def test_a_task_name_follows_the_same_rule(tmp_path, config, task, name):
    from samflow.config import NAME_RULE

    src = (ROOT / "configs" / config).read_text()
    line = f'name = "{task}"'
    assert src.count(line) == 1
    path = tmp_path / "c.toml"
    path.write_text(src.replace(line, f"name = {name!r}".replace("'", '"')))
    with pytest.raises(ConfigError) as err:
        LOADERS[config](path)
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: tasks.0.name: not a plain folder name, got {name!r} ("), lines
    assert lines[0].endswith(NAME_RULE)
