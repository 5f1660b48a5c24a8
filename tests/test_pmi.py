"""PMI, mutual information, population symmetric InfoNCE (Uesaka et al. 2025, Eq. 2, Prop. 4.1), Prop. C.1's
rank bound."""

import math

import numpy as np
import pytest
import torch

from uncurated.theory import inner_product_rank, mutual_information, pmi, population_loss


def random_joint(rows, columns, seed=0, scale=1.5):
    generator = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(rows * columns, generator=generator, dtype=torch.float64)
    return torch.softmax(logits, dim=0).view(rows, columns)


def naive_population_loss(G, P):
    """Eq. 2 term by term, with plain sums over the support and no log-sum-exp."""
    G, P = G.numpy(), P.numpy()
    px, py = P.sum(axis=1), P.sum(axis=0)
    total = 0.0
    for i in range(P.shape[0]):
        for j in range(P.shape[1]):
            if P[i, j] == 0:
                continue
            over_x = np.log(sum(px[k] * np.exp(G[k, j]) for k in range(P.shape[0])))
            over_y = np.log(sum(py[k] * np.exp(G[i, k]) for k in range(P.shape[1])))
            total += P[i, j] * (0.5 * (-G[i, j] + over_x) + 0.5 * (-G[i, j] + over_y))
    return total


# ---------------------------------------------------------------- PMI and mutual information


def test_pmi_and_mutual_information_match_their_definitions():
    P = random_joint(5, 7)
    px, py = P.sum(1), P.sum(0)
    expected = torch.log(P / (px[:, None] * py[None, :]))
    torch.testing.assert_close(pmi(P), expected, rtol=0, atol=1e-13)
    assert float(mutual_information(P)) == pytest.approx(float((P * expected).sum()), abs=1e-14)
    assert float(mutual_information(P)) > 0


def test_mutual_information_of_independent_variables_is_zero():
    px = torch.softmax(torch.randn(6, dtype=torch.float64), 0)
    py = torch.softmax(torch.randn(9, dtype=torch.float64), 0)
    P = px[:, None] * py[None, :]
    assert abs(float(mutual_information(P))) < 1e-14
    assert pmi(P).abs().max() < 1e-13


def test_mutual_information_of_a_bijection_is_the_entropy():
    """Y = X uniform on N items: I(X; Y) = H(X) = ln N, PMI = ln N on the diagonal, -inf elsewhere."""
    P = torch.eye(8, dtype=torch.float64) / 8
    assert float(mutual_information(P)) == pytest.approx(math.log(8), rel=1e-14)
    table = pmi(P)
    torch.testing.assert_close(table.diagonal(), torch.full((8,), math.log(8), dtype=torch.float64))
    assert bool((table[~torch.eye(8, dtype=torch.bool)] == -math.inf).all())


def test_random_joint_has_a_full_rank_pmi():
    assert int(torch.linalg.matrix_rank(pmi(random_joint(32, 32)))) == 32


def test_numpy_tables_are_accepted():
    P = np.array([[0.1, 0.2], [0.3, 0.4]])
    assert float(mutual_information(P)) == pytest.approx(float(mutual_information(torch.tensor(P))))


# ---------------------------------------------------------------- Eq. 2 and Proposition 4.1


def test_population_loss_matches_eq_2_term_by_term():
    P = random_joint(4, 6, seed=1)
    P[0, 2] = 0.0  # a pair outside the support
    P = P / P.sum()
    G = 2 * torch.randn(4, 6, dtype=torch.float64)
    assert float(population_loss(G, P)) == pytest.approx(naive_population_loss(G, P), rel=1e-12)


@pytest.mark.parametrize("constant", [0.0, 3.7, -25.0, 400.0])
def test_population_loss_at_pmi_plus_a_constant_is_minus_the_mutual_information(constant):
    """Proposition 4.1, the equality case; 400 would overflow exp without the log-sum-exp."""
    P = random_joint(32, 32)
    loss = population_loss(pmi(P) + constant, P)
    assert loss.dtype == torch.float64
    assert float(loss) == pytest.approx(-float(mutual_information(P)), abs=1e-12)


def test_population_loss_at_pmi_allows_zeros_in_the_joint():
    P = random_joint(6, 5, seed=3)
    P[1, :3] = 0.0
    P[4, 4] = 0.0
    P = P / P.sum()
    assert float(population_loss(pmi(P), P)) == pytest.approx(-float(mutual_information(P)), abs=1e-13)


