"""Chen et al. 2024's case study (Def. 5.3, Lemma 5.4, Cor. 5.7, Thms 6.2 and 6.3): square loss, CLIP and CLIP + reg."""

import math

import pytest
import torch

from uncurated.theory.clip_margin_toy import (
    OBJECTIVES,
    fit_clip,
    fit_square_loss,
    format_table,
    make_case_study,
    plot_margins,
    run_clip_margin_toy,
    squared_alignment,
)
from uncurated.theory.margins import top_r_error, zero_shot_margins

#: A test-sized run: two temperatures, 250 SGD steps (about 1.5 s).
SMALL = dict(temperatures=(0.01, 0.03), steps=250, train_pairs=1024, test_pairs=512)


@pytest.fixture(scope="module")
def small_rows():
    return {(row.objective, row.tau): row for row in run_clip_margin_toy(**SMALL)}


def study_and_pairs(seed=0, n=256, **options):
    generator = torch.Generator().manual_seed(seed)
    study = make_case_study(generator, **options)
    return study, *study.sample(n, generator), generator


# ---------------------------------------------------------------- the data model (Def. 5.3, Cor. 5.7)


def test_the_shared_features_have_unit_norm_and_margin_gamma():
    study = make_case_study(torch.Generator().manual_seed(0), classes=6, gamma=0.25)
    gram = study.vocab @ study.vocab.T
    torch.testing.assert_close(gram.diagonal(), torch.ones(6, dtype=torch.float64))
    off_diagonal = gram[~torch.eye(6, dtype=torch.bool)]
    torch.testing.assert_close(off_diagonal, torch.full_like(off_diagonal, 0.75))
    assert study.gamma == pytest.approx(0.25)


def test_samples_have_the_model_shapes_and_structure():
    study, x, y, labels, generator = study_and_pairs(n=300)
    assert x.shape == (300, 12) and y.shape == (300, 8) and labels.shape == (300,)
    assert int(torch.linalg.matrix_rank(study.image_dictionary)) == 9
    # y = [z; zeta] with H = I, zeta one of e_1, e_2 (probabilities 1/3, 2/3).
    torch.testing.assert_close(y[:, :6], study.vocab[labels])
    assert bool((y[:, 6:].sum(dim=1) == 1).all())
    assert 0.55 < float(y[:, 7].mean()) < 0.78
    # x = G [z; xi] with |xi_i| <= 1/2.
    latent = x @ study.image_dictionary
    torch.testing.assert_close(latent[:, :6], study.vocab[labels])
    assert float(latent[:, 6:].abs().max()) <= 0.5
    prompts = study.prompts(7, generator)
    assert prompts.shape == (7, 5, 8)
    torch.testing.assert_close(prompts[:, :, :6], study.vocab.expand(7, 5, 6))


def test_zero_text_noise_gives_texts_equal_to_their_shared_feature():
    study, _, y, labels, _ = study_and_pairs(text_noise_probs=())
    assert y.shape == (256, 6)
    torch.testing.assert_close(y, study.vocab[labels])


def test_a_seed_fixes_the_data_and_another_seed_changes_it():
    _, x0, y0, labels0, _ = study_and_pairs(seed=4)
    _, x1, y1, labels1, _ = study_and_pairs(seed=4)
    _, x2, _, _, _ = study_and_pairs(seed=5)
    assert torch.equal(x0, x1) and torch.equal(y0, y1) and torch.equal(labels0, labels1)
    assert not torch.equal(x0, x2)


# ---------------------------------------------------------------- the oracle (Lemma 5.4)


def test_the_oracle_recovers_the_shared_feature():
    study, x, y, labels, generator = study_and_pairs()
    W = study.oracle()
    P = torch.zeros(8, 9, dtype=torch.float64)
    P[:6, :6] = torch.eye(6, dtype=torch.float64)
    torch.testing.assert_close(study.text_dictionary.T @ W @ study.image_dictionary, P)
    z = study.vocab[labels]
    torch.testing.assert_close((x @ W.T) @ y.T, z @ z.T)


def test_the_oracle_has_zero_error_and_margin_gamma_on_its_data():
    study, x, _, labels, generator = study_and_pairs(gamma=0.15)
    scores = torch.einsum("nd,nkd->nk", x @ study.oracle().T, study.prompts(len(x), generator))
    assert top_r_error(scores, labels) == 0.0
    torch.testing.assert_close(zero_shot_margins(scores, labels), torch.full((len(x),), 0.15, dtype=torch.float64))


# ---------------------------------------------------------------- the objectives


def test_the_square_loss_predicts_the_mean_prompt_noise():
    # Thm 5.6: the optimum is g(x) = E[y | z] = [z; E zeta; 0], so the zeta block holds (1/3, 2/3).
    study, x, y, labels, _ = study_and_pairs(n=4096)
    predicted = x @ fit_square_loss(x, y).T
    torch.testing.assert_close(predicted.mean(dim=0), y.mean(dim=0))
    torch.testing.assert_close(predicted[:, :6], study.vocab[labels])
    for label in range(5):
        # Each class's mean of zeta, estimated from about 800 pairs (standard error 0.017).
        mean = predicted[labels == label, 6:].mean(dim=0)
        torch.testing.assert_close(mean, torch.tensor([1 / 3, 2 / 3], dtype=torch.float64), rtol=0, atol=0.06)


