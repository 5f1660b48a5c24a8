"""The options of the global objectives, WPSE and k-variance margins against plain loops written
from the papers and from the authors' code."""

import math

import numpy as np
import pytest
import reference as ref
import torch

from uncurated.objectives import NUCLR, ISogCLR, SogCLR


def features(n=6, dim=4, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, dim, generator=generator, dtype=dtype) for _ in range(2))


def phi_objective(anchors, candidates, zeta, t):
    """Eq. 10 for one direction at full batch: mean_i t log sum_j e^{(s_ij - s_ii - zeta_j)/t} + mean zeta."""
    anchors, candidates = ref.unit(anchors), ref.unit(candidates)
    similarities = anchors @ candidates.T
    logits = (similarities - torch.diagonal(similarities)[:, None] - zeta[None, :]) / t
    return (t * torch.logsumexp(logits, dim=1)).mean() + zeta.mean()


def eq14(anchors, candidates, zeta, t):
    """The paper's zeta gradient at full batch with gamma = 1 (u = phi): autograd of Eq. 10."""
    zeta = zeta.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(phi_objective(anchors, candidates, zeta, t), zeta)
    return gradient


def run_nuclr(loss, a, b, steps):
    n = a.shape[0]
    for _ in range(steps):
        loss.begin_step()
        loss(a, b, index=torch.arange(n))


