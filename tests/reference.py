"""Independent reference implementations of the objectives, written from the papers' formulas.

Plain per-anchor loops over explicit positive and negative lists (the thesis's
Sec. 10 pseudo-code, Chen et al. 2024, eq. 3.1, the SigLIP and CyCLIP papers): slow and
obvious, so that the engine-based objectives can be checked against them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def unit(x):
    return F.normalize(x, dim=-1)


def anchors_positives_negatives(a, b, pairing, labels=None):
    """Yield (anchor, positive, negatives, total negative slots N) per anchor, from first principles."""
    batch = a.shape[0]
    if pairing == "cross":
        directions = [(a, b), (b, a)]
        for anchors, candidates in directions:
            rows = []
            for i in range(batch):
                others = [j for j in range(batch) if j != i]
                kept = [j for j in others if labels is None or labels[j] != labels[i]]
                rows.append((anchors[i], candidates[i], candidates[kept], len(others)))
            yield rows
    else:
        views = torch.cat([a, b])
        view_labels = None if labels is None else torch.cat([labels, labels])
        rows = []
        for i in range(2 * batch):
            partner = (i + batch) % (2 * batch)
            others = [j for j in range(2 * batch) if j not in (i, partner)]
            kept = [j for j in others if view_labels is None or view_labels[j] != view_labels[i]]
            rows.append((views[i], views[partner], views[kept], len(others)))
        yield rows


def _batch_loss(row_fn, a, b, pairing, reduction="mean", labels=None):
    per_direction = []
    for rows in anchors_positives_negatives(a, b, pairing, labels):
        per_direction.append(torch.stack([row_fn(*row) for row in rows]).mean())
    total = sum(per_direction)
    return total / len(per_direction) if reduction == "mean" else total


def infonce(a, b, t, pairing, reduction="mean", labels=None):
    a, b = unit(a), unit(b)

    def row(x, pos, negs, n_slots):
        s_pos = x @ pos / t
        # Supervised oracle (eq. 3.1, Q = N): N times the mean over true negatives.
        neg_sum = torch.exp(negs @ x / t).mean() * n_slots
        return -torch.log(torch.exp(s_pos) / (torch.exp(s_pos) + neg_sum))

    return _batch_loss(row, a, b, pairing, reduction, labels)


def dcl(a, b, t, pairing, tau_plus, reduction="mean", clamp="min", labels=None):
    a, b = unit(a), unit(b)

    def row(x, pos, negs, n_slots):
        positive = torch.exp(x @ pos / t)
        negative_mean = torch.exp(negs @ x / t).mean()
        g = (negative_mean - tau_plus * positive) / (1 - tau_plus)
        floor = math.exp(-1 / t)
        if clamp == "fallback" and g < floor:
            return -torch.log(positive / (positive + n_slots * negative_mean))
        g = torch.clamp(g, min=floor)
        return -torch.log(positive / (positive + n_slots * g))

    return _batch_loss(row, a, b, pairing, reduction, labels)


def hcl(a, b, t, pairing, beta, tau_plus, reduction="mean"):
    a, b = unit(a), unit(b)

    def row(x, pos, negs, n_slots):
        positive = torch.exp(x @ pos / t)
        neg = torch.exp(negs @ x / t)
        importance = neg**beta
        reweighted = (importance * neg).sum() / importance.sum()
        g = torch.clamp((reweighted - tau_plus * positive) / (1 - tau_plus), min=math.exp(-1 / t))
        return -torch.log(positive / (positive + n_slots * g))

    return _batch_loss(row, a, b, pairing, reduction)


def rince(a, b, t, pairing, q, lam, reduction="mean"):
    a, b = unit(a), unit(b)

    def row(x, pos, negs, n_slots):
        positive = torch.exp(x @ pos / t)
        negative_sum = torch.exp(negs @ x / t).sum()
        return -(positive**q) / q + (lam * (positive + negative_sum)) ** q / q

    return _batch_loss(row, a, b, pairing, reduction)


def clip_two_cross_entropies(a, b, t, reduction="mean"):
    """CLIP's loss as usually written: cross-entropy over rows plus over columns."""
    logits = unit(a) @ unit(b).T / t
    targets = torch.arange(a.shape[0])
    total = F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)
    return total / 2 if reduction == "mean" else total


def siglip_cross(a, b, t, bias):
    logits = unit(a) @ unit(b).T / t + bias
    signs = 2 * torch.eye(a.shape[0], dtype=a.dtype) - 1
    return -F.logsigmoid(signs * logits).sum() / a.shape[0]


