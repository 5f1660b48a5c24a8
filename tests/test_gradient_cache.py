"""Micro-batches with the whole batch's gradients (gradient caching), for every objective."""

import copy
from itertools import pairwise

import pytest
import torch
from torch import nn

from uncurated import objectives
from uncurated.train.gradient_cache import GradientCache, micro_batches

BATCH, DIM, MICRO = 22, 6, 5  # micro-batches of 5, 4, 4, 4, 5


def encoder(norm: str = "layer", dropout: float = 0.0) -> nn.Module:
    norms = {"layer": nn.LayerNorm(16), "group": nn.GroupNorm(4, 16), "batch": nn.BatchNorm1d(16)}
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(DIM, 16), norms[norm], nn.GELU(), nn.Dropout(dropout), nn.Linear(16, 8)).double()


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(BATCH, DIM, generator=generator, dtype=torch.float64) for _ in range(2))


def build(name: str) -> nn.Module:
    params = {"num_samples": 3 * BATCH} if objectives.OBJECTIVES[name].defaults().get("num_samples") else {}
    if name == "nuclr":
        params["freeze_epochs"] = 0  # zeta moves from the first step, so its update is compared too
    return objectives.build(name, **params)


def call(objective: nn.Module, a, b, index):
    if isinstance(objective, objectives.StatefulObjective):
        objective.set_epoch(0.0)
        objective.begin_step()
        return objective(a, b, index=index)
    return objective(a, b)


def embed_part(model, x, y, noise: float = 0.0):
    """Two views of the samples ``part``; ``noise`` adds a random draw (an augmentation's stand-in)."""

    def embed(part: slice):
        first, second = x[part], y[part]
        if noise:
            first = first + noise * torch.randn_like(first)
            second = second + noise * torch.randn_like(second)
        return model(first), model(second)

    return embed


def whole_batch_step(model, objective, x, y, index):
    model.zero_grad(set_to_none=True)
    objective.zero_grad(set_to_none=True)
    a, b = embed_part(model, x, y)(slice(None))
    loss = call(objective, a, b, index)
    loss.backward()
    return loss.detach()


def cached_step(model, objective, x, y, index, micro=MICRO, noise=0.0):
    model.zero_grad(set_to_none=True)
    objective.zero_grad(set_to_none=True)
    cache = GradientCache(model, micro)
    a, b = cache.embed(embed_part(model, x, y, noise), BATCH)
    a.requires_grad_()
    b.requires_grad_()
    loss = call(objective, a, b, index)
    loss.backward()
    cache.backward(a.grad, b.grad)
    return loss.detach()


def gradients(*modules: nn.Module) -> dict[str, torch.Tensor]:
    return {
        f"{k}.{name}": p.grad.clone()
        for k, module in enumerate(modules)
        for name, p in module.named_parameters()
        if p.grad is not None
    }


def assert_same_state(objective, other):
    if isinstance(objective, objectives.StatefulObjective):
        for key, tensor in objective.state.tensors.items():
            torch.testing.assert_close(other.state.tensors[key], tensor, rtol=1e-12, atol=1e-12, msg=key)
        assert other.state.scalar_values() == pytest.approx(objective.state.scalar_values(), rel=1e-12)


@pytest.mark.parametrize("norm", ["layer", "group"])
@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_micro_batches_give_the_whole_batch_gradients_and_state(name, norm):
    """float64, encoders without batch norm: equal gradients (model and objective), losses and per-sample state,
    over two steps so that the state written by the first feeds the gradient of the second."""
    model, objective = encoder(norm), build(name).double()
    twin_model, twin_objective = copy.deepcopy(model), copy.deepcopy(objective)
    index = torch.randperm(3 * BATCH, generator=torch.Generator().manual_seed(2))[:BATCH]
    for step in range(2):
        x, y = inputs(seed=step)
        whole = whole_batch_step(model, objective, x, y, index)
        micro = cached_step(twin_model, twin_objective, x, y, index)
        torch.testing.assert_close(micro, whole, rtol=1e-12, atol=1e-12)
        expected, got = gradients(model, objective), gradients(twin_model, twin_objective)
        assert got.keys() == expected.keys() and expected
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-10, atol=1e-12, msg=f"step {step}: {key}")
        assert_same_state(objective, twin_objective)
        with torch.no_grad():  # a plain SGD step, so the second step starts from moved weights
            for p, q in zip(
                [*model.parameters(), *objective.parameters()],
                [*twin_model.parameters(), *twin_objective.parameters()],
                strict=True,
            ):
                if p.grad is not None:
                    p -= 0.1 * p.grad
                    q -= 0.1 * q.grad


