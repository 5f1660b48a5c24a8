"""Malicious run folders: a pickle payload planted in any file of a checkpoint, its checksum in the manifest
rewritten to match, is refused by every loader with an error naming the checkpoint, and never runs.

The payload creates a marker file when it is unpickled, which is what an ``os.system`` payload would do,
observably; each test asserts that the marker never appears."""

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from faultutils import OBJECTIVES, TWO_VIEW, train_here

from uncurated.cli import main
from uncurated.data import write_idx
from uncurated.train import ConfigError, load_config
from uncurated.train.checkpoint import LEGACY_STATE, MANIFEST, STATE, WEIGHTS, CheckpointError, latest_checkpoint
from uncurated.train.restore import load_run

pytest_plugins = ["faults_summary"]

#: The trained run every test tampers with a copy of: one checkpoint (step 2), so nothing to fall back to.
RUN = [*TWO_VIEW, *OBJECTIVES["infonce"], "epochs=0.2", "name=run"]


class Payload:
    """Unpickling this opens ``marker`` for writing, creating it."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def plant(path: Path, marker: Path) -> None:
    torch.save(Payload(marker), path)


def rewrite_checksum(folder: Path, name: str, *, drop: str | None = None) -> None:
    """Make the manifest describe ``folder / name`` as it now is (what a forger does), dropping ``drop``."""
    manifest = json.loads((folder / MANIFEST).read_text())
    data = (folder / name).read_bytes()
    manifest["files"].pop(drop, None)
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def first_format_with_a_payload(folder: Path, marker: Path) -> None:
    """The attack on a folder of the first format: a pickled state.pt whose checksum matches."""
    (folder / STATE).unlink()
    plant(folder / LEGACY_STATE, marker)
    rewrite_checksum(folder, LEGACY_STATE, drop=STATE)
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["format"]
    (folder / MANIFEST).write_text(json.dumps(manifest))


def replaced(name: str):
    def tamper(folder: Path, marker: Path) -> None:
        plant(folder / name, marker)
        if name != MANIFEST:
            rewrite_checksum(folder, name)

    return tamper


TAMPERING = {
    "a first-format state.pt": (first_format_with_a_payload, "written by an older uncurated"),
    "a state.pt beside the files": (
        lambda folder, marker: plant(folder / LEGACY_STATE, marker),
        "written by an older uncurated",
    ),
    "state.safetensors replaced": (replaced(STATE), "state.safetensors is not a safetensors file"),
    "model.safetensors replaced": (replaced(WEIGHTS), "model.safetensors is not a safetensors file"),
    "manifest.json replaced": (replaced(MANIFEST), "unreadable manifest.json"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished two-view run on digits, and beside it the folder of a fashion-spurious run (what
    ``uncurated debias`` takes) holding the same checkpoints: each is refused before its weights are used."""
    root = tmp_path_factory.mktemp("trained")
    train_here([*RUN, f"out={root}"])
    fashion = root / "fashion"
    fashion.mkdir()
    for split, count in (("train", 40), ("t10k", 20)):
        write_idx(fashion / f"{split}-images-idx3-ubyte", torch.zeros(count, 28, 28, dtype=torch.uint8).numpy())
        write_idx(fashion / f"{split}-labels-idx1-ubyte", (torch.arange(count) % 2 * 5).to(torch.uint8).numpy())
    spurious = load_config(
        [
            "preset=fashion-captions",
            "dataset=fashion-spurious",
            f"data_dir={fashion}",
            "widths=[8, 8]",
            "blocks=[1, 1]",
            "text_width=16",
            "text_heads=2",
            "progress=false",
        ]
    )
    (root / "spurious").mkdir()
    (root / "spurious" / "config.yaml").write_text(yaml.safe_dump(spurious.to_dict()))
    shutil.copytree(root / "run" / "checkpoints", root / "spurious" / "checkpoints")
    return root


