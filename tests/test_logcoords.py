"""Log coordinates x = log|W| (SolverSettings(coords="log"), flows.log_velocity).

The log field is checked against the linear one (dx = dW / W), the log solver
against the linear solver and against an exact invariant of the balanced depth-2
l2-SAM flow that holds however small a coordinate gets.
"""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import samflow as sf
from samflow.config import ConfigError, SweepConfig, parse_config, read_toml
from samflow.flows import Method, log_coords_eligible, log_velocity, real_time_velocity, rescaled_velocity
from samflow.sweep import main as sweep_main
from samflow.sweep import run_sweep

from helpers import N_SAVE

MU = [0.2, 0.4, 0.6, 0.8, 1.0]


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("method", ["gd", "l2", "usam"])
def test_log_field_is_dW_over_W(depth, method, loss, rng):
    data = sf.single_sample(MU)
    m = Method.parse(method)
    for _ in range(10):
        W = np.exp(rng.normal(0.0, 1.0, (depth, 5)))
        sign = np.ones((depth, 5))
        if depth >= 2:  # a sign pattern with positive layer products
            sign[0, 1] = sign[1, 1] = -1.0
        W = W * sign
        rho = float(np.exp(rng.normal()))
        x = jnp.log(jnp.abs(W))
        dx, _ = log_velocity(x, jnp.asarray(sign), rho, m, data, loss, rescaled=False)
        dW = np.asarray(real_time_velocity(jnp.asarray(W), rho, m, data, loss))
        np.testing.assert_allclose(dx, dW / W, rtol=1e-11, atol=0)
        dx_tau, log_rate = log_velocity(x, jnp.asarray(sign), rho, m, data, loss, rescaled=True)
        dW_tau, log_rate_ref = rescaled_velocity(jnp.asarray(W), rho, m, data, loss)
        np.testing.assert_allclose(dx_tau, np.asarray(dW_tau) / W, rtol=1e-11, atol=0)
        np.testing.assert_allclose(log_rate, log_rate_ref, rtol=1e-12, atol=1e-300)


def test_eligibility():
    data = sf.single_sample([1.0, -2.0])
    ok = np.array([[1.0, 1.0], [1.0, -1.0]])  # layer products (+, -) have the signs of mu
    assert log_coords_eligible(ok, data, "l2")
    assert not log_coords_eligible(np.abs(ok), data, "l2")  # beta_2 > 0 against mu_2 < 0: it crosses 0
    assert not log_coords_eligible(ok, data, "linf")
    assert not log_coords_eligible(np.array([[1.0, 0.0], [1.0, -1.0]]), data, "gd")
    two = sf.Dataset.from_arrays(np.array([[1.0, 2.0], [-1.0, 1.0]]), np.array([1.0, -1.0]))
    assert not log_coords_eligible(ok, two, "gd")
    with pytest.raises(ValueError, match="coords"):
        sf.solve("linf", data, alpha=0.5, rho=0.1, ts=np.linspace(0.1, 1, N_SAVE),
                 settings=sf.SolverSettings(coords="log"))
    with pytest.raises(ValueError, match="coords"):
        sf.SolverSettings(coords="polar")


def test_log_solver_matches_linear_solver():
    """Real time, depth 2, l2-SAM across the three regimes (collapses included)."""
    data = sf.single_sample(MU)
    ts = np.logspace(-2, 3, N_SAVE)
    rho = np.array([0.01, 0.01, 0.01, 1.0, 1.0, 1.0])
    alpha = np.array([0.2, 0.5, 2.0, 0.25, 0.6, 3.0]) * rho
    lin = sf.solve("l2", data, alpha=alpha, rho=rho, ts=ts, settings=sf.SolverSettings(coords="linear", reduce="off"), alpha_batched=True)
    log = sf.solve("l2", data, alpha=alpha, rho=rho, ts=ts, settings=sf.SolverSettings(coords="log", reduce="off"), alpha_batched=True)
    np.testing.assert_array_equal(log.status, lin.status)
    assert (lin.status == sf.Status.COLLAPSED).sum() == 2  # the two smallest alpha/rho
    coll = lin.status == sf.Status.COLLAPSED
    np.testing.assert_allclose(log.event_t[coll], lin.event_t[coll], rtol=1e-6)
    np.testing.assert_allclose(log.collapse_direction[coll], lin.collapse_direction[coll], atol=1e-6)
    # beta away from the collapse (where beta ~ (t* - t)^2 magnifies any timing error)
    far = ts[None, :] < np.where(coll, 0.9 * lin.event_t, np.inf)[:, None]
    nb = np.linalg.norm(lin.beta, axis=-1)
    err = np.linalg.norm(log.beta - lin.beta, axis=-1) / np.where(nb > 0, nb, 1.0)
    assert np.max(err[far]) < 1e-6
    # log coordinates follow the same flow in fewer steps where a collapse is near
    assert np.sum(log.num_steps[coll]) < 0.8 * np.sum(lin.num_steps[coll])