@pytest.mark.parametrize("update", ["ema", "heavy_ball"])
def test_zeta_update_forms_follow_their_formulas(update):
    """ema (authors: z <- (1 - theta) z + theta G, z = G at the first visit) and heavy ball (m <- beta m + G)."""
    n, t, lr, steps = 6, 0.3, 0.4, 4
    a, b = features(n, seed=1)
    loss = NUCLR(
        n,
        temperature=t,
        zeta_init=0.0,
        freeze_epochs=0,
        xi_trick=False,
        gamma=1.0,
        zeta_lr=lr,
        zeta_update=update,
        zeta_theta=0.7,
        zeta_momentum=0.6,
    )
    run_nuclr(loss, a, b, steps)
    for side, (anchors, candidates) in (("b", (a, b)), ("a", (b, a))):
        zeta, direction = torch.zeros(n, dtype=torch.float64), None
        for _ in range(steps):
            gradient = eq14(anchors, candidates, zeta, t)
            if update == "ema":
                direction = gradient if direction is None else 0.3 * direction + 0.7 * gradient
            else:
                direction = gradient if direction is None else 0.6 * direction + gradient
            zeta = zeta - lr * direction
        torch.testing.assert_close(loss.state.tensors["zeta", side], zeta, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(loss.state.tensors["zeta_momentum", side], direction, rtol=1e-10, atol=1e-12)


def test_the_default_zeta_update_is_the_authors_moving_average():
    loss = NUCLR(10)
    assert (loss.zeta_update, loss.zeta_theta, loss.zeta_lr, loss.xi_rule) == ("ema", 0.9, 1.0, "paper")


def authors_step_size(eta, epoch, epochs, start):
    """The authors' models/losses.py schedule, written out for whole epochs."""
    if epoch < start:
        return 0.0
    base = 0.5 * eta * (1.0 + math.cos(math.pi * (epoch - start) / (epochs - 1 - start)))
    if epoch < int(epochs / 2):
        return base
    if epoch < int(epochs * 3 / 4):
        return base / 10.0
    return base / 100.0


@pytest.mark.parametrize(("epochs", "start"), [(30, 5), (10, 2), (7, 0)])
def test_authors_zeta_schedule_drops_by_ten_and_a_hundred(epochs, start):
    loss = NUCLR(10, zeta_lr=0.5, freeze_epochs=start, epochs=epochs, zeta_schedule="authors")
    for epoch in range(epochs):
        for fraction in (0.0, 0.6):
            loss.set_epoch(epoch + fraction)
            assert loss.zeta_step_size == pytest.approx(authors_step_size(0.5, epoch, epochs, start), abs=1e-15)
    cosine = NUCLR(10, zeta_lr=0.5, freeze_epochs=5, epochs=30)
    cosine.set_epoch(20)
    assert cosine.zeta_step_size == pytest.approx(0.5 * 0.5 * (1 + math.cos(math.pi * 15 / 25)))


def test_side_a_zeta_step_takes_its_ratio():
    """The authors' eta_I_ratio: the images' (side a) popularities move with 0.1 of the step."""
    n, t, lr = 6, 0.3, 0.4
    a, b = features(n, seed=2)
    loss = NUCLR(
        n, temperature=t, zeta_init=0.0, freeze_epochs=0, xi_trick=False, gamma=1.0, zeta_lr=lr, zeta_lr_ratio_a=0.1
    )
    run_nuclr(loss, a, b, 1)
    zero = torch.zeros(n, dtype=torch.float64)
    torch.testing.assert_close(loss.state.tensors["zeta", "b"], -lr * eq14(a, b, zero, t), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(loss.state.tensors["zeta", "a"], -0.1 * lr * eq14(b, a, zero, t), rtol=1e-10, atol=1e-12)


def test_xi_rules():
    n = 6
    a, b = features(n, seed=3, dtype=torch.float32)
    # The paper: xi <- max(xi, ||zeta||_inf), at every step, frozen zeta included: |-0.05| lifts xi to 0.05.
    paper = NUCLR(n, freeze_epochs=1, epochs=4)
    paper.set_epoch(0)
    paper(a, b, index=torch.arange(n))
    assert paper.state.scalar_values() == {"xi_a": pytest.approx(0.05), "xi_b": pytest.approx(0.05)}
    paper.set_epoch(1)
    paper(a, b, index=torch.arange(n))
    for side in "ab":
        largest = float(paper.state.tensors["zeta", side].abs().max())
        assert paper.state.scalars[f"xi_{side}"] == pytest.approx(max(0.05, largest))
    # The authors: once per epoch, max(xi_0, max zeta), which can go down.
    authors = NUCLR(n, freeze_epochs=0, xi_rule="authors", xi_init=0.01)
    authors.set_epoch(0)
    authors.state.tensors["zeta", "a"][:] = torch.linspace(-0.1, 0.3, n)
    authors.set_epoch(0.5)
    assert authors.state.scalars["xi_a"] == 0.01  # not at an epoch boundary
    authors.set_epoch(1.0)
    assert authors.state.scalars["xi_a"] == pytest.approx(0.3)
    assert authors.state.scalars["xi_b"] == pytest.approx(0.01)  # zeta_b is all -0.05: xi_0 holds
    authors.state.tensors["zeta", "a"][:] = 0.02
    authors.set_epoch(2.0)
    assert authors.state.scalars["xi_a"] == pytest.approx(0.02)


@pytest.mark.parametrize("zeta_init", [-0.05, -0.5, 0.0])
def test_the_paper_xi_from_each_calls_new_values_is_the_maximum_over_the_side(zeta_init):
    """Algorithm 1 line 7 over mini-batches of 4 of 12 samples: xi equals max(xi, ||zeta||_inf) over every row,
    rows never written (at zeta_init) and rows whose popularity went back down included."""
    n = 12
    a, b = features(n, seed=5)
    loss = NUCLR(n, freeze_epochs=0, zeta_lr=3.0, zeta_init=zeta_init, xi_init=max(0.0, zeta_init))
    xi = {"a": loss.xi_init, "b": loss.xi_init}
    generator = torch.Generator().manual_seed(0)
    for step in range(8):
        loss.set_epoch(step / 8)
        index = torch.randperm(n, generator=generator)[:4] if step else torch.arange(4)
        loss.begin_step()
        loss(a[index], b[index], index=index)
        for side in "ab":
            xi[side] = max(xi[side], float(loss.state.tensors["zeta", side].abs().max()))
            assert loss.state.scalars[f"xi_{side}"] == pytest.approx(xi[side], rel=1e-12)


def test_xi_init_below_zeta_init_is_refused():
    """With zeta_0 = 0.1 and xi_0 = 0 the trick would weigh the positive by 1 instead of its own e^{-0.1/0.07}."""
    with pytest.raises(ValueError, match=r"xi_init must be >= zeta_init = 0.1 .* got 0.0: raise xi_init"):
        NUCLR(10, zeta_init=0.1, xi_init=0.0)
    NUCLR(10, zeta_init=0.1, xi_init=0.1)
    NUCLR(10, zeta_init=0.1, xi_init=0.0, xi_trick=False)  # xi is unused without the trick


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"zeta_update": "adam"}, r"zeta_update must be one of 'ema', 'heavy_ball'"),
        ({"zeta_theta": 0.0}, r"zeta_theta must be in \(0, 1\]"),
        ({"zeta_schedule": "step"}, r"zeta_schedule must be one of"),
        ({"zeta_schedule": "authors"}, r"zeta_schedule='authors' needs epochs"),
        ({"zeta_lr_ratio_a": -1.0}, r"zeta_lr_ratio_a must be in \[0, inf\]"),
        ({"xi_rule": "max"}, r"xi_rule must be one of 'paper', 'authors', 'running'"),
    ],
)
def test_nuclr_option_checks(params, message):
    with pytest.raises(ValueError, match=message):
        NUCLR(10, **params)


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
def test_sogclr_eps_nuclr_is_one_over_the_pool_and_nuclr_reduces_to_it(pairing):
    n, batch, t = 12, 4, 0.1
    pool = n - 1 if pairing == "cross" else 2 * n - 2
    named, explicit = (SogCLR(n, temperature=t, pairing=pairing, eps=eps) for eps in ("nuclr", 1.0 / pool))
    nuclr = NUCLR(n, temperature=t, pairing=pairing, zeta_init=0.0, xi_init=0.0, learn_zeta=False)
    a_all, b_all = features(n, seed=4)
    generator = torch.Generator().manual_seed(5)
    for _ in range(4):
        index = torch.randperm(n, generator=generator)[:batch]
        a, b = a_all[index].requires_grad_(True), b_all[index].requires_grad_(True)
        values = [objective(a, b, index=index) for objective in (named, explicit, nuclr)]
        gradients = [torch.autograd.grad(value, (a, b)) for value in values]
        torch.testing.assert_close(values[0], values[1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(values[2], values[0] + t * math.log(pool), rtol=1e-10, atol=1e-12)
        for other in gradients[1:]:
            for got, expected in zip(gradients[0], other, strict=True):
                torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_sogclr_eps_default_and_checks():
    assert SogCLR(10).eps == 1e-8
    with pytest.raises(ValueError, match=r"eps must be a number > 0 or 'nuclr'"):
        SogCLR(10, eps="pool")
    with pytest.raises(ValueError, match=r"eps must be in \(0, inf\]"):
        SogCLR(10, eps=0.0)


def rgcl_temperature_gradient(anchors, candidates, tau, rho, eps):
    """d/dt_i of t_i log(eps + g_i) + rho t_i at full batch (gamma = 1, so u = g), by autograd."""
    anchors, candidates = ref.unit(anchors), ref.unit(candidates)
    tau = tau.clone().requires_grad_(True)
    similarities = anchors @ candidates.T
    d = similarities - torch.diagonal(similarities)[:, None]
    mask = ~torch.eye(len(d), dtype=torch.bool)
    g = (torch.exp(d / tau[:, None]) * mask).sum(dim=1) / mask.sum(dim=1)
    (gradient,) = torch.autograd.grad((tau * torch.log(eps + g) + rho * tau).sum(), tau)
    return gradient


@pytest.mark.parametrize(
    ("optimizer", "beta"), [("momentum", 0.8), ("momentum", 0.2), ("original", 0.5), ("fastclip", None), ("adam", None)]
)
def test_isogclr_temperature_optimizers_follow_their_formulas(optimizer, beta):
    """Qiu et al. 2023's momentum (Algorithm 1: m <- (1 - beta) m + beta G, t <- t - lr m) with beta on either side
    of 1/2, the original code's (momentum, beta_u 0.5, clip 5), FastCLIP's and textbook Adam."""
    n, eps, lr, low, high = 6, 1e-3, 0.02, 0.01, 1.0
    rho = 8.0 if optimizer == "original" else 0.3  # at rho = 8 the gradients exceed the clip at 5
    a, b = features(n, seed=6)
    options = {"temperature_optimizer": "momentum" if optimizer == "original" else optimizer}
    if beta is not None:
        options["temperature_beta"] = beta
    if optimizer == "original":
        options["temperature_grad_clip"] = 5.0
    loss = ISogCLR(n, temperature=0.2, rho=rho, eps=eps, gamma=1.0, temperature_lr=lr, **options)
    epochs = [0, 0, 1, 1, 2]
    for epoch in epochs:
        loss.set_epoch(epoch + 0.25)
        loss.begin_step()
        loss(a, b, index=torch.arange(n))
    for side, (anchors, candidates) in (("a", (a, b)), ("b", (b, a))):
        tau = torch.full((n,), 0.2, dtype=torch.float64)
        m, v = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
        for step, epoch in enumerate(epochs, start=1):
            g = rgcl_temperature_gradient(anchors, candidates, tau, rho, eps)
            if optimizer in ("momentum", "original"):
                if optimizer == "original":
                    g = g.clamp(-5.0, 5.0)
                m = (1 - beta) * m + beta * g
                tau = tau - lr * m
            elif optimizer == "fastclip":
                beta1, beta2 = (0.0, 0.0) if epoch == 0 else (0.9, 0.999)
                m = beta1 * m + (1 - beta1) * g
                v = beta2 * v + (1 - beta2) * g * g
                m_hat, v_hat = m / (1 - beta1 ** (epoch + 1)), v / (1 - beta2 ** (epoch + 1))
                tau = tau - lr * m_hat / (v_hat + 1e-8)
            else:
                m = 0.9 * m + 0.1 * g
                v = 0.999 * v + 0.001 * g * g
                tau = tau - lr * (m / (1 - 0.9**step)) / (torch.sqrt(v / (1 - 0.999**step)) + 1e-8)
            tau = tau.clamp(low, high)
        torch.testing.assert_close(loss.state.tensors["tau", side], tau, rtol=1e-9, atol=1e-12)


def test_isogclr_defaults_and_checks():
    loss = ISogCLR(10)
    assert (loss.temperature_optimizer, loss.temperature_beta, loss.temperature_grad_clip) == ("momentum", 0.5, None)
    with pytest.raises(ValueError, match=r"temperature_optimizer must be one of 'momentum', 'fastclip', 'adam'"):
        ISogCLR(10, temperature_optimizer="sgd")
    with pytest.raises(ValueError, match=r"temperature_grad_clip must be in \(0, inf\]"):
        ISogCLR(10, temperature_grad_clip=0.0)
    with pytest.raises(RuntimeError, match=r"call set_epoch"):
        ISogCLR(4, temperature_optimizer="fastclip")(*features(4), index=torch.arange(4))


def official_wpse_embedding(
    weights, points, frequencies, phases, alphas=(0.667, 0.333), weights_p=None, norm_linear=False
):
    """sony/wpse CLIP_WPSE_Loss.comb_feature for one set, written as loops over its points."""
    count = len(points)
    if weights_p is not None:
        norm = max(sum(abs(w) ** weights_p for w in weights) ** (1 / weights_p), 1e-6)
        weights = [w / norm for w in weights]
    units = [v / max(float(v.norm()), 1e-6) for v in points]
    linear = sum(w * v for w, v in zip(weights, units, strict=True)) / count
    if norm_linear:
        linear = linear / max(float(linear.norm()), 1e-12)
    features = (
        sum(
            w * math.sqrt(2 / len(phases)) * torch.cos(frequencies @ v + phases)
            for w, v in zip(weights, units, strict=True)
        )
        / count
    )
    return torch.cat([math.sqrt(alphas[0]) * linear, math.sqrt(alphas[1]) * features])


def test_wpse_defaults_are_the_official_code_on_a_hand_computed_example():
    from uncurated.similarity import CombinedKernel, WeightedPointSet, WPSEmbedding

    x = WeightedPointSet(
        torch.tensor([[2.0, 1.0]], dtype=torch.float64), torch.tensor([[[3.0, 4.0], [0.0, 2.0]]], dtype=torch.float64)
    )
    y = WeightedPointSet(torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([[[5.0, 0.0]]], dtype=torch.float64))
    # The linear part by hand: unit points (0.6, 0.8), (0, 1), (1, 0); means (0.6, 1.3) and (1, 0); 0.667 * 0.6.
    linear = WPSEmbedding(CombinedKernel(alpha2=0.0)).eval()
    e_x, e_y = linear(x, y)
    assert float(e_x @ e_y.T) == pytest.approx(0.667 * 0.6, rel=1e-12)
    # The whole default embedding against the official code's steps, on the stored evaluation draw.
    module = WPSEmbedding(eval_features=64).eval()
    e_x, e_y = module(x, y)
    draw = module.eval_draw
    frequencies, phases = draw.frequencies.double(), draw.phases.double()
    for got, sets in ((e_x, x), (e_y, y)):
        want = official_wpse_embedding(list(sets.weights[0]), list(sets.points[0]), frequencies, phases)
        torch.testing.assert_close(got[0], want, rtol=1e-6, atol=1e-7)
    for options in ({"normalize_weights_p": 2.0}, {"norm_linear_feat": True}):
        e = WPSEmbedding(eval_features=64, **options).eval()(x)[0]
        want = official_wpse_embedding(
            list(x.weights[0]),
            list(x.points[0]),
            frequencies,
            phases,
            weights_p=options.get("normalize_weights_p"),
            norm_linear=options.get("norm_linear_feat", False),
        )
        torch.testing.assert_close(e[0], want, rtol=1e-6, atol=1e-7)


def test_wpse_paper_form_is_m_x_m_y_times_the_official_on_unit_points():
    from uncurated.similarity import WeightedPointSet, WPSEmbedding

    generator = torch.Generator().manual_seed(0)
    unit = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    x = WeightedPointSet(torch.randn(4, 5, generator=generator), unit(torch.randn(4, 5, 6, generator=generator)))
    y = WeightedPointSet(torch.randn(4, 3, generator=generator), unit(torch.randn(4, 3, 6, generator=generator)))
    official = WPSEmbedding().eval()
    paper = WPSEmbedding(pooling="sum", point_eps=None).eval()
    official_similarity = torch.mm(*((e if k == 0 else e.T) for k, e in enumerate(official(x, y))))
    paper_similarity = torch.mm(*((e if k == 0 else e.T) for k, e in enumerate(paper(x, y))))
    torch.testing.assert_close(paper_similarity, 15 * official_similarity, rtol=1e-5, atol=1e-6)


def test_wpse_option_checks():
    from uncurated.similarity import WPSEmbedding

    with pytest.raises(ValueError, match=r"point_eps must be in \(0, inf\]"):
        WPSEmbedding(point_eps=0.0)
    with pytest.raises(ValueError, match=r"normalize_weights_p must be in \(0, inf\]"):
        WPSEmbedding(normalize_weights_p=-1.0)


def authors_complexity(features, weights, labels, seed, gradient_normalized):
    """chingyaoc/kV-Margin complexity.py for a linear head ``x @ weights``, written out with NumPy."""
    from scipy.optimize import linear_sum_assignment

    rng = np.random.RandomState(seed)
    count = labels.max() + 1
    shares = [np.sum(labels == c) / len(labels) for c in range(count)]
    size = min(len(features), count * 200)
    chosen = rng.choice(np.where(labels > -1)[0], size, replace=False)
    x, y = features[chosen], labels[chosen]
    logits = x @ weights

    def runner_up(i):
        others = logits[i].copy()
        others[y[i]] = -10000
        return int(np.argmax(others))

    gradient_norm = np.array([np.linalg.norm(weights[:, y[i]] - weights[:, runner_up(i)]) for i in range(size)])
    margin = np.array([logits[i, y[i]] - logits[i, runner_up(i)] for i in range(size)])
    if gradient_normalized:
        margin = margin / (gradient_norm + 1e-6)
    median = np.median(np.concatenate([margin[200 * i : 200 * (i + 1)] for i in range(size // 200)]))
    gamma = 0.0
    for c in range(count):
        members = rng.permutation(np.where(y == c)[0])
        k = len(members) // 2
        first, second = x[members[:k]], x[members[k : 2 * k]]
        cost = np.linalg.norm(first[:, None] - second[None], axis=-1)
        rows, columns = linear_sum_assignment(cost)
        lipschitz = 1.0 if gradient_normalized else gradient_norm[members].max()
        gamma += shares[c] * cost[rows, columns].mean() * lipschitz
    return -median / gamma


@pytest.mark.parametrize(("size", "gradient_normalized"), [(700, False), (500, False), (500, True)])
def test_kv_margins_authors_protocol_and_score_match_their_code(size, gradient_normalized):
    """At most 200 K examples, margins in batches of 200 with the last partial one dropped, -median / gamma."""
    from uncurated.theory.kvariance import kv_gn_margin, kv_margin

    rng = np.random.default_rng(1)
    features = rng.normal(size=(size, 4))
    head = rng.normal(size=(4, 3))
    labels = rng.integers(0, 3, size=size)
    function = kv_gn_margin if gradient_normalized else kv_margin
    result = function(
        torch.from_numpy(features),
        lambda x: x @ torch.from_numpy(head),
        torch.from_numpy(labels),
        seed=5,
        protocol="authors",
    )
    expected = authors_complexity(features, head, labels, 5, gradient_normalized)
    assert result.complexity == pytest.approx(expected, rel=1e-10)
    assert result.complexity == -result.median
    assert len(result.sample) == min(size, 600) // 200 * 200
    thesis = function(torch.from_numpy(features), lambda x: x @ torch.from_numpy(head), torch.from_numpy(labels))
    assert thesis.sample is None and len(thesis.margins) == size


def test_kv_margins_authors_protocol_checks():
    from uncurated.theory.kvariance import kv_margin

    features, labels = torch.randn(150, 3), torch.arange(150) % 2
    head = lambda x: x @ torch.ones(3, 2)  # noqa: E731
    with pytest.raises(ValueError, match=r"needs at least 200 samples, got 150"):
        kv_margin(features, head, labels, protocol="authors")
    with pytest.raises(ValueError, match=r"leave k=None and draws=1"):
        kv_margin(features, head, labels, protocol="authors", draws=2)
    with pytest.raises(ValueError, match=r"protocol must be one of 'thesis', 'authors'"):
        kv_margin(features, head, labels, protocol="paper")
