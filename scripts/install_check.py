"""Install the package as a user does and run it: the wheel alone, then each extra alone (`make install-check`).

Builds the sdist and, from it, the wheel, once. Each check gets a fresh virtual environment holding torch and that
wheel only (with one extra or none), and runs from an empty folder, so nothing of the source tree can be imported:

* the wheel alone: ``uncurated --help``; a short ``uncurated train`` on a terminal (a pseudo-terminal from
  ``script``), whose tqdm progress bar must show; the README's first Python example, read from README.md; the
  package data (a preset, the prompt sets, the label sets, ``py.typed``); and, for each extra, that using it without
  the extra fails with an error naming ``pip install 'uncurated[EXTRA]'``;
* each extra alone (``minilm``, ``hf``, ``webdataset``): one command that uses it.

torch is installed once into a folder that every environment reads through a ``.pth`` file (torch's wheel is 900 MB
unpacked; installing it into each environment cost minutes). ``--wheel`` checks a given wheel instead of building
one (how the check was shown to fail on a wheel without its package data). Exits 1 on the first failure, naming it.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = os.environ.get("TORCH", "torch==2.13.0")
EXTRAS = ("minilm", "hf", "webdataset")
SHORT_TRAINING = ["preset=digits", "epochs=0.2", "probe_baselines=false", "probe_train_size=64", "name=smoke"]

# One command per extra, run where only that extra is installed; each prints a line the check looks for.
EXTRA_COMMANDS = {
    "minilm": [
        "python",
        "-c",
        "from uncurated.models import MiniLMTextEncoder\n"
        "print('minilm', tuple(MiniLMTextEncoder()(['a dark round pattern']).shape))",
    ],
    "hf": [
        "uncurated",
        "train",
        *SHORT_TRAINING,
        "progress=false",
        "image_encoder=hf:resnet",
        "image_encoder.embedding_size=8",
        "image_encoder.hidden_sizes=[8,16]",
        "image_encoder.depths=[1,1]",
    ],
    "webdataset": [
        "python",
        "-c",
        "from uncurated.data import WebDatasetShards\n"
        "samples = list(WebDatasetShards('shards/shard-{0..1}.tar', reader='webdataset'))\n"
        "print('webdataset', len(samples), 'samples')",
    ],
}
EXTRA_EXPECTED = {"minilm": r"minilm \(1, 384\)", "hf": r"linear probe", "webdataset": r"webdataset 8 samples"}

# What using an extra without it installed does; the error must name the extra.
WITHOUT_EXTRA = {
    "minilm": "from uncurated.models import MiniLMTextEncoder\nMiniLMTextEncoder()",
    "hf": "from uncurated.models.hf import transformers_module\ntransformers_module()",
    "webdataset": "from uncurated.data import WebDatasetShards\nWebDatasetShards('shard-0.tar', reader='webdataset')",
}

# The package data: a wheel without it must fail here (and at the training, which reads the digits preset).
PACKAGE_DATA = """
from importlib.resources import files
from uncurated.debias import load_prompts
from uncurated.evaluate import label_sets
from uncurated.train.config import load_config
for name in ("celeba", "fashion-captions", "professions-gender", "professions-race", "waterbirds"):
    load_prompts(name)
for name in label_sets.CLASS_NAMES:
    label_sets.class_names(name)
for name in label_sets.TEMPLATES:
    label_sets.templates(name)
for name in ("digits", "fashion-mnist", "fashion-captions", "thesis-two-view", "cc3m-clip"):
    load_config([f"preset={name}"])
assert files("uncurated").joinpath("py.typed").is_file(), "py.typed is not installed"
print("package data: presets, prompts, label sets, py.typed")
"""

WRITE_SHARDS = """
import io, tarfile
from pathlib import Path
import numpy as np
from PIL import Image
Path("shards").mkdir(exist_ok=True)
for shard in range(2):
    with tarfile.open(f"shards/shard-{shard}.tar", "w") as tar:
        for i in range(4):
            buffer = io.BytesIO()
            Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(buffer, format="PNG")
            for name, content in ((f"{shard}{i:03d}.png", buffer.getvalue()), (f"{shard}{i:03d}.txt", b"a caption")):
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
"""


class CheckFailed(Exception):
    pass


def run(command: list[str], *, cwd: Path, env: dict | None = None, expect: str | None = None, fail: bool = False):
    """Run ``command``; it must succeed (or, with ``fail``, fail) and print ``expect`` (a regular expression)."""
    started, cpu = time.monotonic(), _children_cpu()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    shown = " ".join(command)[:160]
    if (result.returncode != 0) != fail or (expect is not None and not re.search(expect, output)):
        wanted = "to fail" if fail else "to succeed"
        looked = f" and print {expect!r}" if expect else ""
        raise CheckFailed(f"expected `{shown}` {wanted}{looked}; exit status {result.returncode}:\n{output[-3000:]}")
    took = f"{time.monotonic() - started:5.1f} s, CPU {_children_cpu() - cpu:5.1f} s"
    print(f"  ok ({took})  {shown}", flush=True)
    return output


def _children_cpu() -> float:
    """CPU seconds used by finished child processes: a duration that the machine's load does not stretch."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def readme_example() -> str:
    """The first Python code block of README.md: the library example a new user copies first."""
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), re.M | re.S)
    if not blocks:
        raise CheckFailed("README.md holds no ```python block to run")
    return blocks[0]