def test_squared_alignment_is_the_mean_squared_distance():
    a, b = torch.randn(7, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    torch.testing.assert_close(squared_alignment(a, b), (a - b).pow(2).sum(dim=1).mean())


def test_fit_clip_is_deterministic_and_starts_from_zero():
    _, x, y, _, _ = study_and_pairs()
    assert torch.equal(fit_clip(x, y, tau=0.05, steps=0), torch.zeros(8, 12, dtype=torch.float64))
    first = fit_clip(x, y, tau=0.05, lam=1.0, steps=20)
    assert torch.equal(first, fit_clip(x, y, tau=0.05, lam=1.0, steps=20))
    assert float(first.abs().max()) > 0


def test_fit_clip_restores_the_thread_count():
    _, x, y, _, _ = study_and_pairs()
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        fit_clip(x, y, tau=0.05, steps=2)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- the toy's claims, on a small run


def test_the_run_has_every_objective_in_order(small_rows):
    assert list(small_rows) == [
        ("oracle", None),
        ("square", None),
        ("clip", 0.01),
        ("clip", 0.03),
        ("clip+reg", 0.01),
        ("clip+reg", 0.03),
    ]
    assert {objective for objective, _ in small_rows} == set(OBJECTIVES)
    assert small_rows[("clip+reg", 0.01)].lam == 10.0 and small_rows[("clip", 0.01)].lam == 0.0
    assert small_rows[("oracle", None)].mean_margin == pytest.approx(0.2)


def test_square_loss_zero_shot_error_is_well_above_clips(small_rows):
    square = small_rows[("square", None)].zero_shot_error
    assert square >= 1 / (3 * 5)  # Cor. 5.7's floor, 1 / (3K)
    for tau in (0.01, 0.03):
        assert square > small_rows[("clip", tau)].zero_shot_error + 0.2


def test_clip_margin_increases_with_temperature(small_rows):
    # Thm 6.2: the margin is O(tau log T).
    low, high = small_rows[("clip", 0.01)], small_rows[("clip", 0.03)]
    assert high.mean_margin > 1.5 * low.mean_margin > 0
    assert low.mean_margin < 0.1  # below gamma / 2 = 0.1, the margin Thm 6.3 guarantees with the regularizer


def test_the_regularizer_raises_the_margin_and_aligns_the_pairs(small_rows):
    for tau in (0.01, 0.03):
        clip, regularized = small_rows[("clip", tau)], small_rows[("clip+reg", tau)]
        assert regularized.mean_margin > clip.mean_margin + 0.005
        assert regularized.alignment < 0.5 * clip.alignment
        assert regularized.certificate < clip.certificate
    # At tau = 0.03 it takes every different-class batch difference above gamma / 2 (alpha of Eq. A.1 near 0).
    assert small_rows[("clip+reg", 0.03)].alpha < 0.5 * small_rows[("clip", 0.03)].alpha


def test_format_table_has_a_line_per_row(small_rows):
    table = format_table(list(small_rows.values()))
    lines = table.splitlines()
    assert len(lines) == 1 + len(small_rows)
    assert "zs err" in lines[0] and "margin" in lines[0]
    assert lines[1].split()[:3] == ["0", "oracle", "-"]
    assert lines[-1].split()[:4] == ["0", "clip+reg", "0.03", "10"]


def test_plot_margins_writes_a_png(small_rows, tmp_path):
    path = plot_margins(list(small_rows.values()), tmp_path / "margins.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make_case_study(torch.Generator(), classes=1), "classes must be an integer >= 2, got 1"),
        (lambda: make_case_study(torch.Generator(), gamma=0.0), r"gamma must be in \(0, 1\], got 0"),
        (lambda: make_case_study(torch.Generator(), image_dim=8), "image_dim must be an integer >= 9, got 8"),
        (lambda: make_case_study(torch.Generator(), image_noise=-1.0), r"image_noise must be in \[0, inf\]"),
        (lambda: make_case_study(torch.Generator(), text_noise_probs=(0.5, 0.6)), "text_noise_probs must sum to 1"),
        (lambda: make_case_study(torch.Generator(), text_noise_probs=(1.5, -0.5)), "text_noise_probs must be in"),
        (lambda: make_case_study(torch.Generator()).sample(0, torch.Generator()), "n must be an integer >= 1, got 0"),
        (lambda: fit_clip(torch.zeros(4, 3), torch.zeros(4, 2), tau=0.0), r"tau must be in \(0, inf\], got 0"),
        (lambda: fit_clip(torch.zeros(4, 3), torch.zeros(4, 2), tau=0.1, lam=-1.0), r"lam must be in \[0, inf\]"),
        (lambda: fit_clip(torch.zeros(4, 3), torch.zeros(4, 2), tau=0.1, batch_size=8), "batch_size must be at most"),
        (lambda: run_clip_margin_toy(()), "seeds must hold at least one seed"),
        (lambda: run_clip_margin_toy((0, -1)), r"seeds\[1\] must be an integer >= 0, got -1"),
        (lambda: run_clip_margin_toy((3, 3)), r"seeds must be distinct, got \[3, 3\]"),
        (lambda: run_clip_margin_toy(temperatures=()), "temperatures must hold at least one temperature"),
        (lambda: run_clip_margin_toy(temperatures=(0.1, -0.1)), r"temperatures\[1\] must be in \(0, inf\]"),
        (lambda: run_clip_margin_toy(lam=0.0), r"lam must be in \(0, inf\], got 0"),
        (lambda: run_clip_margin_toy(steps=1.5), "steps must be an integer >= 0, got 1.5"),
        (lambda: run_clip_margin_toy(train_pairs=8), "train_pairs must be an integer >= 16, got 8"),
        (lambda: run_clip_margin_toy(test_pairs=10), "test_pairs must be an integer >= 64, got 10"),
        (lambda: run_clip_margin_toy(gamma=math.nan), "gamma must be in"),
        (lambda: plot_margins([], "unused.png"), "rows must hold at least one clip or clip\\+reg row"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()