def refusal_of(loader: str, run: Path, capsys) -> str:
    """The error with which ``loader`` refuses the run folder ``run``."""
    if loader == "load_run":
        with pytest.raises(CheckpointError) as error:
            load_run(run)
        return str(error.value)
    command = {
        "eval": ["eval", str(run), "--out", str(run / "eval")],
        "bound": ["bound", str(run), "--out", str(run / "bound")],
        "debias": ["debias", str(run)],
        "resume": ["train", *RUN, f"out={run.parent}", "resume=true"],
    }[loader]
    with pytest.raises(SystemExit) as stop:
        main(command)
    assert stop.value.code == (1 if loader == "resume" else 2)
    return capsys.readouterr().err


@pytest.mark.parametrize("loader", ["eval", "bound", "debias", "resume", "load_run"])
@pytest.mark.parametrize("tampering", TAMPERING)
def test_a_payload_in_any_checkpoint_file_is_refused_by_every_loader_and_never_runs(
    trained, tmp_path, capsys, loader, tampering, fault_record
):
    run = tmp_path / "run"
    shutil.copytree(trained / ("spurious" if loader == "debias" else "run"), run)
    folder = run / "checkpoints" / "step-00000002"
    marker = tmp_path / "marker"
    tamper, problem = TAMPERING[tampering]
    tamper(folder, marker)
    message = refusal_of(loader, run, capsys)
    assert not marker.exists(), f"{loader} ran the payload"
    assert str(folder) in message and problem in message, message
    fault_record("malicious checkpoint", 1, 1)


def test_the_payload_is_live_and_the_untampered_run_loads(trained, tmp_path):
    """The tests above would notice a loader that unpickles: this payload does run when unpickled."""
    marker = tmp_path / "marker"
    plant(tmp_path / "payload.pt", marker)
    torch.load(tmp_path / "payload.pt", weights_only=False)  # deliberately, on the test's own file
    assert marker.exists()
    assert load_run(trained / "run").checkpoint.name == "step-00000002"


def test_a_first_format_checkpoint_is_refused_saying_what_to_do(trained, tmp_path):
    shutil.copytree(trained / "run", tmp_path / "run")
    folder = tmp_path / "run" / "checkpoints" / "step-00000002"
    first_format_with_a_payload(folder, tmp_path / "marker")
    with pytest.raises(CheckpointError) as error:
        latest_checkpoint(folder.parent)
    message = str(error.value)
    assert f"no valid checkpoint in {folder.parent}" in message
    assert "state.pt, a pickle, which can run any code when loaded" in message
    assert "Retrain the run; or, only if you trust whoever wrote the folder, convert it with" in message
    assert not (tmp_path / "marker").exists()


def test_a_python_tag_in_the_run_config_is_refused_naming_the_file(trained, tmp_path, capsys, fault_record):
    shutil.copytree(trained / "run", tmp_path / "run")
    config = tmp_path / "run" / "config.yaml"
    config.write_text(f"!!python/object/apply:builtins.open ['{tmp_path / 'marker'}', 'w']\n")
    with pytest.raises(ConfigError, match=rf"{config} is not a YAML file of plain values"):
        load_run(tmp_path / "run")
    with pytest.raises(SystemExit):
        main(["eval", str(tmp_path / "run")])
    assert f"{config} is not a YAML file of plain values" in capsys.readouterr().err
    assert not (tmp_path / "marker").exists()
    fault_record("malicious checkpoint", 1, 1)


#: A parallel=fsdp run in two processes, whose checkpoints hold the weights as DCP's shards (run with out=...).
SHARDED_RUN = [
    "preset=digits",
    "progress=false",
    "log_every=1",
    "probe_train_size=0",
    "augment=none",
    "norm=none",
    "batch_size=64",
    "pipeline=two_view",
    "epochs=0.15",
    "checkpoint_every=2",
    "parallel=fsdp",
    "name=run",
]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A finished :data:`SHARDED_RUN`."""
    from training import torchrun_train

    root = tmp_path_factory.mktemp("sharded")
    torchrun_train(*SHARDED_RUN, f"out={root}")
    return root / "run"


def forge_shard_record(folder: Path) -> None:
    """Make the training state name the shards as they now are, and re-hash it (what a forger who rewrites
    everything does), so that what is tested is how the shards are read, not that they were changed."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from uncurated.train.checkpoint import SHARDS

    with safe_open(folder / STATE, framework="pt") as file:
        header = dict(file.metadata())
    manifest = json.loads((folder / MANIFEST).read_text())
    header[SHARDS] = json.dumps(
        {name: value for name, value in manifest["files"].items() if name.startswith("sharded/")}, sort_keys=True
    )
    save_file(load_file(folder / STATE), folder / STATE, metadata=header)
    rewrite_checksum(folder, STATE)


