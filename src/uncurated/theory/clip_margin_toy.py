"""The case study of Chen et al. 2024 (Def. 5.3, Cor. 5.7, Thms 6.2 and 6.3): square loss, CLIP and CLIP + regularizer.

Chen, Deng, Li & Gu, "Understanding transferable representation learning and
zero-shot transfer in CLIP". Data (:class:`CaseStudy`, Def. 5.3 in the
instance of Cor. 5.7):

- ``z`` is uniform on ``K`` unit vectors ``v_k = sqrt(gamma) e_k + sqrt(1 - gamma) e_{K+1}``
  in ``R^{K+1}``, so ``<v_k, v_k'> = 1 - gamma`` for every ``k != k'`` (the data margin is ``gamma``);
- the image is ``x = G [z; xi]`` with ``xi ~ U[-r, r]^{K2}`` and ``G`` a random
  ``d1 x (K+1+K2)`` matrix with orthonormal columns (full rank, ``||G||_2 = 1``);
- the text is ``y = H [z; zeta]`` with ``H = I`` (Cor. 5.7's ``[I; 0]``
  without zero rows) and ``zeta = e_j`` with probability ``p_j``, independent
  of ``z``; Cor. 5.7's ``p = (1/3, 2/3)`` is the default.

The model is Sec. 5's ``f_W(x, y) = <W x, y>`` (``g(x) = W x``, ``h(y) = y``,
unnormalized), trained from ``W = 0`` by one of:

- ``square`` (Sec. 5.1): ``E ||W x - y||^2``, solved exactly by least
  squares. Its optimum ``W x = H [z; E zeta]`` scores a prompt by its own
  ``zeta``, so zero-shot fails with probability >= 1/(3K) (Cor. 5.7); here
  the optimum's error is ``(1/3)(1 - 3^-(K-1))``, 0.329 at K = 5 (derived
  here from Cor. 5.7's setting). Least squares fits each class's sample mean of
  ``zeta`` instead of ``E zeta``, which moves the error of a finite
  training set by a few points either way;
- ``clip``: SGD on Eq. 3.1 (both directions *summed*) through the library's
  :func:`~uncurated.objectives.functional.infonce`, learning rate
  ``LR_SCALE * tau``. Its margin grows like ``tau log T`` (Thm 6.2);
- ``clip+reg``: the same plus ``lam E ||W x - y||^2``, the theory form of the
  positive-pair regularizer (Thm G.1), written through the library's
  :func:`~uncurated.objectives.functional.positive_pair_regularizer`
  (:func:`squared_alignment`). The paper's ``-mean <W x, y>`` is unbounded
  below without normalization (Sec. 6 states it on normalized features). It pulls ``W`` towards
  the oracle, whose margin is ``gamma`` (Thm 6.3).

``oracle`` is Lemma 5.4's ``W* = H (H^T H)^-1 P (G^T G)^-1 G^T``, with
``<W* x, y'> = <z, z'>``: zero error and margin exactly ``gamma``.

Each model is scored on fresh images against one freshly drawn prompt
``y_k = H [v_k; zeta_k]`` per class and image (:mod:`.margins`): zero-shot
error, mean zero-shot margin, the Eq. 4.2 certificate at its temperature,
``alpha_hat`` and ``alpha`` (Eqs. A.3 and A.1) of batches of 64 test pairs
at threshold ``gamma / 2`` (the margin Thm G.1 guarantees) and ``E ||W x - y||^2``.

``lam``: the paper's 0.1 (for ``-mean diag`` on cosines) does nothing
visible in a run this short; :data:`DEFAULT_LAM` = 10 does (longer runs
of 20k to 100k steps needed 1 to 30). With
``lr = 0.05 tau`` the regularizer's pull per step scales with ``lam tau``,
so the smaller the temperature, the larger ``lam`` must be.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..objectives.functional import infonce, positive_pair_regularizer
from ..toy_defaults import CLIP_MARGIN_LAM as DEFAULT_LAM
from ..toy_defaults import CLIP_MARGIN_STEPS as DEFAULT_STEPS
from ..toy_defaults import CLIP_MARGIN_TEMPERATURES as DEFAULT_TEMPERATURES
from ..validation import check_choice, check_integer, check_range
from .margins import alpha_sandwich, lse_certificate, top_r_error, zero_shot_margins

#: The objectives of a run, in the order of the table.
OBJECTIVES = ("oracle", "square", "clip", "clip+reg")

DEFAULT_BATCH_SIZE = 16
DEFAULT_TRAIN_PAIRS = 4096
DEFAULT_TEST_PAIRS = 2048

#: SGD's learning rate is ``LR_SCALE * tau``: the gradient of Eq. 3.1 scales with 1 / tau (Thm 5.5 has eta ~ tau^2).
LR_SCALE = 0.05

#: The batch size of the App. A margin statistics (the paper's evaluation batch, Sec. 7.1).
EVAL_BATCH_SIZE = 64


@dataclass(frozen=True)
class CaseStudy:
    """The data model of Def. 5.3 with Cor. 5.7's text noise; draw from it with :meth:`sample` and :meth:`prompts`.

    Attributes:
        vocab: (K, K1) the shared features ``v_k`` as rows, unit norm.
        image_dictionary: ``G``, (d1, K1 + K2), full column rank.
        text_dictionary: ``H``, (d2, K1 + K3), full column rank.
        image_noise: ``r``, the half-width of ``xi ~ U[-r, r]^{K2}``.
        text_noise_probs: (K3,) ``P(zeta = e_j)``; empty for ``zeta = 0``.
    """

    vocab: Tensor
    image_dictionary: Tensor
    text_dictionary: Tensor
    image_noise: float
    text_noise_probs: Tensor

    @property
    def classes(self) -> int:
        return self.vocab.shape[0]

    @property
    def gamma(self) -> float:
        """The data margin ``1 - max_{k != k'} <v_k, v_k'>``."""
        gram = self.vocab @ self.vocab.T
        return 1.0 - float(gram[~torch.eye(self.classes, dtype=torch.bool)].max())

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """``n`` pairs ``(x, y, labels)``: images (n, d1), texts (n, d2) and the classes of their shared ``z``."""
        n = check_integer("n", n, 1)
        labels = torch.randint(self.classes, (n,), generator=generator)
        return self.images(labels, generator), self.texts(labels, generator), labels

    def images(self, labels: Tensor, generator: torch.Generator) -> Tensor:
        """``x = G [v_label; xi]`` for each label, with fresh ``xi``."""
        noise_dim = self.image_dictionary.shape[1] - self.vocab.shape[1]
        xi = self.image_noise * (2 * torch.rand(len(labels), noise_dim, generator=generator, dtype=torch.float64) - 1)
        return torch.cat([self.vocab[labels], xi], dim=1) @ self.image_dictionary.T

    def texts(self, labels: Tensor, generator: torch.Generator) -> Tensor:
        """``y = H [v_label; zeta]`` for each label, with fresh ``zeta``."""
        probs = self.text_noise_probs
        zeta = torch.zeros(len(labels), len(probs), dtype=torch.float64)
        if len(probs):
            zeta[torch.arange(len(labels)), torch.multinomial(probs, len(labels), True, generator=generator)] = 1.0
        return torch.cat([self.vocab[labels], zeta], dim=1) @ self.text_dictionary.T

    def prompts(self, n: int, generator: torch.Generator) -> Tensor:
        """(n, K, d2): for each of ``n`` images, one fresh prompt ``y_k = H [v_k; zeta_k]`` per class ``k``."""
        n = check_integer("n", n, 1)
        labels = torch.arange(self.classes).repeat(n)
        return self.texts(labels, generator).view(n, self.classes, -1)

    def oracle(self) -> Tensor:
        """Lemma 5.4's ``W* = H (H^T H)^-1 P (G^T G)^-1 G^T``, ``P = [[I, 0], [0, 0]]`` of rank K1."""
        G, H = self.image_dictionary, self.text_dictionary
        shared = self.vocab.shape[1]
        P = torch.zeros(H.shape[1], G.shape[1], dtype=torch.float64)
        P[:shared, :shared] = torch.eye(shared, dtype=torch.float64)
        return H @ torch.linalg.solve(H.T @ H, P) @ torch.linalg.solve(G.T @ G, G.T)


def make_case_study(
    generator: torch.Generator,
    *,
    classes: int = 5,
    gamma: float = 0.2,
    image_noise_dim: int = 3,
    image_dim: int = 12,
    image_noise: float = 0.5,
    text_noise_probs: Sequence[float] = (1 / 3, 2 / 3),
) -> CaseStudy:
    """A :class:`CaseStudy` with margin ``gamma``; ``G`` is drawn from ``generator`` (Q of a Gaussian's QR).

    The defaults (K = 5, gamma = 0.2, d1 = 12, K2 = 3) are a small instance of Def. 5.3 with ``||xi||``
    at most ``0.5 sqrt(3)``. Cor. 5.7 needs
    ``gamma < 1/3`` for its error floor; ``text_noise_probs=()`` gives the
    ``zeta = 0`` setting of Thms 6.2 and 6.3.
    """
    classes = check_integer("classes", classes, 2)
    gamma = check_range("gamma", gamma, 0.0, 1.0, low_open=True)
    image_noise_dim = check_integer("image_noise_dim", image_noise_dim, 0)
    image_noise = check_range("image_noise", image_noise, 0.0)
    shared = classes + 1
    image_dim = check_integer("image_dim", image_dim, shared + image_noise_dim)
    probs = torch.tensor([check_range("text_noise_probs", p, 0.0, 1.0) for p in text_noise_probs], dtype=torch.float64)
    if len(probs) and abs(float(probs.sum()) - 1.0) > 1e-9:
        raise ValueError(f"text_noise_probs must sum to 1, got {tuple(text_noise_probs)}")
    vocab = torch.zeros(classes, shared, dtype=torch.float64)
    vocab[:, :classes] = math.sqrt(gamma) * torch.eye(classes, dtype=torch.float64)
    vocab[:, classes] = math.sqrt(1.0 - gamma)
    gaussian = torch.randn(image_dim, shared + image_noise_dim, generator=generator, dtype=torch.float64)
    return CaseStudy(
        vocab=vocab,
        image_dictionary=torch.linalg.qr(gaussian).Q,
        text_dictionary=torch.eye(shared + len(probs), dtype=torch.float64),
        image_noise=image_noise,
        text_noise_probs=probs,
    )


def squared_alignment(a: Tensor, b: Tensor) -> Tensor:
    """``E ||a - b||^2 = E ||a||^2 + E ||b||^2 + 2 R``, ``R`` the positive-pair regularizer (Sec. 6, Thm G.1)."""
    return a.pow(2).sum(dim=1).mean() + b.pow(2).sum(dim=1).mean() + 2 * positive_pair_regularizer(a, b)


def fit_square_loss(x: Tensor, y: Tensor) -> Tensor:
    """The minimum-norm ``W`` minimizing ``mean ||W x_i - y_i||^2`` (Sec. 5.1), by the pseudo-inverse."""
    return (torch.linalg.pinv(x) @ y).T


def fit_clip(
    x: Tensor,
    y: Tensor,
    *,
    tau: float,
    lam: float = 0.0,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Tensor:
    """SGD from ``W = 0`` on Eq. 3.1 (+ ``lam E ||W x - y||^2`` when ``lam > 0``), cycling through fixed batches.

    The pairs are cut in order into ``len(x) // batch_size`` batches (the rest
    is dropped), and step ``t`` uses batch ``t mod n``: SGD on the epoch loss
    ``L_S`` of Sec. 3. Learning rate ``LR_SCALE * tau``; deterministic.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    lam = check_range("lam", lam, 0.0)
    steps = check_integer("steps", steps, 0)
    batch_size = check_integer("batch_size", batch_size, 2)
    batches = len(x) // batch_size
    if batches < 1:
        raise ValueError(f"batch_size must be at most the number of training pairs {len(x)}, got {batch_size}")
    xs = x[: batches * batch_size].view(batches, batch_size, -1)
    ys = y[: batches * batch_size].view(batches, batch_size, -1)
    W = torch.zeros(y.shape[1], x.shape[1], dtype=x.dtype, requires_grad=True)
    optimizer = torch.optim.SGD([W], lr=LR_SCALE * tau)
    with _single_thread():
        for step in range(steps):
            image, text = xs[step % batches] @ W.T, ys[step % batches]
            loss = infonce(image, text, temperature=tau, direction_reduction="sum", normalize=False)
            if lam > 0:
                loss = loss + lam * squared_alignment(image, text)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return W.detach()


@contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, then restore the count.

    The matrices are tiny (16 x 12); extra threads only add synchronization,
    which made the SGD loop 5 to 9 times slower on a loaded 2-core machine.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class MarginToyFit:
    """How one model of the toy was fit.

    Attributes:
        seed: seeds the data (:func:`run_clip_margin_toy`).
        objective: ``"oracle"``, ``"square"``, ``"clip"`` or ``"clip+reg"``.
        tau: the temperature (``None`` for ``oracle`` and ``square``).
        lam: the regularizer's weight (0 unless ``clip+reg``).
        steps: SGD steps (0 for the closed forms).
    """

    seed: int
    objective: str
    tau: float | None
    lam: float
    steps: int


@dataclass(frozen=True)
class EncoderScores:
    """What :func:`evaluate_encoder` measures of one model on the test pairs.

    Attributes:
        zero_shot_error: the top-1 error against one random prompt per class.
        mean_margin: the mean zero-shot margin ``f(x, y*) - max_{k != k*} f(x, y_k)``.
        certificate: the mean of Eq. 4.2's term at ``tau`` (``None`` without one).
        alpha_hat: Eq. A.3 at ``gamma / 2`` on batches of 64 test pairs, in [0, 2].
        alpha: Eq. A.1, the same counting different-class pairs only.
        alignment: ``E ||W x - y||^2`` on the test pairs.
    """

    zero_shot_error: float
    mean_margin: float
    certificate: float | None
    alpha_hat: float
    alpha: float
    alignment: float


@dataclass(frozen=True)
class MarginToyRow(EncoderScores, MarginToyFit):
    """One model of the toy, scored on the test pairs: the fields of :class:`MarginToyFit`, then those of
    :class:`EncoderScores` (a dataclass takes its bases' fields from the last base to the first, so this order
    of bases keeps the fit's fields first in the rows written to JSON)."""


def evaluate_encoder(
    study: CaseStudy, W: Tensor, x: Tensor, y: Tensor, labels: Tensor, prompts: Tensor, tau: float | None
) -> EncoderScores:
    """The scores of a :class:`MarginToyRow` for ``W`` on test pairs and their (n, K, d2) prompts."""
    image = x @ W.T
    zero_shot = torch.einsum("nd,nkd->nk", image, prompts)
    usable = len(x) // EVAL_BATCH_SIZE * EVAL_BATCH_SIZE
    if usable == 0:
        raise ValueError(f"the test set needs at least {EVAL_BATCH_SIZE} pairs for the App. A batches, got {len(x)}")
    batch_image = image[:usable].view(-1, EVAL_BATCH_SIZE, image.shape[1])
    batch_scores = batch_image @ y[:usable].view(-1, EVAL_BATCH_SIZE, y.shape[1]).transpose(1, 2)
    sandwich = alpha_sandwich(batch_scores, labels[:usable].view(-1, EVAL_BATCH_SIZE), study.gamma / 2)
    return EncoderScores(
        zero_shot_error=top_r_error(zero_shot, labels),
        mean_margin=float(zero_shot_margins(zero_shot, labels).mean()),
        certificate=None if tau is None else float(lse_certificate(zero_shot, labels, tau).mean()),
        alpha_hat=sandwich.alpha_hat,
        alpha=sandwich.alpha,
        alignment=float(squared_alignment(image, y)),
    )


def run_clip_margin_toy(
    seeds: Sequence[int] = (0,),
    *,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    lam: float = DEFAULT_LAM,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    train_pairs: int = DEFAULT_TRAIN_PAIRS,
    test_pairs: int = DEFAULT_TEST_PAIRS,
    classes: int = 5,
    gamma: float = 0.2,
    progress: Callable[[MarginToyRow], None] | None = None,
) -> list[MarginToyRow]:
    """Fit and score every objective: per seed, ``oracle``, ``square``, then ``clip`` and ``clip+reg`` per temperature.

    Seed ``s`` draws, from ``torch.Generator().manual_seed(s)``, the study
    (:func:`make_case_study` with ``classes`` and ``gamma``), the training
    pairs, the test pairs and their prompts, in that order; every model of a
    seed sees the same data, and SGD starts from ``W = 0`` and is
    deterministic, so a row depends only on its arguments. ``progress``, when
    given, is called with each row as it is done.

    With the defaults (about 10 s of CPU) the square loss's zero-shot error
    is near Cor. 5.7's 1/3 and CLIP's is 0; CLIP's mean margin grows with
    ``tau`` (about 5 to 7 tau after 1500 steps, Thm 6.2); at ``tau <= 0.02``
    the regularizer lifts it towards ``gamma`` (Thm 6.3), while at 0.05,
    where CLIP's margin already exceeds ``gamma``, it pulls it down to about ``gamma``.
    """
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    seeds = [check_integer(f"seeds[{index}]", seed, 0) for index, seed in enumerate(seeds)]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds}")
    if not temperatures:
        raise ValueError("temperatures must hold at least one temperature")
    temperatures = [check_range(f"temperatures[{i}]", t, 0.0, low_open=True) for i, t in enumerate(temperatures)]
    lam = check_range("lam", lam, 0.0, low_open=True)
    steps = check_integer("steps", steps, 0)
    batch_size = check_integer("batch_size", batch_size, 2)
    train_pairs = check_integer("train_pairs", train_pairs, batch_size)
    test_pairs = check_integer("test_pairs", test_pairs, EVAL_BATCH_SIZE)
    specs: list[tuple[str, float | None]] = [("oracle", None), ("square", None)]
    specs += [(objective, tau) for objective in ("clip", "clip+reg") for tau in temperatures]
    rows = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        study = make_case_study(generator, classes=classes, gamma=gamma)
        x, y, _ = study.sample(train_pairs, generator)
        test = (*study.sample(test_pairs, generator), study.prompts(test_pairs, generator))
        for objective, tau in specs:
            weight = lam if objective == "clip+reg" else 0.0
            fit_steps = 0 if tau is None else steps
            W = _fit(study, x, y, objective, tau, weight, fit_steps, batch_size)
            row = MarginToyRow(
                seed=seed,
                objective=objective,
                tau=tau,
                lam=weight,
                steps=fit_steps,
                **asdict(evaluate_encoder(study, W, *test, tau)),
            )
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


def _fit(
    study: CaseStudy, x: Tensor, y: Tensor, objective: str, tau: float | None, lam: float, steps: int, batch_size: int
) -> Tensor:
    if objective == "oracle":
        return study.oracle()
    if objective == "square":
        return fit_square_loss(x, y)
    if tau is None:
        raise ValueError(f"objective {objective!r} needs a temperature")
    return fit_clip(x, y, tau=tau, lam=lam, steps=steps, batch_size=batch_size)


def format_table(rows: Sequence[MarginToyRow]) -> str:
    """The rows as text, one line each: objective, tau, lam, steps and the scores of :class:`MarginToyRow`."""
    header = (
        f"{'seed':>4}  {'objective':<9} {'tau':>6} {'lam':>5} {'steps':>5}  {'zs err':>6}  {'margin':>7}"
        f"  {'LSE':>7}  {'a_hat':>6}  {'alpha':>6}  {'|Wx-y|^2':>8}"
    )
    lines = [header]
    for row in rows:
        tau = "-" if row.tau is None else f"{row.tau:g}"
        certificate = "-" if row.certificate is None else f"{row.certificate:.4f}"
        lines.append(
            f"{row.seed:>4}  {row.objective:<9} {tau:>6} {row.lam:>5g} {row.steps:>5}  {row.zero_shot_error:6.3f}"
            f"  {row.mean_margin:7.4f}  {certificate:>7}  {row.alpha_hat:6.3f}  {row.alpha:6.3f}  {row.alignment:8.4f}"
        )
    return "\n".join(lines)


def plot_margins(rows: Sequence[MarginToyRow], path: str | Path) -> Path:
    """Write a PNG of the mean zero-shot margin against ``tau`` (log scale) for ``clip`` and ``clip+reg``.

    Points are means over seeds; ``oracle`` (whose margin is ``gamma``) and
    ``square``, which have no temperature, are horizontal lines. Draws on
    matplotlib's Agg canvas directly, leaving pyplot's global backend alone.
    Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curves: dict[str, dict[float, list[float]]] = {}
    levels: dict[str, list[float]] = {}
    weights: dict[str, float] = {}
    for row in rows:
        check_choice("objective", row.objective, OBJECTIVES)
        if row.tau is None:
            levels.setdefault(row.objective, []).append(row.mean_margin)
        else:
            curves.setdefault(row.objective, {}).setdefault(row.tau, []).append(row.mean_margin)
            weights[row.objective] = row.lam
    if not curves:
        raise ValueError("rows must hold at least one clip or clip+reg row to plot against the temperature")
    figure = Figure(figsize=(5.5, 3.8), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for objective, by_tau in curves.items():
        taus = sorted(by_tau)
        label = f"{objective} (lam = {weights[objective]:g})" if weights[objective] else objective
        ax.plot(taus, [np.mean(by_tau[tau]) for tau in taus], "o-", label=label)
    for objective, values in levels.items():
        colour, label = _LEVELS[objective]
        ax.axhline(float(np.mean(values)), linestyle="--", linewidth=1, color=colour, label=label)
    ax.set_xscale("log")
    temperatures = sorted({tau for by_tau in curves.values() for tau in by_tau})
    ax.set_xticks(temperatures, [f"{tau:g}" for tau in temperatures])
    ax.minorticks_off()
    ax.set_xlabel("temperature tau")
    ax.set_ylabel("mean zero-shot margin")
    ax.set_title("CLIP margin toy (Chen et al. 2024, Thms 6.2 and 6.3)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path


#: The colour and legend of the objectives without a temperature, drawn as horizontal lines.
_LEVELS = {"oracle": ("tab:green", "oracle W* (margin gamma)"), "square": ("tab:red", "square loss")}
