"""Runs trained when ``text_encoder=transformer`` read whole words still load and resume, with the same ids."""

import json
import re

import torch
from faultutils import image_text

import uncurated.train.builders.models as model_builder
import uncurated.train.run as run
from uncurated.models.contrastive import CaptionEncoder
from uncurated.models.subword_tokenizer import word_level_tokenizer
from uncurated.train import load_config, train
from uncurated.train.builders import TOKENIZER_FILE, build_splits
from uncurated.train.restore import load_run


def test_a_run_saved_with_a_word_level_vocabulary_still_loads_and_resumes(tmp_path, monkeypatch):
    arguments = [
        *image_text(tmp_path / "data"),
        f"out={tmp_path}",
        "name=old",
        "epochs=0.2",
        "probe_train_size=64",
        "probe_layer=encoder",
    ]
    config = load_config(arguments)
    captions = build_splits(config).train.captions
    words = sorted({word for caption in captions for word in re.findall(r"[^\W_]+", caption.lower())})
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", *words]
    saved_state = {"format": "uncurated.CaptionTokenizer", "version": 1, "vocabulary": vocabulary}
    # Train as the word-level tokenizer did: its ids, its state in the checkpoint, no tokenizer.json.
    with monkeypatch.context() as patch:
        patch.setattr(model_builder, "_run_tokenizer", lambda *args: word_level_tokenizer(vocabulary))
        patch.setattr(run, "save_run_tokenizer", lambda *args: None)
        patch.setattr(CaptionEncoder, "get_extra_state", lambda self: saved_state)
        train(config)
    folder = tmp_path / "old"
    assert not (folder / TOKENIZER_FILE).exists()

    restored = load_run(folder).model
    tokenizer = restored.text.encoder.tokenizer
    assert len(tokenizer) == len(vocabulary) == restored.text.encoder.transformer.token_embedding.num_embeddings
    caption = captions[0]
    ids, _ = tokenizer.encode([caption], 24)
    assert ids[0].tolist() == [2] + [vocabulary.index(word) for word in re.findall(r"[^\W_]+", caption.lower())]
    with torch.no_grad():
        embedded = restored.embed_texts(captions[:8])

    # Resuming writes the equivalent tokenizer.json, and the run goes on with the same model.
    report = train(load_config([*arguments, "resume=true"]))
    assert report["steps"] == 2
    saved = json.loads((folder / TOKENIZER_FILE).read_text())
    assert saved["model"]["type"] == "WordLevel" and saved["model"]["vocab"]["[CLS]"] == 2
    with torch.no_grad():
        torch.testing.assert_close(load_run(folder).model.embed_texts(captions[:8]), embedded)