@pytest.mark.parametrize("scale", [1e-3, 0.1, 1.0, 10.0])
def test_any_other_similarity_loses_more(scale):
    """Proposition 4.1, the bound: -L(G) < I(X; Y) for G not PMI + const."""
    P = random_joint(12, 12, seed=2)
    information = float(mutual_information(P))
    generator = torch.Generator().manual_seed(7)
    for _ in range(20):
        noise = scale * torch.randn(12, 12, generator=generator, dtype=torch.float64)
        assert float(population_loss(pmi(P) + noise, P)) > -information
    rank_one = scale * torch.outer(torch.randn(12, dtype=torch.float64), torch.randn(12, dtype=torch.float64))
    assert float(population_loss(pmi(P) + rank_one, P)) > -information


def test_pmi_is_a_stationary_point_and_the_gradient_is_finite():
    P = random_joint(10, 10)
    G = pmi(P).requires_grad_()
    population_loss(G, P).backward()
    assert G.grad.abs().max() < 1e-15
    H = torch.randn(10, 10, dtype=torch.float64, requires_grad=True)
    population_loss(H, P).backward()
    assert bool(torch.isfinite(H.grad).all()) and H.grad.abs().max() > 1e-3
    torch.testing.assert_close(H.grad.sum(), torch.tensor(0.0, dtype=torch.float64), rtol=0, atol=1e-14)


def test_population_loss_keeps_float32_logits_differentiable_in_float64():
    P = random_joint(5, 5)
    G = torch.randn(5, 5, requires_grad=True)
    loss = population_loss(G, P)
    loss.backward()
    assert loss.dtype == torch.float64 and G.grad.dtype == torch.float32


# ---------------------------------------------------------------- Proposition C.1


@pytest.mark.parametrize(("c", "rank"), [(0.0, 4), (1.7, 5), (-3.0, 5)])
def test_inner_products_have_rank_at_most_d_plus_1(c, rank):
    """Proposition C.1 with d = 4, M = 20: A^T B has rank d, and shifting it by c J adds one."""
    A, B = torch.randn(4, 20, dtype=torch.float64), torch.randn(4, 20, dtype=torch.float64)
    assert inner_product_rank(A, B, c) == rank <= 4 + 1


def test_inner_product_rank_is_below_a_full_rank_pmi():
    P = random_joint(16, 16)
    A, B = torch.randn(3, 16), torch.randn(3, 16)
    assert max(inner_product_rank(A, B, c) for c in (0.0, 1.0, -2.0)) <= 4 < int(torch.linalg.matrix_rank(pmi(P)))


# ---------------------------------------------------------------- bad input


UNIFORM = torch.full((2, 2), 0.25)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pmi(torch.tensor([[0.5, 0.6], [-0.1, 0]])), r"P must have entries in \[0, 1\], got an entry of -0.1"),
        (lambda: pmi(torch.full((2, 2), 0.3)), r"P must sum to 1 \(within 1e-06\), got a sum of 1.2"),
        (lambda: mutual_information(torch.full((4,), 0.25)), r"P must be an \(N_x, N_y\) table .* got shape \(4,\)"),
        (lambda: pmi(torch.full((2, 2, 2), 0.125)), r"P must be an \(N_x, N_y\) table .* got shape \(2, 2, 2\)"),
        (lambda: pmi(torch.zeros(0, 3)), r"P must be an \(N_x, N_y\) table .* got shape \(0, 3\)"),
        (lambda: pmi(torch.tensor([[math.nan, 0.5], [0.25, 0.25]])), "P contains non-finite values"),
        (lambda: population_loss(torch.zeros(3, 2), UNIFORM), r"G must have the shape of P, \(2, 2\)"),
        (lambda: population_loss(torch.zeros(2, 2, dtype=torch.long), UNIFORM), "G must be a floating"),
        (lambda: population_loss(torch.tensor([[math.nan, 0.0], [0.0, 0.0]]), UNIFORM), "NaN or \\+inf"),
        (lambda: population_loss(torch.tensor([[math.inf, 0.0], [0.0, 0.0]]), UNIFORM), "NaN or \\+inf"),
        (lambda: inner_product_rank(torch.zeros(3, 5), torch.zeros(4, 5)), "A and B must have the same number of rows"),
        (lambda: inner_product_rank(torch.zeros(3), torch.zeros(3, 5)), r"A must be a floating-point \(d, M\) tensor"),
        (lambda: inner_product_rank(torch.zeros(3, 5), torch.zeros(3, 5), math.nan), r"c must be in \(-inf, inf\)"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
