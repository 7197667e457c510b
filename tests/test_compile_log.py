"""scripts/compile_log.py: the plugin logs each XLA compilation once, with its program and
test, and the summary adds them up (totals, programs compiled again, the largest)."""

import importlib.util
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("compile_log", ROOT / "scripts" / "compile_log.py")
compile_log = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_log)


def test_the_plugin_logs_a_compilation_once_with_its_program(tmp_path, monkeypatch):
    from jax._src import compiler

    monkeypatch.setattr(compiler, "compile_or_get_cached", compiler.compile_or_get_cached)  # restored after
    monkeypatch.setenv("SAMFLOW_COMPILE_LOG", str(tmp_path))
    compile_log.pytest_configure(None)

    def a_program_of_this_test(x):
        return jnp.sin(x) * 3.0 + 1.0

    f = jax.jit(a_program_of_this_test)
    f(jnp.arange(7.0)).block_until_ready()
    f(jnp.arange(7.0) + 1).block_until_ready()  # the same shape: no second compilation
    rows = [json.loads(line) for p in tmp_path.glob("*.jsonl") for line in p.read_text().splitlines()]
    mine = [r for r in rows if "a_program_of_this_test" in r["name"]]
    assert len(mine) == 1
    assert mine[0]["test"].startswith("tests/test_compile_log.py::test_the_plugin_logs")
    assert mine[0]["seconds"] > 0 and mine[0]["lines"] > 3 and len(mine[0]["fingerprint"]) == 16


def test_the_summary_adds_up_the_logs(tmp_path):
    rows = {
        "1.jsonl": [dict(test="tests/test_a.py::t1 (call)", name="jit_f", fingerprint="a" * 16, lines=100, seconds=2.0),
                    dict(test="tests/test_a.py::t2 (call)", name="jit_g", fingerprint="b" * 16, lines=10, seconds=0.5)],
        "2.jsonl": [dict(test="tests/test_b.py::t3 (call)", name="jit_f", fingerprint="a" * 16, lines=100, seconds=1.5)],
    }
    for name, rs in rows.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rs))
    text = compile_log.summarize(tmp_path, top=5)
    assert "3 compilations in 2 processes: 4 s of XLA compilation" in text
    assert "2 distinct programs; compiling one again (another test or worker had it) cost 2 s" in text
    assert "2 compilations over 1 s: 4 s" in text
    assert text.index("tests/test_a.py") < text.index("tests/test_b.py")  # 2.5 s before 1.5 s
    assert "   2.00     100  jit_f  tests/test_a.py::t1" in text
    assert compile_log.main([str(tmp_path / "missing")]) == 2
    # A line cut short (a killed worker) or not the plugin's is counted and left out, not a traceback.
    (tmp_path / "3.jsonl").write_text('{"test": "x", "name": "jit_h", "fing\n{"a": 1}\n')
    text = compile_log.summarize(tmp_path, top=5)
    assert "3 compilations in 3 processes" in text and "2 unreadable lines left out" in text


def test_a_log_folder_that_is_a_file_is_one_warning(tmp_path, monkeypatch):
    from jax._src import compiler

    before = compiler.compile_or_get_cached
    monkeypatch.setattr(compiler, "compile_or_get_cached", before)
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("SAMFLOW_COMPILE_LOG", str(tmp_path / "f"))
    with pytest.warns(UserWarning, match="is not a folder it can write"):
        compile_log.pytest_configure(None)
    assert compiler.compile_or_get_cached is before
