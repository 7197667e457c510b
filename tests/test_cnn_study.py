"""The CNN study (issue 16): the faint-patch ground truth, the run loop's
marks (stuck, non-finite), rho = 0 SAM == GD, the t-intervals, resume and the
command line. Small problems on scikit-learn's 8x8 digits; the --quick run of
the shipped config is marked slow."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import samflow  # noqa: F401  (float64 on: the CNN must stay float32 regardless)
from samflow.config import ConfigError
from samflow.datasets import faint_patch_images, faint_patch_masks

ROOT = Path(__file__).resolve().parent.parent
EXTRA = 'the optional "images" extra is not installed (pip install -e ".[images]")'


def need(module: str):
    return pytest.importorskip(module, reason=f"{module}: {EXTRA}")


# ---------------------------------------------------------------- the ground-truth generator


def test_faint_patch_sits_at_the_label_place_with_the_given_contrast(rng):
    imgs = rng.uniform(0, 1, size=(4, 10, 12)).astype(np.float32)
    imgs[:, :3, :] = 0.0  # background where the patches go
    y = np.array([-1.0, 1.0, 1.0, -1.0])
    out = faint_patch_images(imgs, y, contrast=0.25, size=3)
    masks = faint_patch_masks((10, 12), 3)
    assert masks.shape == (2, 10, 12) and masks[0, :3, :3].all() and masks[1, :3, 9:].all() and masks.sum() == 18
    for i, lab in enumerate(y):
        here, there = masks[int(lab > 0)], masks[int(lab < 0)]
        np.testing.assert_array_equal(out[i][here], 0.25)
        np.testing.assert_array_equal(out[i][there], 0.0)
        np.testing.assert_array_equal(out[i][~here], imgs[i][~here])  # the strokes are untouched
    # interventions: swap moves the patch, contrast 0 removes it, strokes=False keeps only it
    swapped = faint_patch_images(imgs, y, contrast=0.25, size=3, swap=True)
    np.testing.assert_array_equal(swapped, faint_patch_images(imgs, -y, contrast=0.25, size=3))
    np.testing.assert_array_equal(faint_patch_images(imgs, y, contrast=0.0), imgs)
    alone = faint_patch_images(imgs, y, contrast=0.25, strokes=False)
    np.testing.assert_array_equal(alone, np.where(masks[(y > 0).astype(int)], 0.25, 0.0))
    # under a bright stroke the pixel keeps the stroke: max(digit, contrast)
    imgs[0, 0, 0] = 0.9
    assert faint_patch_images(imgs, y, contrast=0.25)[0, 0, 0] == np.float32(0.9)
    # seeded noise: same seed same images, clipped to [0, 1]
    a = faint_patch_images(imgs, y, noise=0.1, seed=3)
    np.testing.assert_array_equal(a, faint_patch_images(imgs, y, noise=0.1, seed=3))
    assert a.min() >= 0 and a.max() <= 1 and not np.array_equal(a, faint_patch_images(imgs, y, noise=0.1, seed=4))


@pytest.mark.parametrize(
    "kw, pattern",
    [
        (dict(contrast=1.5), r"contrast must be in \[0, 1\]"),
        (dict(noise=-1.0), r"noise must be a finite number >= 0"),
        (dict(size=7), r"size must be an integer in 1\.\.6"),
        (dict(y=np.array([0.0, 1.0])), r"y must hold 2 labels, each -1 or \+1"),
        (dict(images=np.zeros((2, 12))), r"images must have shape \(n, H, W\)"),
    ],
)
def test_faint_patch_bad_input_is_one_line(kw, pattern):
    args = dict(images=np.zeros((2, 10, 12)), y=np.array([-1.0, 1.0]))
    args.update(kw)
    with pytest.raises(ValueError, match=pattern):
        faint_patch_images(args.pop("images"), args.pop("y"), **args)


# ---------------------------------------------------------------- a tiny study on the 8x8 digits


def _tiny(**over) -> dict:
    raw = {
        "name": "tiny",
        "seeds": [0, 1],
        "data": {"dataset": "digits", "classes": [0, 1], "downsample": 1, "limit": 120, "test_fraction": 0.5},
        "tasks": [{"name": "digits", "kind": "digits"}, {"name": "faint", "kind": "faint", "contrast": 0.3, "patch": 2}],
        "model": {"channels": [4, 4], "strides": [1, 2]},
        "train": {"methods": ["gd", "sam_l2"], "alphas": [2.0], "rhos": [0.05], "epochs": 3, "learning_rate": 0.3},
        "measure": {"epochs": [0, 1, 2, 3], "bands": {"early": 1, "middle": 2, "late": 3}, "num_images": 16,
                    "rho0_epochs": 0},
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            raw[k] = {**raw[k], **v}
        else:
            raw[k] = v
    return raw


def _cfg(**over):
    from samflow.experiments.cnn_study_config import parse_study_config

    return parse_study_config(_tiny(**over), "tiny.toml")


def _setup(cfg, task_index=0, seed=0, alpha=2.0):
    import equinox as eqx
    import jax.random as jr

    from samflow.experiments import cnn_study as cs
    from samflow.experiments.convnet import make_convnet, scale_init

    a = cs.task_arrays(cfg.data, cfg.tasks[task_index], cs._digits(cfg.data), seed)
    base = make_convnet(1, 1, channels=cfg.model.channels, strides=cfg.model.strides, key=jr.PRNGKey(seed))
    params, static = eqx.partition(scale_init(base, alpha), eqx.is_inexact_array)
    return a, params, static


_COMPILED: dict = {}


def _train(cfg, a, params, static, method, *, lr=None, rho=0.05, epochs=None, measured=None, batch_size=0, seed=0):
    """`train_run` with the step and measurement compiled once per (method, lr) (every model here shares `static`'s shape)."""
    from samflow.experiments import cnn_study as cs

    lr = lr if lr is not None else cfg.train.learning_rate
    epochs = epochs if epochs is not None else cfg.train.epochs
    key = (method, lr, tuple(cfg.model.channels))
    if key not in _COMPILED:
        _COMPILED[key] = cs._make_step(static, method, lr)
    if "m" not in _COMPILED:
        _COMPILED["m"] = cs._make_measure(static)
    return cs.train_run(
        _COMPILED[key], _COMPILED["m"], params,
        cs._optimizer(method, lr, rho).init(params), a, rho=rho, epochs=epochs,
        measured=measured or [0, epochs], batch_size=batch_size, seed=seed, threshold=0.5, n_cam=8, stuck_tol=0.01,
    )


def test_task_arrays_interventions_are_the_generator_normalized():
    """The held-out inputs are one affine map (the training mean / std) of the
    generator's images: clean, patch removed, strokes removed, patch swapped."""
    need("sklearn")
    need("optax")
    cfg = _cfg()
    a = _setup(cfg, task_index=1)[0]
    x, raw, y = a["x_test"][:, 0].ravel(), a["raw_test"].ravel(), a["y_test"]
    slope, shift = np.polyfit(x, raw, 1)
    assert slope > 0
    back = lambda k: slope * a[k][:, 0] + shift  # noqa: E731
    np.testing.assert_allclose(back("x_test"), a["raw_test"], atol=1e-5)
    digits = back("x_no_faint")
    assert digits.min() > -1e-5 and digits.max() < 1 + 1e-5
    kw = dict(contrast=0.3, size=2)
    np.testing.assert_allclose(faint_patch_images(digits, y, **kw), a["raw_test"], atol=1e-5)
    np.testing.assert_allclose(back("x_no_strokes"), faint_patch_images(digits, y, strokes=False, **kw), atol=1e-5)
    np.testing.assert_allclose(back("x_swap"), faint_patch_images(digits, y, swap=True, **kw), atol=1e-5)
    assert a["patch"].sum() == 8 and a["x_train"].dtype == np.float32
    # a "digits" task has no patch: every variant is the clean image
    b = _setup(cfg, task_index=0)[0]
    for k in ("x_no_faint", "x_no_strokes", "x_swap"):
        np.testing.assert_array_equal(b[k], b["x_test"])


def test_the_faint_feature_alone_is_learnable():
    """Trained on the patch alone (strokes removed), GD classifies held-out
    images and follows a swapped patch: the faint feature carries the label."""
    need("sklearn")
    need("optax")
    cfg = _cfg(tasks=[{"name": "fo", "kind": "faint_only", "contrast": 0.3, "patch": 2}])
    a, params, static = _setup(cfg)
    run = _train(cfg, a, params, static, "gd", lr=0.5, epochs=40)
    assert run["status"] == "ok", run["message"]
    assert run["test_accuracy"][-1] == 1.0 and run["follow_faint"][-1] == 1.0
    assert run["acc_no_strokes"][-1] == 1.0  # no strokes to remove
    assert run["train_loss"][-1] < 0.5 * math.log(2)
    assert run["minor_share"][-1] == 1.0  # every pixel is minor (raw intensity <= 0.3 < 0.5)


@pytest.mark.parametrize("method", ["sam_l2", "sam_linf"])
def test_sam_at_rho_zero_gives_gds_parameters_exactly(method):
    need("sklearn")
    need("optax")
    import jax

    cfg = _cfg()
    a, params, static = _setup(cfg, task_index=1)
    gd = _train(cfg, a, params, static, "gd", rho=0.0, epochs=4, measured=[0, 2, 4])
    sam = _train(cfg, a, params, static, method, rho=0.0, epochs=4, measured=[0, 2, 4])
    for u, v in zip(jax.tree_util.tree_leaves(gd["final_params"]), jax.tree_util.tree_leaves(sam["final_params"])):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    np.testing.assert_array_equal(gd["train_loss"], sam["train_loss"])
    np.testing.assert_array_equal(gd["minor_share"], sam["minor_share"])
    # and with rho > 0 SAM differs (the check can fail)
    other = _train(cfg, a, params, static, method, rho=0.05 if method == "sam_l2" else 0.01, epochs=4)
    assert not np.array_equal(other["train_loss"], gd["train_loss"][[0, 2]])


def test_a_run_going_non_finite_stops_with_one_line_and_no_metric():
    """A NaN in the training data makes step 1 non-finite; an init scale that
    overflows float32 makes the epoch-0 logits infinite: each run stops with
    one line, status "nonfinite", and no metric from a non-finite model."""
    need("sklearn")
    need("optax")
    cfg = _cfg()
    a, params, static = _setup(cfg)
    poisoned = dict(a, x_train=a["x_train"].copy())
    poisoned["x_train"][0, 0, 0, 0] = np.nan
    run = _train(cfg, poisoned, params, static, "sam_l2", epochs=6, measured=[3, 6])
    assert run["status"] == "nonfinite" and run["message"] == "the loss or a parameter became non-finite at step 1"
    assert np.isnan(run["train_loss"]).all() and np.isnan(run["minor_share"]).all()
    a2, params2, static2 = _setup(cfg, alpha=1e13)  # f ~ alpha^3 overflows float32
    run = _train(cfg, a2, params2, static2, "gd", epochs=2)
    assert run["status"] == "nonfinite" and run["message"] == "a logit, loss or Grad-CAM map is not finite at epoch 0"
    assert np.isnan(run["test_accuracy"]).all()


def test_a_run_that_never_leaves_log2_is_marked_stuck():
    need("sklearn")
    need("optax")
    cfg = _cfg()
    a, params, static = _setup(cfg, alpha=0.05)  # f ~ alpha^3: the loss sits at log 2
    run = _train(cfg, a, params, static, "gd", epochs=3)
    assert run["status"] == "stuck" and "never went below log 2" in run["message"]
    assert abs(run["train_loss"][-1] - math.log(2)) < 1e-3
    ok = _train(cfg, a, *_setup(cfg, alpha=2.0)[1:], "gd", lr=0.5, epochs=30)
    assert ok["status"] == "ok"


@pytest.mark.slow
def test_sgd_batch_order_comes_from_the_seed():
    """batch_size > 0: SGD over a permutation drawn from (seed, epoch): the same
    seed repeats the run exactly, another seed or full batch differs."""
    need("sklearn")
    need("optax")
    cfg = _cfg()
    a, params, static = _setup(cfg)
    kw = dict(epochs=2, measured=[0, 2])
    one = _train(cfg, a, params, static, "sam_l2", batch_size=20, seed=5, **kw)
    again = _train(cfg, a, params, static, "sam_l2", batch_size=20, seed=5, **kw)
    other = _train(cfg, a, params, static, "sam_l2", batch_size=20, seed=6, **kw)
    full = _train(cfg, a, params, static, "sam_l2", batch_size=len(a["x_train"]), seed=5, **kw)
    full0 = _train(cfg, a, params, static, "sam_l2", batch_size=0, seed=5, **kw)
    np.testing.assert_array_equal(one["train_loss"], again["train_loss"])
    assert one["train_loss"][-1] != other["train_loss"][-1] and one["train_loss"][-1] != full["train_loss"][-1]
    np.testing.assert_array_equal(full["train_loss"], full0["train_loss"])  # a batch of n is full batch


def test_t_interval_matches_scipy_and_leaves_out_nans():
    from scipy import stats

    from samflow.experiments.cnn_study import t_interval

    v = np.array([[0.1, 0.5], [0.3, np.nan], [0.2, np.nan], [0.6, 0.7]])
    mean, half, n = t_interval(v, axis=0)
    lo, hi = stats.t.interval(0.95, 3, loc=v[:, 0].mean(), scale=stats.sem(v[:, 0]))
    np.testing.assert_allclose([mean[0] - half[0], mean[0] + half[0]], [lo, hi])
    lo, hi = stats.t.interval(0.95, 1, loc=0.6, scale=stats.sem([0.5, 0.7]))
    np.testing.assert_allclose([mean[1] - half[1], mean[1] + half[1]], [lo, hi])
    assert list(n) == [4, 2]
    m1, h1, n1 = t_interval(np.array([[0.4], [np.nan]]), axis=0)
    assert m1[0] == 0.4 and np.isnan(h1[0]) and n1[0] == 1  # one seed: no interval


def _fake_results(cfg, values: dict, statuses: dict | None = None):
    """Results of every planned run with train_loss = minor_share = values[(method, seed)]."""
    from samflow.experiments import cnn_study as cs

    out = {}
    E = len(cfg.measured_epochs())
    for task, method, alpha, rho, seed in cfg.plan().runs:
        v = values[(method, seed)]
        run = {k: np.full(E, v) for k in cs.METRICS}
        run.update(status=(statuses or {}).get((method, seed), "ok"), message="", wall_s=1.0)
        out[cs._run_id(task.name, method, alpha, rho, seed)] = run
    return out


def test_summary_leaves_stuck_seeds_out_and_compares_intervals():
    from samflow.experiments import cnn_study as cs

    cfg = _cfg(seeds=[0, 1, 2], train={"rhos": [0.05, 0.1]})
    vals = {("gd", 0): 0.50, ("gd", 1): 0.52, ("gd", 2): 0.51,
            ("sam_l2", 0): 0.80, ("sam_l2", 1): 0.82, ("sam_l2", 2): 0.10}
    ds = cs.assemble(cfg.plan(), _fake_results(cfg, vals, {("sam_l2", 2): "stuck"}))
    assert ds.minor_share.dims == ("seed", "task", "optimizer", "alpha", "rho", "epoch")
    # GD (no rho) is stored at every rho
    np.testing.assert_array_equal(ds.minor_share.sel(optimizer="gd", rho=0.05), ds.minor_share.sel(optimizer="gd", rho=0.1))
    s = cs.summarize(ds)
    c = s.sel(task="faint", optimizer="sam_l2", alpha=2.0, rho=0.1, epoch=3)
    assert int(c.n_ok) == 2 and int(c.n_stuck) == 1 and int(c.n_run) == 3
    assert float(c.minor_share_mean) == pytest.approx(0.81)  # the stuck seed's 0.10 is not averaged in
    assert cs.compare(s, "faint", "sam_l2", 0.1, 2.0, 3) == ">"
    # paired by seed, over the seeds where both are ok: 0.80 - 0.50, 0.82 - 0.52
    assert int(c.n_paired) == 2 and float(c.minor_share_diff_mean) == pytest.approx(0.30)
    assert float(c.minor_share_diff_half) == pytest.approx(0.0, abs=1e-9)
    assert cs.compare_paired(s, "faint", "sam_l2", 0.1, 2.0, 3) == "+0.300 ± 0.000 ▲"
    table = cs.format_tables(ds)
    assert "| l2-SAM | 0.1 | 2 | " in table and "2/3 (1 stuck)" in table and "| faint | l2-SAM | 0.1 | > / > / > |" in table
    # overlapping intervals: "="
    vals2 = dict(vals)
    vals2.update({("sam_l2", 0): 0.40, ("sam_l2", 1): 0.62, ("sam_l2", 2): 0.55})
    s2 = cs.summarize(cs.assemble(cfg.plan(), _fake_results(cfg, vals2)))
    assert cs.compare(s2, "faint", "sam_l2", 0.1, 2.0, 3) == "="
    with pytest.raises(TypeError, match=r"cfg\.plan\(\)"):  # 0.2's argument: one line naming the call
        cs.assemble(cfg, _fake_results(cfg, vals2))


@pytest.mark.parametrize(
    "over, pattern",
    [
        (dict(measure={"bands": {"early": 2, "middle": 2, "late": 3}}), r"measure\.bands: .*early < middle < late"),
        (dict(measure={"epochs": [0, 1, 3]}), r"measure\.bands \{'middle': 2\} are not measured epochs"),
        (dict(train={"rhos": [0.1, 0.05]}), r"train\.rhos: .*strictly increasing"),
        (dict(seeds=[1, 1]), r"seeds: .*must not repeat"),
        (dict(tasks=[{"name": "t", "kind": "faint", "contrast": 0.0}]), r"tasks\.0\.contrast"),
        (dict(train={"methods": ["adam"]}), r"train\.methods\.0: Input should be 'gd', 'sam_l2' or 'sam_linf'"),
        (dict(measure={"epochs": [0, 1, 2, 9]}), r"measure\.epochs goes to 9, past train\.epochs = 3"),
        # 8x8 digits pooled by 2 are 4x4: two 3-pixel patches do not fit side by side.
        # Before: validated, then faint_patch_masks raised mid-study (a traceback).
        (dict(data={"downsample": 2}, tasks=[{"name": "f", "kind": "faint", "patch": 3}]),
         r"tasks\.0\.patch: two patches of 3 pixels do not fit side by side in the 4 x 4 images"),
    ],
)
def test_bad_study_config_one_line_naming_the_field(over, pattern):
    with pytest.raises(ConfigError) as err:
        _cfg(**over)
    assert re.search(pattern, str(err.value)), str(err.value)
    assert all(line.startswith("tiny.toml: ") for line in str(err.value).splitlines())


def test_study_image_side_is_the_pooled_digits_side():
    from samflow.experiments import cnn_study as cs

    for k in (1, 2):
        cfg = _cfg(data={"downsample": k})
        assert cs._digits(cfg.data).images.shape[1:3] == (cfg.image_side(), cfg.image_side()) == (8 // k, 8 // k)


def test_shipped_study_config_and_its_quick_variant():
    from samflow.experiments import cnn_study_config
    from samflow.experiments.cnn_study_config import load_study_config

    cfg = load_study_config(ROOT / "configs" / "cnn_study.toml")
    assert len(cfg.seeds) >= 5 and len(cfg.train.alphas) >= 6 and len(cfg.train.rhos) >= 3
    assert set(cfg.train.methods) == {"gd", "sam_l2", "sam_linf"}
    assert {t.kind for t in cfg.tasks} == {"digits", "faint", "faint_only"}
    q = cfg.quick()
    assert len(q.seeds) == 2 and len(q.train.alphas) == 2 and len(q.train.rhos) == 1 and q.train.epochs == 6
    assert q.train.alphas[0] in cfg.train.alphas and q.name == "cnn_study_quick"
    # quick(cfg), 0.2's name, still works in 0.3 and says the method's name.
    assert "quick" not in cnn_study_config.__all__
    with pytest.warns(FutureWarning, match=r"^samflow\.experiments\.cnn_study_config\.quick\(cfg\) is now the method "
                                           r"StudyConfig\.quick\(\) \(cfg\.quick\(\)\); the old name goes in the release after 0\.3$"):
        assert cnn_study_config.quick(cfg) == q


def test_cli_bad_config_and_resume_without_flag_are_one_line_exit_2(tmp_path, capsys):
    from samflow.experiments import cnn_study as cs

    bad = tmp_path / "bad.toml"
    bad.write_text('seeds = [0]\n[[tasks]]\nname = "t"\n[train]\nalphas = [1.0]\nrhos = [0.1]\nlearning_rat = 1\n'
                   '[measure]\nepochs = [0]\nbands = {early = 0, middle = 1, late = 2}\n')
    assert cs.main([str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "train.learning_rat: unknown key (did you mean 'learning_rate'?)" in err and "Traceback" not in err
    assert cs.main([str(tmp_path / "none.toml")]) == 2
    assert cs.main([str(bad), "--resume", "--overwrite"]) == 2
    assert "exclude each other" in capsys.readouterr().err


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def _write_tiny(tmp_path, **over) -> Path:
    """The tiny config as a TOML file (a minimal writer: no TOML writer is a dependency)."""
    raw = _tiny(**over)
    lines = [f"{k} = {_toml_value(v)}" for k, v in raw.items() if not isinstance(v, (dict, list)) or k == "seeds"]
    for k, v in raw.items():
        if k == "tasks":
            for t in v:
                lines += ["[[tasks]]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in t.items()]
        elif isinstance(v, dict):
            lines += [f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    p = tmp_path / "tiny.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.slow
def test_resume_reruns_only_missing_runs_and_gives_the_same_results(tmp_path, capsys):
    """Runs the tiny study, deletes one run, resumes: one run is redone and
    every number is the same; another config in the same folder is refused."""
    need("sklearn")
    need("optax")
    from samflow.experiments import cnn_study as cs
    from samflow.store import read_results

    cfg = _write_tiny(tmp_path, train={"methods": ["gd", "sam_linf"]})
    out = tmp_path / "out"
    assert cs.main([str(cfg), "--out", str(out), "--quiet", "--no-figures"]) == 0
    first = read_results(out / "results.nc")
    runs = sorted((out / "runs").rglob("*.npz"))
    from samflow.store import code_stamp

    stamp = code_stamp(cs.STAMP_EXTRA)  # in the results, the runs folder and every run
    assert first.attrs["code_stamp"] == stamp
    assert json.loads((out / "runs" / "fingerprint.json").read_text())["code_stamp"] == stamp
    with np.load(runs[0]) as z:
        assert str(z["code_stamp"]) == stamp
    assert len(runs) == 2 * 2 * 2  # tasks x seeds x (gd + one rho)
    assert cs.main([str(cfg), "--out", str(out), "--quiet"]) == 2  # results exist: refuses without a flag
    assert "--resume" in capsys.readouterr().err
    runs[0].unlink()
    stamps = {p: p.stat().st_mtime_ns for p in runs[1:]}
    assert cs.main([str(cfg), "--out", str(out), "--quiet", "--no-figures", "--resume"]) == 0
    assert runs[0].exists() and all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    second = read_results(out / "results.nc")
    for k in cs.METRICS:
        np.testing.assert_array_equal(first[k].values, second[k].values)
    other = _write_tiny(tmp_path, train={"methods": ["gd", "sam_linf"], "epochs": 4},
                        measure={"epochs": [0, 1, 2, 4], "bands": {"early": 1, "middle": 2, "late": 4}})
    assert cs.main([str(other), "--out", str(out), "--quiet", "--resume"]) == 2
    assert "holds runs of another config" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_mode_of_the_shipped_config_end_to_end(tmp_path, capsys):
    """`--quick` on configs/cnn_study.toml: every output, with the netCDF's dims
    and a rho = 0 check of exactly 0 (the issue's smoke test, < 2 min)."""
    need("mlxtend")
    need("optax")
    from samflow.experiments import cnn_study as cs
    from samflow.store import read_results

    out = tmp_path / "q"
    assert cs.main([str(ROOT / "configs" / "cnn_study.toml"), "--quick", "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    for f in ("results.nc", "summary.csv", "tables.md", "minor_share_vs_alpha.png", "minor_share_difference.png",
              "ground_truth.png", "curves.png"):
        assert (out / f).is_file(), f
    assert not list(out.glob("*.tmp"))
    ds = read_results(out / "results.nc")
    assert dict(ds.sizes) == {"seed": 2, "task": 3, "optimizer": 3, "alpha": 2, "rho": 1, "epoch": 4}
    assert "rho = 0 check: l2-SAM vs GD" in text and "max |theta_SAM - theta_GD| = 0" in text
    rho0 = json.loads(ds.attrs["rho0_check"])
    assert rho0["sam_l2"]["max_abs_diff"] == 0 and rho0["sam_linf"]["max_abs_diff"] == 0
    share = ds.minor_share.values
    assert np.all((share[np.isfinite(share)] >= 0) & (share[np.isfinite(share)] <= 1))
    # epoch 0 is the init: the same for every method and rho of a seed
    ran = ds.status.values >= 0
    e0 = ds.test_loss.isel(epoch=0).values
    for it in range(3):
        for ia in range(2):
            cell = e0[:, it, :, ia, :][:, ran[0, it, :, ia, :]]
            if cell.size:
                np.testing.assert_array_equal(cell, cell[:, :1].repeat(cell.shape[1], 1))


@pytest.mark.parametrize(
    "images, kw, match",
    [
        # 0..255 digits (raw uint8 scale): the patch of contrast 0.3 would be
        # invisible next to strokes of 255, silently; refused instead.
        (np.full((2, 8, 8), 255.0), {}, r"images must hold raw intensities in \[0, 1\]"),
        (np.full((2, 8, 8), np.nan), {}, r"images must hold raw intensities in \[0, 1\]"),
        (np.zeros((2, 8, 8)), {"swap": "no"}, "swap must be True or False"),  # bool("no") swapped
        (np.zeros((2, 8, 8)), {"strokes": 0.0}, "strokes must be True or False"),
    ],
)
def test_faint_patch_images_refuses_what_it_would_get_wrong(images, kw, match):
    with pytest.raises(ValueError, match=match):
        faint_patch_images(images, np.array([1.0, -1.0]), **kw)
    faint_patch_images(np.clip(np.nan_to_num(images), 0, 1), np.array([1.0, -1.0]))  # in range: fine
