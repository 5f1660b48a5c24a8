"""The global objectives of Wang et al. 2025: SogCLR, iSogCLR and NUCLR (digest section 11)."""

import itertools
import math

import pytest
import reference as ref
import torch

from uncurated.objectives import NUCLR, ISogCLR, SogCLR
from uncurated.objectives import functional as F
from uncurated.objectives.engine import ScoreMatrix
from uncurated.objectives.nuclr import log_phi
from uncurated.objectives.stateful import Direction

PAIRINGS = ["cross", "two_view"]


def features(n=6, dim=4, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(n, dim, generator=generator, dtype=dtype)
    b = torch.randn(n, dim, generator=generator, dtype=dtype)
    return a, b


def grads(value, *tensors):
    return torch.autograd.grad(value, tensors)


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("shift", [0.0, 0.3, -0.7])
def test_nuclr_at_full_batch_with_constant_zeta_is_tau_infonce_minus_the_shift(pairing, shift):
    """Digest 11 items 1-2: q~ = n c 1 (zeta = t log(nc)) gives InfoNCE - t log(nc); gradients equal."""
    n, t = 6, 0.2
    a, b = (x.requires_grad_(True) for x in features(n))
    loss = NUCLR(n, temperature=t, pairing=pairing, zeta_init=shift, learn_zeta=False, xi_trick=False, gamma=1.0)
    value = loss(a, b, index=torch.arange(n))
    infonce = t * F.infonce(a, b, temperature=t, pairing=pairing)
    torch.testing.assert_close(value, infonce - shift, rtol=1e-12, atol=1e-12)
    for got, expected in zip(grads(value, a, b), grads(infonce, a, b), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def sogclr_on_the_sum_scale(n, pairing, **options):
    pool = n - 1 if pairing == "cross" else 2 * n - 2
    return SogCLR(n, eps=1.0 / pool, pairing=pairing, **options), pool


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_nuclr_with_zeta_and_xi_zero_reproduces_sogclr(pairing):
    """Digest 11 item 3: same u trajectory (up to the (n-1) scale of phi) and the same gradients."""
    n, batch, t = 12, 4, 0.1
    nuclr = NUCLR(n, temperature=t, pairing=pairing, zeta_init=0.0, xi_init=0.0, learn_zeta=False)
    sogclr, pool = sogclr_on_the_sum_scale(n, pairing, temperature=t)
    a_all, b_all = features(n)
    generator = torch.Generator().manual_seed(1)
    for _ in range(6):
        index = torch.randperm(n, generator=generator)[:batch]
        a, b = a_all[index].requires_grad_(True), b_all[index].requires_grad_(True)
        value_nuclr = nuclr(a, b, index=index)
        value_sogclr = sogclr(a, b, index=index)
        for got, expected in zip(grads(value_nuclr, a, b), grads(value_sogclr, a, b), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(value_nuclr, value_sogclr + t * math.log(pool), rtol=1e-10, atol=1e-12)
    for side in "ab":
        log_u_nuclr = nuclr.state.tensors["log_u", side]
        log_u_sogclr = sogclr.state.tensors["log_u", side]
        torch.testing.assert_close(log_u_nuclr, log_u_sogclr + math.log(pool))


def reference_phi_objective(a, b, zeta, t):
    """Eq. 10/11 for the a-to-b direction at full batch, written out: returns Psi_i per anchor."""
    a, b = ref.unit(a), ref.unit(b)
    similarities = a @ b.T
    logits = (similarities - torch.diagonal(similarities)[:, None] - zeta[None, :]) / t
    return t * torch.logsumexp(logits, dim=1)


def test_nuclr_gradients_at_full_batch_equal_autograd_of_eqs_10_and_11():
    """Digest 11 item 4: B = n, gamma = 1, xi trick off."""
    n, t, lr = 7, 0.3, 0.5
    a, b = (x.requires_grad_(True) for x in features(n, seed=3))
    loss = NUCLR(n, temperature=t, zeta_init=0.0, freeze_epochs=0, xi_trick=False, gamma=1.0, zeta_lr=lr)
    zeta_start = torch.linspace(-0.2, 0.3, n, dtype=torch.float64)
    for side in "ab":
        loss.state.tensors["zeta", side] = zeta_start.clone()
    value = loss(a, b, index=torch.arange(n))

    def psi(a, b, zeta_b, zeta_a):
        forward = reference_phi_objective(a, b, zeta_b, t).mean()
        backward = reference_phi_objective(b, a, zeta_a, t).mean()
        return (forward + backward) / 2

    zeta_a = zeta_start.clone().requires_grad_(True)
    zeta_b = zeta_start.clone().requires_grad_(True)
    expected = psi(a, b, zeta_b, zeta_a)
    torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads(value, a, b), grads(expected, a, b), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # Phi(zeta) = Psi + mean(zeta), per direction; one SGD step from a zero momentum is -lr * G.
    for side, zeta, direction in (("b", zeta_b, (a, b)), ("a", zeta_a, (b, a))):
        phi = reference_phi_objective(*direction, zeta, t).mean() + zeta.mean()
        (autograd_gradient,) = torch.autograd.grad(phi, zeta)
        step = (zeta_start - loss.state.tensors["zeta", side]) / lr
        torch.testing.assert_close(step, autograd_gradient, rtol=1e-10, atol=1e-12)


def test_rescaled_phi_estimator_is_unbiased_over_all_batches():
    """Digest 11 item 5: averaged over every B-subset containing i, phi_i(B) = phi_i."""
    n, batch, t = 6, 3, 0.5
    a, b = (ref.unit(x) for x in features(n, seed=5))
    zeta = torch.linspace(-0.1, 0.2, n, dtype=torch.float64)

    def phi_for(subset):
        subset = torch.tensor(subset)
        scores = ScoreMatrix(a[subset], b[subset], 1 / t, torch.arange(len(subset)), column_offset=zeta[subset] / t)
        direction = Direction(
            scores,
            [("a", subset)],
            [("b", subset)],
            pool=n - 1,
            contrast_size=n,
            batch_anchors=len(subset),
            temperature=t,
        )
        return torch.exp(log_phi(direction))

    full = phi_for(list(range(n)))
    for anchor in range(n):
        estimates = [
            phi_for(subset)[subset.index(anchor)]
            for subset in itertools.combinations(range(n), batch)
            if anchor in subset
        ]
        torch.testing.assert_close(torch.stack(estimates).mean(), full[anchor], rtol=1e-12, atol=1e-12)


def plain_sogclr_step(a, b, u, t, gamma, eps):
    """SogCLR in the linear domain, one direction (a to b), as the papers write it."""
    a, b = ref.unit(a), ref.unit(b)
    similarities = a @ b.T
    batch = a.shape[0]
    off_diagonal = ~torch.eye(batch, dtype=torch.bool)
    exponentials = torch.exp((similarities - torch.diagonal(similarities)[:, None]) / t)
    g = (exponentials * off_diagonal).sum(dim=1) / (batch - 1)
    new_u = torch.where(torch.isnan(u), g.detach(), (1 - gamma) * u + gamma * g.detach())
    surrogate = (t * g / (eps + new_u)).mean()
    value = (t * torch.log(eps + g)).mean()
    return value, surrogate, new_u


def test_log_domain_state_equals_the_plain_linear_form():
    n, batch, t, gamma, eps = 10, 5, 0.1, 0.6, 1e-3
    loss = SogCLR(n, temperature=t, gamma=gamma, eps=eps, direction_reduction="sum")
    plain_u = {side: torch.full((n,), math.nan, dtype=torch.float64) for side in "ab"}
    a_all, b_all = features(n, seed=7)
    generator = torch.Generator().manual_seed(2)
    for _ in range(5):
        index = torch.randperm(n, generator=generator)[:batch]
        a, b = a_all[index].requires_grad_(True), b_all[index].requires_grad_(True)
        value = loss(a, b, index=index)
        plain_forward = plain_sogclr_step(a, b, plain_u["a"][index], t, gamma, eps)
        plain_backward = plain_sogclr_step(b, a, plain_u["b"][index], t, gamma, eps)
        plain_u["a"][index] = plain_forward[2]
        plain_u["b"][index] = plain_backward[2]
        torch.testing.assert_close(value, plain_forward[0] + plain_backward[0], rtol=1e-12, atol=1e-12)
        surrogate = plain_forward[1] + plain_backward[1]
        for got, expected in zip(grads(value, a, b), grads(surrogate, a, b), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    for side in "ab":
        visited = ~torch.isnan(plain_u[side])
        torch.testing.assert_close(torch.exp(loss.state.tensors["log_u", side][visited]), plain_u[side][visited])


@pytest.mark.parametrize("cls", [SogCLR, ISogCLR, NUCLR])
def test_low_temperature_stays_finite_in_float32_where_the_plain_form_overflows(cls):
    n, t = 16, 0.01
    a = torch.randn(n, 8)
    b = -a + 0.01 * torch.randn(n, 8)  # antipodal pairs: every negative beats its positive by ~2/t
    plain_value, _, _ = plain_sogclr_step(a, b, torch.full((n,), math.nan), t, 0.8, 1e-8)
    assert not bool(torch.isfinite(plain_value))
    options = {"freeze_epochs": 0} if cls is NUCLR else {}
    loss = cls(n, temperature=t, **options)
    a.requires_grad_(True)
    value = loss(a, b, index=torch.arange(n))
    (gradient,) = grads(value, a)
    assert bool(torch.isfinite(value)) and bool(torch.isfinite(gradient).all())
    assert all(bool(tensor[tensor > -math.inf].isfinite().all()) for tensor in loss.state.tensors.values())


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_isogclr_temperature_gradient_equals_autograd(pairing):
    """Digest item (7): at B = n, gamma = 1 (u = g), the t_i gradient is d/dt_i [t_i log(eps + g_i) + rho t_i]."""
    n, rho, eps = 6, 0.5, 1e-3
    a, b = features(n, seed=11)
    # Adam pinned: the check reads the gradient out of Adam's first moment.
    loss = ISogCLR(n, temperature=0.3, rho=rho, eps=eps, gamma=1.0, pairing=pairing, temperature_optimizer="adam")
    temperatures = {
        "a": torch.linspace(0.2, 0.5, n, dtype=torch.float64),
        "b": torch.linspace(0.6, 0.3, n, dtype=torch.float64),
    }
    for side in "ab":
        loss.state.tensors["tau", side] = temperatures[side].clone()
    loss(a, b, index=torch.arange(n))
    beta1 = loss.betas[0]
    na, nb = ref.unit(a), ref.unit(b)

    def objective(anchors, candidates, tau, own):
        similarities = anchors @ candidates.T
        d = similarities - similarities.gather(1, own[:, None])
        mask = torch.ones_like(d, dtype=torch.bool)
        mask[torch.arange(len(d)), own] = False
        if pairing == "two_view":
            mask[torch.arange(len(d)), torch.arange(len(d))] = False
        g = (torch.exp(d / tau[:, None]) * mask).sum(dim=1) / mask.sum(dim=1)
        return (tau * torch.log(eps + g) + rho * tau).sum()

    if pairing == "cross":
        cases = [("a", na, nb, torch.arange(n)), ("b", nb, na, torch.arange(n))]
    else:
        views = torch.cat([na, nb])
        own = (torch.arange(2 * n) + n) % (2 * n)
        tau_all = torch.cat([temperatures["a"], temperatures["b"]]).requires_grad_(True)
        (expected,) = torch.autograd.grad(objective(views, views, tau_all, own), tau_all)
        got = torch.cat([loss.state.tensors["tau_m", side] for side in "ab"]) / (1 - beta1)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        return
    for side, anchors, candidates, own in cases:
        tau = temperatures[side].clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(objective(anchors, candidates, tau, own), tau)
        got = loss.state.tensors["tau_m", side] / (1 - beta1)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_isogclr_keeps_temperatures_within_bounds_and_moves_them():
    n = 8
    loss = ISogCLR(n, temperature=0.05, temperature_min=0.04, temperature_max=0.06, temperature_lr=0.5)
    a, b = features(n, dtype=torch.float32)
    for _ in range(3):
        loss.begin_step()  # three steps on one full batch: each step says so (else the repeat is refused)
        loss(a, b, index=torch.arange(n))
    for side in "ab":
        tau = loss.state.tensors["tau", side]
        assert bool(((tau >= 0.04) & (tau <= 0.06)).all())
        assert not torch.allclose(tau, torch.full_like(tau, 0.05))


@pytest.mark.parametrize("cls", [SogCLR, ISogCLR, NUCLR])
@pytest.mark.parametrize("pairing", PAIRINGS)
def test_state_round_trips_through_a_checkpoint_bit_for_bit(cls, pairing, tmp_path):
    n, batch = 10, 4
    options = {"freeze_epochs": 0} if cls is NUCLR else {}
    first = cls(n, pairing=pairing, **options)
    a_all, b_all = features(n, dtype=torch.float32)
    for start in (0, 4, 6):
        index = torch.arange(start, start + batch)
        first(a_all[index], b_all[index], index=index)
    torch.save(first.state_dict(), tmp_path / "state.pt")
    second = cls(n, pairing=pairing, **options)
    second.load_state_dict(torch.load(tmp_path / "state.pt"))
    for key, tensor in first.state.tensors.items():
        assert torch.equal(tensor, second.state.tensors[key]), key
    assert first.state.scalars == second.state.scalars
    index = torch.tensor([1, 5, 8, 9])
    assert torch.equal(first(a_all[index], b_all[index], index=index), second(a_all[index], b_all[index], index=index))
    for key, tensor in first.state.tensors.items():
        assert torch.equal(tensor, second.state.tensors[key]), key


def test_loading_a_state_for_another_dataset_or_with_nan_fails_and_changes_nothing():
    loss = SogCLR(10)
    saved = loss.state_dict()
    with pytest.raises(ValueError, match=r"dataset sizes .* num_samples must match"):
        SogCLR(12).load_state_dict(saved)
    key = next(key for key in saved if key.endswith("_extra_state"))
    saved[key]["tensors"]["log_u/a"] = torch.full((10,), math.nan)
    target = SogCLR(10)
    with pytest.raises(ValueError, match=r"saved log_u values for side 'a' contain NaN or inf"):
        target.load_state_dict(saved)
    assert bool(torch.isneginf(target.state.tensors["log_u", "a"]).all())


def test_bad_indices_are_rejected_before_any_state_changes():
    loss = NUCLR(8, freeze_epochs=0)
    a, b = features(4, dtype=torch.float32)
    before = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    with pytest.raises(ValueError, match=r"index must be in \[0, 8\)"):
        loss(a, b, index=torch.tensor([0, 1, 2, 8]))
    with pytest.raises(ValueError, match=r"index must be in \[0, 8\)"):
        loss(a, b, index=torch.tensor([-1, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"must not repeat a sample"):
        loss(a, b, index=torch.tensor([0, 1, 1, 3]))
    with pytest.raises(ValueError, match=r"one dataset position per pair: 4, got 3"):
        loss(a, b, index=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"1-D integer tensor"):
        loss(a, b, index=torch.zeros(4))
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, before[key])


def test_a_non_finite_update_writes_nothing():
    loss = SogCLR(6)
    state = loss.state
    good = ("log_u", "a", torch.tensor([0, 1]), torch.tensor([0.5, 0.25]))
    bad = ("log_u", "b", torch.tensor([2]), torch.tensor([math.nan]))
    with pytest.raises(ValueError, match=r"new log_u values for side 'b' contain NaN"):
        state.scatter([good, bad])
    assert bool(torch.isneginf(state.tensors["log_u", "a"]).all())


def test_eval_mode_reads_the_state_without_changing_it():
    loss = NUCLR(6, freeze_epochs=0)
    a, b = features(6, dtype=torch.float32)
    loss(a, b, index=torch.arange(6))
    saved = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    loss.eval()
    loss(a, b, index=torch.arange(6))
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, saved[key])


def test_nuclr_freezes_zeta_then_learns_it_and_tracks_xi():
    n = 6
    # The former defaults, pinned: the step size 0.1 and the running maximum of max zeta.
    loss = NUCLR(n, freeze_epochs=2, epochs=10, zeta_lr=0.1, zeta_update="heavy_ball", xi_rule="running")
    a, b = features(n, dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"call set_epoch"):
        loss(a, b, index=torch.arange(n))
    loss.set_epoch(1)
    loss(a, b, index=torch.arange(n))
    assert bool((loss.state.tensors["zeta", "a"] == -0.05).all())
    assert loss.zeta_step_size == 0.0
    loss.set_epoch(2)
    assert loss.zeta_step_size == pytest.approx(0.1)
    loss(a, b, index=torch.arange(n))
    for side in "ab":
        zeta = loss.state.tensors["zeta", side]
        assert not bool((zeta == -0.05).all())
        assert loss.state.scalars[f"xi_{side}"] == pytest.approx(max(0.0, float(zeta.max())))
    loss.set_epoch(6)
    assert loss.zeta_step_size == pytest.approx(0.05)


def test_cosine_gamma_schedule_starts_at_one_and_ends_at_gamma():
    loss = SogCLR(4, gamma=0.2, gamma_schedule="cosine", gamma_decay_epochs=4)
    values = []
    for epoch in (0, 2, 4, 9):
        loss.set_epoch(epoch)
        values.append(loss.gamma)
    assert values == pytest.approx([1.0, 0.6, 0.2, 0.2])


def test_separate_indices_for_the_two_sides():
    loss = SogCLR((5, 9))
    a, b = features(3, dtype=torch.float32)
    loss(a, b, index=(torch.tensor([0, 1, 4]), torch.tensor([8, 2, 7])))
    visited_b = ~torch.isneginf(loss.state.tensors["log_u", "b"])
    assert visited_b.nonzero().flatten().tolist() == [2, 7, 8]
    with pytest.raises(ValueError, match=r"index_b must be in \[0, 9\)"):
        loss(a, b, index=(torch.tensor([0, 1, 4]), torch.tensor([8, 2, 9])))
    with pytest.raises(ValueError, match=r"two views of one dataset have one size"):
        SogCLR((5, 9), pairing="two_view")


@pytest.mark.parametrize(("sizes", "side"), [((9, 5), "b"), ((5, 9), "a")])
def test_a_shared_index_is_checked_against_the_size_of_each_side(sizes, side):
    """One index for sides of 9 and 5 samples: 7 is a sample of the larger side only, refused naming the other."""
    loss = SogCLR(sizes)
    a, b = features(3, dtype=torch.float32)
    before = {key: tensor.clone() for key, tensor in loss.state.tensors.items()}
    refused = rf"^index must be in \[0, 5\) on side '{side}' \(its num_samples .*\), got 7$"
    with pytest.raises(ValueError, match=refused):
        loss(a, b, index=torch.tensor([0, 7, 1]))
    for key, tensor in loss.state.tensors.items():
        assert torch.equal(tensor, before[key]), key
    loss(a, b, index=torch.tensor([0, 4, 1]))  # a sample of both sides


def test_state_memory_is_documented_and_can_stay_on_the_cpu():
    loss = NUCLR(1000, state_device="cpu")
    assert loss.state.memory_bytes() == 3 * 2 * 1000 * 4
    assert loss.state.device == torch.device("cpu")
    assert "MiB on cpu" in repr(loss.state)


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        (SogCLR, {"num_samples": 1}, r"num_samples must be an integer >= 2"),
        (SogCLR, {"num_samples": 10, "gamma": 0.0}, r"gamma must be in \(0, 1\]"),
        (SogCLR, {"num_samples": 10, "temperature": 0.0}, r"temperature must be in \(0, inf\]"),
        (SogCLR, {"num_samples": 10, "gamma_schedule": "linear"}, r"gamma_schedule must be one of"),
        (ISogCLR, {"num_samples": 10, "temperature": 2.0}, r"temperature must be in \[0.01, 1\]"),
        (ISogCLR, {"num_samples": 10, "rho": -1.0}, r"rho must be in \[0, inf\]"),
        (NUCLR, {"num_samples": 10, "zeta_momentum": 1.0}, r"zeta_momentum must be in \[0, 1\)"),
        (NUCLR, {"num_samples": 10, "epochs": 3, "freeze_epochs": 5}, r"freeze_epochs must be below epochs = 3"),
        (NUCLR, {"num_samples": 10, "epochs": 3, "freeze_epochs": 3}, r"freeze_epochs must be below epochs = 3"),
        (NUCLR, {"num_samples": 10, "freeze_fraction": 1.0}, r"freeze_fraction must be in \[0, 1\)"),
    ],
)
def test_parameter_checks(cls, params, message):
    with pytest.raises(ValueError, match=message):
        cls(**params)


def test_xi_trick_only_replaces_the_positives_own_term():
    """With every zeta equal to xi the trick changes nothing; with xi above, only the weights' denominators."""
    n, t = 6, 0.2
    a, b = (x.requires_grad_(True) for x in features(n, seed=13))
    common = dict(temperature=t, learn_zeta=False, gamma=1.0, zeta_init=0.1)
    same = [NUCLR(n, xi_init=0.1, xi_trick=trick, **common) for trick in (True, False)]
    values = [loss(a, b, index=torch.arange(n)) for loss in same]
    torch.testing.assert_close(values[0], values[1])
    without_trick = grads(values[1], a, b)
    for got, expected in zip(grads(values[0], a, b), without_trick, strict=True):
        torch.testing.assert_close(got, expected)
    higher = NUCLR(n, xi_init=0.5, **common)(a, b, index=torch.arange(n))
    torch.testing.assert_close(higher, values[1])  # the reported value never uses xi
    assert not torch.allclose(grads(higher, a)[0], without_trick[0])


def test_nuclr_with_each_side_its_own_xi_follows_algorithm_1_over_several_steps():
    """Popularities and xi that differ per side (xi_a = 0.1, xi_b = 0.5 to start; exp(-xi / t) of 0.61 and 0.08
    at t = 0.2): five mini-batch steps of plain SGD on zeta (zeta_theta = 1) against the reference written from
    Wang et al. 2025, Algorithm 1 (reference.nuclr_step): values, feature gradients and the state at every step."""
    n, batch, t, gamma, lr = 9, 5, 0.2, 0.8, 0.2
    loss = NUCLR(n, temperature=t, zeta_init=0.0, xi_init=0.0, freeze_epochs=0, zeta_lr=lr, zeta_theta=1.0, gamma=gamma)
    zeta = {
        "a": torch.linspace(-0.1, 0.1, n, dtype=torch.float64),
        "b": torch.linspace(0.1, 0.5, n, dtype=torch.float64),
    }
    expected = {f"zeta_{side}": zeta[side].clone() for side in "ab"}
    expected |= {f"u_{side}": torch.full((n,), math.nan, dtype=torch.float64) for side in "ab"}
    expected |= {"xi_a": 0.1, "xi_b": 0.5}
    for side in "ab":
        loss.state.tensors["zeta", side] = zeta[side].clone()
        loss.state.scalars[f"xi_{side}"] = expected[f"xi_{side}"]
    a_all, b_all = features(n, seed=17)
    generator = torch.Generator().manual_seed(4)
    for _ in range(5):
        index = torch.randperm(n, generator=generator)[:batch]
        a, b = a_all[index].requires_grad_(True), b_all[index].requires_grad_(True)
        loss.begin_step()
        value = loss(a, b, index=index)
        reference_value, surrogate = ref.nuclr_step(a, b, index, expected, t, gamma, lr, n)
        torch.testing.assert_close(value, reference_value, rtol=1e-12, atol=1e-12)
        for got, want in zip(grads(value, a, b), grads(surrogate, a, b), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        for side in "ab":
            torch.testing.assert_close(
                loss.state.tensors["zeta", side], expected[f"zeta_{side}"], rtol=1e-10, atol=1e-12
            )
            visited = ~torch.isnan(expected[f"u_{side}"])
            torch.testing.assert_close(
                torch.exp(loss.state.tensors["log_u", side][visited]), expected[f"u_{side}"][visited]
            )
            assert loss.state.scalars[f"xi_{side}"] == pytest.approx(expected[f"xi_{side}"], rel=1e-12)
        assert expected["xi_b"] - expected["xi_a"] > 0.25  # the sides' xi stay apart
