"""Bad input to the public entry points: random and mutated bytes as images, captions, CSV files and tar shards,
random configurations and random command lines. Each gives a result or a clear error, never a crash."""

import argparse
import gzip
import io
import math
import tarfile

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagefiles import encode, pattern

from uncurated import cli
from uncurated.data import CsvImageTextDataset, WebDatasetShards
from uncurated.data.decode import decode_caption, decode_image
from uncurated.data.skip import REASONS, BadSample
from uncurated.train import ConfigError, TrainConfig, load_config
from uncurated.train.config import FIELDS

pytest_plugins = ["faults_summary"]

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

VALID_IMAGES = [
    encode(pattern(1, size=16)),
    encode(pattern(2, size=16, channels=3), "JPEG"),
    encode(pattern(3, size=16, channels=3), "GIF"),
    encode(pattern(4, size=16), "BMP"),
    encode(pattern(5, size=16, channels=3), "TIFF"),
    encode(pattern(6, size=16), "WEBP"),
]


@st.composite
def mutated(draw, valid: list[bytes]):
    """A valid file cut short, with bytes overwritten, or with bytes inserted."""
    data = bytearray(draw(st.sampled_from(valid)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "overwrite", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "cut":
            data = data[:at]
        elif kind == "overwrite" and data:
            data[at] = draw(st.integers(0, 255))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


def images():
    return st.one_of(st.binary(max_size=256), mutated(VALID_IMAGES))


def fuzz(fault_record, strategy, check) -> None:
    """Run ``check`` on every input hypothesis draws from ``strategy``; record how many were tried."""
    tried = []

    @FUZZ
    @given(strategy)
    def run(value):
        tried.append(value)
        check(value)

    run()
    fault_record("fuzz", len(tried), len(tried))


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow warns about some damaged TIFF tags
def test_random_bytes_as_images_decode_or_are_skipped_with_a_reason(fault_record):
    def check(data):
        for mode in ("L", "RGB"):
            try:
                image = decode_image(data, mode, size=(8, 8))
            except BadSample as bad:
                assert bad.reason in ("zero_byte", "truncated", "corrupt", "wrong_mode")
                continue
            assert image.shape == (1 if mode == "L" else 3, 8, 8) and image.dtype == torch.float32
            assert bool(torch.isfinite(image).all()) and 0 <= float(image.min()) <= float(image.max()) <= 1

    fuzz(fault_record, images(), check)


def test_random_captions_are_text_or_skipped_with_a_reason(fault_record):
    def check(data):
        try:
            caption = decode_caption(data)
        except BadSample as bad:
            assert bad.reason in ("empty_caption", "caption_encoding")
            return
        assert caption == caption.strip() and caption
        caption.encode("utf-8")

    fuzz(fault_record, st.one_of(st.binary(max_size=64), st.text(max_size=32)), check)


def test_random_csv_files_load_or_are_refused_naming_the_column(tmp_path_factory, fault_record):
    folder = tmp_path_factory.mktemp("csv")
    (folder / "a.png").write_bytes(VALID_IMAGES[0])
    cells = st.one_of(
        st.sampled_from(["a.png", "missing.png", "", "filepath", "title", "a caption"]),
        st.text(max_size=12),
        st.binary(max_size=12).map(lambda b: b.decode("latin-1")),
    )
    rows = st.lists(st.lists(cells, max_size=4), max_size=6)
    separators = st.sampled_from(["\t", ",", ";"])

    def check(drawn):
        rows, sep, header = drawn
        lines = [sep.join(header)] + [sep.join(row) for row in rows]
        path = folder / "pairs.csv"
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
        try:
            dataset = CsvImageTextDataset(path, sep=sep, size=4)
        except ValueError as error:
            assert "img_key" in str(error) or "caption_key" in str(error) or "line" in str(error)
            return
        items = [dataset[i] for i in range(len(dataset))]
        assert dataset.report.total == len(items)
        assert dataset.report.skipped == sum(item is None for item in items)
        assert all(item is None or item["image"].shape == (3, 4, 4) for item in items)

    headers = st.one_of(st.just(["filepath", "title"]), st.lists(cells, max_size=3))
    fuzz(fault_record, st.tuples(rows, separators, headers), check)


def good_shard() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for number in range(3):
            for name, content in ((f"{number}.png", VALID_IMAGES[0]), (f"{number}.txt", b"a caption")):
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_random_bytes_as_tar_shards_are_read_or_recorded_never_raised(tmp_path_factory, fault_record):
    folder = tmp_path_factory.mktemp("shards")
    shard = good_shard()
    variants = [shard, gzip.compress(shard)]

    def check(data):
        (folder / "shard.tar").write_bytes(data)
        dataset = WebDatasetShards(str(folder / "shard.tar"), size=4, samples_per_shard=1000)
        items = list(dataset)
        good = [item for item in items if item is not None]
        assert dataset.report.good == len(good)
        assert dataset.report.skipped >= len(items) - len(good)
        assert set(dataset.report.counts) <= set(REASONS)
        if data in variants:
            assert len(good) == 3

    fuzz(fault_record, st.one_of(st.binary(max_size=2048), mutated(variants), st.sampled_from(variants)), check)


KEYS = sorted(FIELDS) + ["objective.temperature", "objective.tau_plus", "no_such_key", "", "objective."]
VALUES = st.one_of(
    st.text(max_size=10),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "[1, 2]", "[", "{a: 1}", "nan", "-inf", "1e-3", "3e-4", "null", "'", "- x", "!!python/x"]),
)
OVERRIDES = st.tuples(st.sampled_from(KEYS), VALUES).map(lambda pair: f"{pair[0]}={pair[1]}")