def cyclip_terms_dense(a, b):
    """CyCLIP's two consistency terms from their definitions, with B x B matrices."""
    a, b = unit(a), unit(b)
    batch = a.shape[0]
    inmodal = ((a @ a.T) - (b @ b.T)).square().sum() / batch
    crossmodal = ((a @ b.T) - (a @ b.T).T).square().sum() / batch
    return inmodal, crossmodal


def random_batch(batch=6, dim=5, dtype=torch.float64, requires_grad=False):
    """A pair of random (batch, dim) embedding batches."""
    a = torch.randn(batch, dim, dtype=dtype, requires_grad=requires_grad)
    b = torch.randn(batch, dim, dtype=dtype, requires_grad=requires_grad)
    return a, b


def batch_objective_names():
    """The objectives without per-sample state, which take ``loss(a, b)``."""
    from uncurated import objectives

    return sorted(spec.name for spec in objectives.available() if not spec.stateful)


def nuclr_step(a, b, index, state, t, gamma, zeta_lr, n):
    """One step of NUCLR (Wang et al. 2025, Algorithm 1) on the pairs ``(a[k], b[k])`` at dataset positions
    ``index[k]``, written from the paper's formulas with plain loops; returns ``(value, surrogate)``.

    Both directions (a's anchors against b's samples, then the reverse) from the state as the step found it,
    their mean. Per direction with anchors X and contrast samples Y, B pairs:

    * Eq. 12: ``phi_i = (n - 1)/(B - 1) sum_{j != i} exp((E_ij - E_ii - zeta_Y[j]) / t)``;
    * ``u_X[i] <- (1 - gamma) u_X[i] + gamma phi_i`` (``phi_i`` at a first visit, NaN in ``state``);
    * the value ``t log(eps_i + phi_i)`` with ``eps_i = exp(-zeta_Y[i] / t)``;
    * Eq. 15 with the xi trick: the gradient of ``t phi_i / (exp(-xi_Y / t) + u_X[i])``, the weight held
      constant; ``xi_Y`` is Y's own xi, as ``eps_i`` is Y's popularity of the positive;
    * Eq. 14, one SGD step: ``zeta_Y[j] -= zeta_lr (1/n - (1/B) [eps_j / (eps_j + u_X[j]) + (n - 1)/(B - 1)
      sum_{i != j} exp((E_ij - E_ii - zeta_Y[j]) / t) / (eps_i + u_X[i])])`` (new u, old zeta, no xi trick);
    * line 7, once the popularities moved: ``xi_Y <- max(xi_Y, ||zeta_Y||_inf)``.

    ``state`` holds ``zeta_a``, ``zeta_b``, ``u_a``, ``u_b`` (length n) and the numbers ``xi_a``, ``xi_b``, and is
    updated in place.
    """
    batch = len(index)
    rescale = (n - 1) / (batch - 1)
    values, surrogates, writes = [], [], []
    for anchors, candidates, x, y in ((unit(a), unit(b), "a", "b"), (unit(b), unit(a), "b", "a")):
        zeta, u, xi = state[f"zeta_{y}"], state[f"u_{x}"], state[f"xi_{y}"]
        scores = anchors @ candidates.T
        terms = [
            [torch.exp((scores[i, j] - scores[i, i] - zeta[index[j]]) / t) if j != i else None for j in range(batch)]
            for i in range(batch)
        ]
        phi = [rescale * sum(terms[i][j] for j in range(batch) if j != i) for i in range(batch)]
        eps = [math.exp(-float(zeta[index[i]]) / t) for i in range(batch)]
        new_u = []
        for i in range(batch):
            old = float(u[index[i]])
            value = float(phi[i].detach())
            new_u.append(value if math.isnan(old) else (1 - gamma) * old + gamma * value)
        values.append(sum(t * torch.log(eps[i] + phi[i]) for i in range(batch)) / batch)
        surrogates.append(sum(t * phi[i] / (math.exp(-xi / t) + new_u[i]) for i in range(batch)) / batch)
        new_zeta = []
        for j in range(batch):
            column = sum(float(terms[i][j].detach()) / (eps[i] + new_u[i]) for i in range(batch) if i != j)
            gradient = 1 / n - (eps[j] / (eps[j] + new_u[j]) + rescale * column) / batch
            new_zeta.append(float(zeta[index[j]]) - zeta_lr * gradient)
        writes.append((x, y, new_u, new_zeta))
    for x, y, new_u, new_zeta in writes:
        for k, position in enumerate(index.tolist()):
            state[f"u_{x}"][position] = new_u[k]
            state[f"zeta_{y}"][position] = new_zeta[k]
        state[f"xi_{y}"] = max(state[f"xi_{y}"], float(state[f"zeta_{y}"].abs().max()))
    return sum(values) / 2, sum(surrogates) / 2