SHARD_TAMPERING = {
    # DCP's own reader would pickle.load this file; ours builds DCP's metadata classes only.
    "sharded/.metadata replaced": ("sharded/.metadata", "names io.open, which DCP"),
    # DCP reads each tensor with torch.load(weights_only=True), which builds no such object.
    "a shard file replaced": ("sharded/__0_0.distcp", "holds shards this"),
}


@pytest.mark.parametrize("loader", ["load_run", "resume"])
@pytest.mark.parametrize("tampering", SHARD_TAMPERING)
def test_a_payload_in_a_sharded_checkpoint_is_refused_and_never_runs(
    sharded, tmp_path, loader, tampering, fault_record
):
    """A parallel=fsdp run's shards, a pickle payload planted in one and its checksum rewritten to match: the run
    is neither evaluated nor resumed from them, and the payload never runs (the checksums guard against damage
    only: the manifest sits beside the files)."""
    from training import torchrun_train

    run = tmp_path / "run"
    shutil.copytree(sharded, run)
    folder = latest_checkpoint(run / "checkpoints")
    name, problem = SHARD_TAMPERING[tampering]
    marker = tmp_path / "marker"
    if name.endswith(".metadata"):
        (folder / name).write_bytes(pickle.dumps(Payload(marker)))
    else:
        plant(folder / name, marker)
    rewrite_checksum(folder, name)
    forge_shard_record(folder)
    if loader == "load_run":
        with pytest.raises(CheckpointError) as error:
            load_run(run)
        message = str(error.value)
    else:
        resumed = torchrun_train(*SHARDED_RUN, f"out={tmp_path}", "resume=true", succeed=False)
        assert resumed.returncode != 0
        message = resumed.stderr
    assert not marker.exists(), f"{loader} ran the payload"
    assert str(folder) in message and problem in message, message
    fault_record("malicious checkpoint", 1, 1)


def test_a_shard_of_another_step_is_refused_naming_it(sharded, tmp_path):
    """A process's shard copied in from the run's checkpoint of another step (the same size), the manifest re-hashed:
    the training state, which carries the run and the step, names the shards the run wrote, so the folder is refused
    as put together, never loaded, and not passed over for an older checkpoint."""
    from uncurated.train.checkpoint import CheckpointIdentityError

    run = tmp_path / "run"
    shutil.copytree(sharded, run)
    newest, older = run / "checkpoints" / "step-00000004", run / "checkpoints" / "step-00000002"
    name = "sharded/__1_0.distcp"
    assert (newest / name).stat().st_size == (older / name).stat().st_size
    shutil.copy(older / name, newest / name)
    rewrite_checksum(newest, name)
    with pytest.raises(CheckpointIdentityError) as error:
        load_run(run)
    assert f"{newest} holds a shard its run did not write at this step: {name}" in str(error.value)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_payload_in_the_shards_metadata_is_refused_as_itself_before_dcp_reads(tmp_path):
    """DCP's load catches what its reader's ``read_metadata`` raises and reports ``metadata is None`` (torch 2.11
    without the cause): the refusal is raised before DCP reads, as itself, by the loader and by the export, and the
    payload never runs."""
    from uncurated.train import parallel

    folder, marker = tmp_path / "sharded", tmp_path / "marker"
    model = torch.nn.Linear(3, 2)
    parallel.save_shards({"model": dict(model.state_dict())}, folder)
    assert set(parallel.read_whole_weights(folder)) == {"weight", "bias"}
    (folder / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(pickle.UnpicklingError, match="names io.open, which DCP"):
        parallel.load_shards(folder, model, {})
    with pytest.raises(pickle.UnpicklingError, match="names io.open, which DCP"):
        parallel.read_whole_weights(folder)
    (folder / ".metadata").write_bytes(b"")
    with pytest.raises(RuntimeError, match=f"reading the shards in {folder} failed: EOFError"):
        parallel.load_shards(folder, model, {})
    assert not marker.exists()