def chunked_with_graph(model, objective, x, y, index, noise):
    """The reference for random forward passes and batch norm: each micro-batch embedded once, with its graph."""
    model.zero_grad(set_to_none=True)
    embed = embed_part(model, x, y, noise)
    pieces = [embed(part) for part in micro_batches(BATCH, MICRO)]
    a, b = (torch.cat(side) for side in zip(*pieces, strict=True))
    loss = call(objective, a, b, index)
    loss.backward()
    return loss.detach()


def test_random_draws_are_replayed_in_the_second_forward_pass():
    """Dropout and a random augmentation: the gradient is that of the first pass's draws, and the generators end
    where a single pass over the micro-batches leaves them."""
    model, objective = encoder(dropout=0.3), build("infonce")
    twin = copy.deepcopy(model)
    x, y = inputs()
    index = torch.arange(BATCH)
    torch.manual_seed(5)
    expected = chunked_with_graph(model, objective, x, y, index, noise=0.5)
    after_reference = torch.get_rng_state()
    torch.manual_seed(5)
    got = cached_step(twin, objective, x, y, index, noise=0.5)
    assert torch.equal(torch.get_rng_state(), after_reference)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    reference = gradients(model)
    for key, grad in gradients(twin).items():
        torch.testing.assert_close(grad, reference[key], rtol=1e-10, atol=1e-12, msg=key)
    torch.manual_seed(5)
    whole = whole_batch_step(copy.deepcopy(model), objective, x, y, index)  # dropout drawn for the whole batch
    assert not torch.allclose(whole, expected)


