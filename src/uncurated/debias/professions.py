"""Calibrating a real pretrained text encoder: gendered profession prompts (thesis Sec. 7.4, Table 7.6).

With a sentence encoder (all-MiniLM-L6-v2), each profession gives a pair of
prompts that differ only in gender ("A photo of a male doctor." / "... female
doctor."). The calibration matrix of the thesis's generative setting (Lemma
7.2, no ``P0``: there is no spurious prompt to project out) is fitted on the
training professions' pairs and applied to every embedding. Two numbers per
split, before and after:

* the mean distance between the two prompts of a pair (Table 7.6): how much
  gender the embeddings still carry;
* profession accuracy: how often a gendered prompt's nearest neutral prompt
  ("A photo of a doctor.") is its own profession, among the split's
  professions: how much of the professions' own information survives.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .metrics import mean_pair_distance
from .projection import GENERATIVE_LAMBDA, calibration_matrix
from .prompts import load_prompts


@torch.no_grad()
def profession_study(encode, *, prompts: str = "professions-gender", lam: float = GENERATIVE_LAMBDA) -> dict:
    """Pair distances and profession accuracy before and after calibration; ``encode`` maps prompts to (n, d)."""
    prompt_set = load_prompts(prompts)
    train = prompt_set.split("train")
    z_i, z_j = _pair_embeddings(encode, train)
    calibration = calibration_matrix(z_i, z_j, lam=lam)
    identity = torch.eye(calibration.shape[0], dtype=calibration.dtype)
    splits: dict[str, dict] = {}
    report = {"prompts": prompts, "lambda": lam, "train_pairs": len(z_i), "splits": splits}
    for name in ("train", "test"):
        subset = prompt_set.split(name)
        a, b = _pair_embeddings(encode, subset)
        neutral = _unit(encode([f"A photo of a {profession}." for profession in subset.classes]))
        splits[name] = {
            method: {
                "pair_distance": float(mean_pair_distance(matrix, a, b)),
                "profession_accuracy": _profession_accuracy(matrix, a, b, neutral),
            }
            for method, matrix in (("before", identity), ("after", calibration))
        }
    return report


def _pair_embeddings(encode, prompt_set) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = prompt_set.pairs()
    return _unit(encode([a for a, _ in pairs])), _unit(encode([b for _, b in pairs]))


def _profession_accuracy(matrix, first, second, neutral) -> float:
    """The fraction of gendered prompts whose nearest neutral prompt (after ``matrix``) is their own profession."""
    classes = _unit(neutral @ matrix.T)
    hits = [(_unit(side @ matrix.T) @ classes.T).argmax(dim=1) == torch.arange(len(side)) for side in (first, second)]
    return float(torch.cat(hits).double().mean())


def _unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.double(), dim=-1)