def build(out: Path, python: str) -> Path:
    """The sdist, and the wheel built from it (so the sdist must carry everything), in ``out``; the wheel's path."""
    tools = out / "build-tools"
    if not (tools / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "--quiet", "build"], check=True)
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    subprocess.run([str(tools / "bin" / "python"), "-m", "build", "--outdir", str(dist), str(ROOT)], check=True)
    wheels = sorted(dist.glob("uncurated-*.whl"))
    if len(wheels) != 1 or not list(dist.glob("uncurated-*.tar.gz")):
        raise CheckFailed(f"the build left {[p.name for p in dist.iterdir()]} in {dist}, not one wheel and an sdist")
    return wheels[0]


def torch_layer(out: Path, python: str) -> Path:
    """A folder holding torch (and what it needs) alone, installed once and reused by every environment."""
    layer = out / ("torch-" + re.sub(r"[^A-Za-z0-9.]+", "-", TORCH))
    if not (layer / "torch").is_dir():
        shutil.rmtree(layer, ignore_errors=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--target", str(layer), TORCH], check=True)
    return layer


def environment(out: Path, name: str, python: str, layer: Path, requirement: str) -> Path:
    """A fresh virtual environment with torch (from ``layer``) and ``requirement``; its bin folder."""
    venv = out / f"venv-{name}"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "torch-layer.pth").write_text(f"{layer}\n")
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", requirement], check=True)
    return venv / "bin"


def check_base(bin_folder: Path, env: dict, work: Path, version: str) -> None:
    python = str(bin_folder / "python")
    run(
        [python, "-c", "import uncurated, sys; assert 'site-packages' in uncurated.__file__, uncurated.__file__"],
        cwd=work,
        env=env,
    )
    run([str(bin_folder / "uncurated"), "--help"], cwd=work, env=env, expect="usage: uncurated")
    run([str(bin_folder / "uncurated"), "--version"], cwd=work, env=env, expect=rf"^uncurated {re.escape(version)}$")
    run([python, "-c", PACKAGE_DATA], cwd=work, env=env, expect="package data")
    # tqdm draws its bar only on a terminal: `script` gives the training one (-e: its exit status is the command's),
    # sized with stty (a pseudo-terminal without a controlling one has 0 columns, and the bar would be empty).
    training = " ".join([str(bin_folder / "uncurated"), "train", *SHORT_TRAINING, f"out={work / 'runs'}"])
    bar = r"100%\|[^|]*\| (\d+)/\1 \[[^\]]*(step/s|s/step), loss="
    run(["script", "-qec", f"stty cols 120 rows 40; {training}", "/dev/null"], cwd=work, env=env, expect=bar)
    (work / "readme_example.py").write_text(readme_example())
    run([python, "readme_example.py"], cwd=work, env=env)
    run([python, "-c", WRITE_SHARDS], cwd=work, env=env)
    for extra, code in WITHOUT_EXTRA.items():
        run([python, "-c", code], cwd=work, env=env, fail=True, expect=re.escape(f"pip install 'uncurated[{extra}]'"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "install-check", help="work folder")
    parser.add_argument("--wheel", type=Path, help="check this wheel instead of building one")
    parser.add_argument("--extras", nargs="*", default=list(EXTRAS), choices=EXTRAS, help="the extras to check")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the environments")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env = {**os.environ, "PYTHONNOUSERSITE": "1", "TERM": os.environ.get("TERM", "xterm")}
    env.pop("PYTHONPATH", None)
    try:
        wheel = args.wheel.resolve() if args.wheel else build(args.out, args.python)
        print(f"checking {wheel.name} ({time.monotonic() - started:.0f} s)", flush=True)
        layer = torch_layer(args.out, args.python)
        with tempfile.TemporaryDirectory(prefix="install-check-") as folder:
            work = Path(folder)
            print("the wheel alone:", flush=True)
            version = wheel.name.split("-")[1]  # uncurated-VERSION-py3-none-any.whl
            check_base(environment(args.out, "base", args.python, layer, str(wheel)), env, work, version)
            for extra in args.extras:
                print(f"the wheel with [{extra}] alone:", flush=True)
                bin_folder = environment(args.out, extra, args.python, layer, f"{wheel}[{extra}]")
                command = EXTRA_COMMANDS[extra]
                command = [str(bin_folder / command[0]), *command[1:]]
                if extra == "hf":
                    command.append(f"out={work / 'runs-hf'}")
                run(command, cwd=work, env=env, expect=EXTRA_EXPECTED[extra])
    except (CheckFailed, subprocess.CalledProcessError) as error:
        print(f"install check FAILED: {error}", file=sys.stderr)
        return 1
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"install check passed in {time.monotonic() - started:.0f} s (CPU {_children_cpu():.0f} s; load {load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