def test_random_overrides_give_a_config_or_a_config_error(fault_record):
    def check(overrides):
        try:
            config = load_config(overrides)
        except ConfigError as error:
            assert str(error)
            return
        assert isinstance(config, TrainConfig)
        check_applied(config, overrides)

    fuzz(fault_record, st.lists(st.one_of(OVERRIDES, st.text(max_size=10)), max_size=5), check)


def check_applied(config: TrainConfig, overrides: list[str]) -> None:
    """Every plain numeric ``key=value`` that was accepted holds its value in ``config`` (the last one wins)."""
    given_values = dict(item.split("=", 1) for item in overrides if "=" in item)
    for key, text in given_values.items():
        if key in FIELDS and FIELDS[key].type in ("int", "float"):
            value = yaml.safe_load(text) if text else text
            if isinstance(value, str):
                value = float(value)
            assert getattr(config, key) == value or math.isclose(getattr(config, key), value), key


def test_random_keyword_configs_give_a_config_or_a_config_error(fault_record):
    values = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 10**6),
        st.floats(),
        st.text(max_size=8),
        st.lists(st.integers(-2, 64), max_size=3),
        st.dictionaries(st.text(max_size=4), st.integers()),
    )

    def check(kwargs):
        try:
            TrainConfig(**kwargs)
        except ConfigError as error:
            assert any(key in str(error) for key in kwargs), str(error)

    fuzz(fault_record, st.dictionaries(st.sampled_from(sorted(FIELDS)), values, max_size=4), check)


def leaf_parsers(parser: argparse.ArgumentParser, path=()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every subcommand path of the CLI and the parser that ends it."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_parsers(sub, (*path, name)))
    return found


def test_random_command_lines_give_a_result_or_a_usage_error(monkeypatch, capsys, fault_record):
    """Commands other than ``train`` are parsed only (their work is stubbed out); ``train`` checks its
    configuration for real and stops before training."""
    parsers = leaf_parsers(cli.build_parser())
    options = {path: [o for a in p._actions for o in a.option_strings] for path, p in parsers.items()}
    trained = []
    monkeypatch.setattr("uncurated.train.run.train", lambda config, notes=(): trained.append(config))
    real_build = cli.build_parser

    def build_stubbed():
        parser = real_build()
        for path, leaf in leaf_parsers(parser).items():
            if path and path != ("train",) and leaf.get_default("run") is not None:
                leaf.set_defaults(run=lambda args: 0)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_stubbed)

    @st.composite
    def command_lines(draw):
        path = draw(st.sampled_from(sorted(parsers)))
        token = st.one_of(
            st.sampled_from(options[path] or ["--x"]),
            st.text(max_size=8),
            OVERRIDES,
            st.integers(-3, 3).map(str),
            st.floats(allow_nan=True).map(repr),
        )
        return [*path, *draw(st.lists(token, max_size=5))]

    def check(argv):
        trained.clear()
        try:
            status = cli.main(argv)
        except SystemExit as stop:
            err = capsys.readouterr().err
            assert stop.code in (0, 2), (argv, stop.code)
            assert stop.code == 0 or "error" in err, (argv, err)
            return
        assert status == 0
        if argv[0] == "train" and not {"--help", "-h", "--dry-run"} & set(argv):  # --dry-run trains nothing
            (config,) = trained
            check_applied(config, [item for item in argv[1:] if "=" in item])

    fuzz(fault_record, command_lines(), check)


@pytest.mark.parametrize("tokens", [["lr=["], ["preset=bad\x00.yaml"], ["batch_size=1"], ["epochs=0"], ["lr=nan"]])
def test_bad_train_command_lines_exit_2_naming_the_key(tokens, monkeypatch, capsys):
    monkeypatch.setattr("uncurated.train.run.train", lambda config: pytest.fail("trained"))
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", *tokens])
    assert stop.value.code == 2
    key = tokens[0].split("=")[0]
    assert key in capsys.readouterr().err


def test_train_config_errors_name_the_key_and_its_range():
    with pytest.raises(ConfigError, match=r"batch_size must be in \[2, inf\], got 1"):
        TrainConfig(batch_size=1)
    with pytest.raises(ConfigError, match=r"max_skipped_fraction must be in \[0.0, 1.0\], got 1.5"):
        load_config(["max_skipped_fraction=1.5"])
    with pytest.raises(ConfigError, match=r"epochs must be in \(0.0, inf\], got 0.0"):
        load_config(["epochs=0"])
    with pytest.raises(ConfigError, match=r"lr \(from the command line\): '\[' is not a YAML value"):
        load_config(["lr=["])
    with pytest.raises(ConfigError, match=r"widths must be in \[1, inf\], got \[32, 0\]"):
        TrainConfig(widths=[32, 0])
    with pytest.raises(ConfigError, match=r"seed \(from the configuration\) must be of type int, got 'x'"):
        TrainConfig(seed="x")