def test_tiny_coordinate_keeps_its_relative_accuracy():
    """Balanced depth-2 l2-SAM: d log w_j / dtau = mu_j - c mu_j^2 with c common to
    all j (docs/theory.md s.3), so for mu = (.2, .4, .6, .8, 1),
    I = log w_5 - 2.5 log w_4 + (5/3) log w_3 is constant along the flow. Start w_5
    at 1e-300: it sinks below 1e-304 and climbs back by 130 orders of magnitude; in
    log coordinates I stays put to 1e-7 (in linear ones w_5 is far below atol)."""
    data = sf.single_sample(MU)
    ts = np.linspace(1.0, 300.0, N_SAVE)
    alpha = np.array([0.4, 0.4, 0.4, 0.4, 1e-300])
    out = sf.solve("l2", data, alpha=alpha, rho=1.0, ts=ts, clock="tau",
                   settings=sf.SolverSettings(coords="log"))
    w = out.W[:, 0, :]
    ok = np.isfinite(w).all(-1)
    assert ok.sum() >= N_SAVE // 2
    logw = np.log(np.abs(w[ok]))
    inv = logw[:, 4] - 2.5 * logw[:, 3] + (5.0 / 3.0) * logw[:, 2]
    inv0 = np.log(1e-300) - 2.5 * np.log(0.4) + (5.0 / 3.0) * np.log(0.4)
    assert np.max(np.abs(inv - inv0)) < 1e-7 * abs(inv0)
    assert np.min(np.abs(w[ok, 4])) < 1e-304 and np.max(np.abs(w[ok, 4])) > 1e-200
    # the balanced init stays balanced
    np.testing.assert_allclose(out.W[ok, 1, :], out.W[ok, 0, :], rtol=1e-12)


def _coords_config() -> dict:
    raw = read_toml(Path(__file__).parent.parent / "configs" / "default.toml")
    raw["grid"]["alpha"] = [0.2, 0.5, 2.0]
    raw["time"]["num"] = N_SAVE
    raw["methods"] = ["l2"]
    raw["solver"]["coords"] = "log"
    return raw


@pytest.mark.slow  # two sweeps; the refusals below run by default
def test_sweep_config_coords_key(tmp_path):
    raw = _coords_config()
    ds = run_sweep(SweepConfig.model_validate(raw), progress=False)
    raw["solver"]["coords"] = "linear"
    ds_lin = run_sweep(SweepConfig.model_validate(raw), progress=False)
    np.testing.assert_array_equal(ds["status"].values, ds_lin["status"].values)
    assert int((ds["status"].values == int(sf.Status.COLLAPSED)).sum()) == 1


def test_sweep_config_coords_key_refusals():
    raw = _coords_config()
    raw["methods"] = ["l2", "linf"]
    raw["solver"]["coords"] = "log"
    with pytest.raises(ConfigError, match="solver.coords = 'log' does not apply to linf"):
        parse_config(raw)
    raw["methods"] = ["l2"]
    raw["data"]["mu"] = [0.5, -1.0]
    with pytest.raises(ConfigError, match="mu_j >= 0"):
        parse_config(raw)


def test_cli_refuses_log_coords_for_linf_before_writing(tmp_path, capsys):
    """From a fresh-user run: the error came after the output folder was made."""
    text = (Path(__file__).parent.parent / "configs" / "default.toml").read_text()
    text = text.replace('coords = "linear"', 'coords = "log"')
    cfg = tmp_path / "logc.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    assert sweep_main([str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "logc.toml" in err[0] and "linf" in err[0]
    assert not out.exists()