def test_batch_norm_normalizes_each_micro_batch_and_updates_its_statistics_once_per_micro_batch():
    """With batch norm the micro-batches' gradients are exact for per-micro-batch statistics (not the whole
    batch's), and the running statistics see each micro-batch once, as in one pass over them."""
    model, objective = encoder("batch"), build("infonce")
    twin = copy.deepcopy(model)
    x, y = inputs()
    index = torch.arange(BATCH)
    expected = chunked_with_graph(model, objective, x, y, index, noise=0.0)
    got = cached_step(twin, objective, x, y, index)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    reference = gradients(model)
    for key, grad in gradients(twin).items():
        torch.testing.assert_close(grad, reference[key], rtol=1e-10, atol=1e-12, msg=key)
    for (key, buffer), saved in zip(twin.named_buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(buffer, saved, rtol=1e-12, atol=0, msg=key)
    assert int(twin[1].num_batches_tracked) == 2 * -(-BATCH // MICRO)  # two views per micro-batch
    whole = whole_batch_step(copy.deepcopy(encoder("batch")), objective, x, y, index)
    assert not torch.allclose(whole, expected)  # whole-batch statistics are another model


@pytest.mark.parametrize("size", [1, 4, 5, 22, 257])
@pytest.mark.parametrize("micro", [1, 4, 5, 256])
def test_micro_batches_cover_the_batch_in_even_parts_of_at_most_the_given_size(size, micro):
    parts = micro_batches(size, micro)
    lengths = [part.stop - part.start for part in parts]
    assert len(parts) == -(-size // micro) and parts[0].start == 0 and parts[-1].stop == size
    assert all(left.stop == right.start for left, right in pairwise(parts))
    assert max(lengths) <= micro and max(lengths) - min(lengths) <= 1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"micro_batch_size must be an integer >= 1, got 0"):
        GradientCache(encoder(), 0)
    with pytest.raises(RuntimeError, match=r"backward\(\) needs the embeddings of a call to embed\(\) first"):
        GradientCache(encoder(), 4).backward(torch.zeros(1), torch.zeros(1))


# The training loop -----------------------------------------------------------------------------------------------

from training import final_weights, logged_losses, torchrun_train  # noqa: E402

from uncurated.train import ConfigError, load_config, train  # noqa: E402

RUN = [
    "preset=digits",
    "progress=false",
    "log_every=1",
    "probe_train_size=0",
    "augment=none",
    "norm=none",
    "projection_layers=1",
    "epochs=0.3",
    "batch_size=64",
]


@pytest.mark.parametrize("objective", ["simclr", "nuclr"])
def test_a_run_in_micro_batches_logs_the_losses_of_the_whole_batch_run(tmp_path, objective):
    common = [*RUN, f"out={tmp_path}", f"objective={objective}"]
    if objective == "nuclr":
        common += ["objective.freeze_epochs=0", "objective.temperature=0.2"]
    train(load_config([*common, "name=whole"]))
    train(load_config([*common, "name=micro", "micro_batch_size=24"]))  # 64 = 21 + 21 + 22
    whole, micro = logged_losses(tmp_path / "whole"), logged_losses(tmp_path / "micro")
    assert len(whole) > 3
    assert micro == pytest.approx(whole, rel=1e-5)
    one, other = final_weights(tmp_path / "whole"), final_weights(tmp_path / "micro")
    for name in one:
        torch.testing.assert_close(other[name], one[name], rtol=1e-4, atol=1e-5, msg=name)


def test_norm_none_covers_the_projection_head_so_the_digits_preset_micro_batches_exactly(tmp_path, capsys):
    """The digits preset as it is (MLP, two-layer projection head, augmentation) with norm=none: no batch norm
    anywhere, so micro-batches of 32 log the whole batch's losses, and no notice is printed."""
    common = ["preset=digits", "norm=none", "progress=false", "log_every=1", "probe_train_size=0", "epochs=0.5"]
    common += [f"out={tmp_path}"]
    train(load_config([*common, "name=whole"]))
    train(load_config([*common, "name=micro", "micro_batch_size=32"]))
    whole, micro = logged_losses(tmp_path / "whole"), logged_losses(tmp_path / "micro")
    assert len(whole) >= 5
    assert micro == pytest.approx(whole, rel=1e-4)
    assert "batch norm" not in capsys.readouterr().err


def test_a_micro_batched_run_with_batch_norm_says_so_once(tmp_path, capsys):
    train(load_config(["preset=digits", "progress=false", "epochs=0.1", f"out={tmp_path}", "micro_batch_size=32"]))
    err = capsys.readouterr().err
    assert err.count("with batch norm in the model") == 1
    assert "the gradient is the per-micro-batch one, not the whole batch's" in err
    assert "projection.net.1" in err or "net.1" in err


def test_an_image_text_run_in_micro_batches_logs_the_losses_of_the_whole_batch_run(tmp_path):
    """Captions are sliced with their images; the text transformer pads each micro-batch to its own longest
    caption, which changes no real token's output."""
    from test_train_build import write_image_text_files

    _, csv_path, _ = write_image_text_files(tmp_path / "data")
    common = [
        f"out={tmp_path}",
        "progress=false",
        "log_every=1",
        "probe_train_size=0",
        "dataset=csv",
        f"data_dir={csv_path}",
        "pipeline=image_text",
        "image_mode=L",
        "augment=none",
        "image_encoder=mlp",
        "norm=none",
        "projection_layers=1",
        "probe_layer=encoder",
        "widths=[32]",
        "batch_size=16",
        "epochs=2",
        "text_width=16",
        "text_heads=2",
        "max_skipped_fraction=0.2",
        "objective=clip",
    ]
    train(load_config([*common, "name=whole"]))
    train(load_config([*common, "name=micro", "micro_batch_size=5"]))
    assert logged_losses(tmp_path / "micro") == pytest.approx(logged_losses(tmp_path / "whole"), rel=1e-5)


def test_two_processes_in_micro_batches_match_one_process_of_the_whole_batch(tmp_path):
    """gloo on CPU: each rank micro-batches its half of the batch; the embeddings are gathered and each rank
    back-propagates its slice of their gradient; the per-sample state is updated once per step on every rank."""
    common = [*RUN, f"out={tmp_path}", "objective=sogclr"]
    train(load_config([*common, "name=one"]))
    torchrun_train(*common, "name=two", "micro_batch_size=12")
    one, two = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    assert logged_losses(tmp_path / "two") == pytest.approx(logged_losses(tmp_path / "one"), rel=1e-5)


def test_micro_batch_size_is_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"micro_batch_size must be in \[0, inf\], got -1"):
        load_config([*RUN, "micro_batch_size=-1"])
    with pytest.raises(ConfigError, match=r"micro_batch_size applies to point_sets=false"):
        load_config([*RUN, "point_sets=true", "micro_batch_size=8"])
