"""The Triton kernels (tiling="triton"): equal to the dense engine for every objective, under Triton's interpreter.

Without CUDA, tests/conftest.py sets TRITON_INTERPRET=1 before triton is imported, so the kernels run on CPU tensors
(each block operation a NumPy call: block sizes here are chosen for the interpreter's speed, not a GPU's).
float32 products use input_precision="ieee" under PyTorch's default setting (no TF32), so the kernels agree with the
dense engine to float32 rounding.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from threadpoolctl import threadpool_limits
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from uncurated import objectives
from uncurated.objectives import functional
from uncurated.objectives.engine import ScoreMatrix, cross_pairing
from uncurated.objectives.infonce import infonce_rows
from uncurated.objectives.tiled import TiledScoreMatrix, Tiling, column_logsumexp_after_backward, fused_map
from uncurated.objectives.tiled.kernels import configs, recorded_launches, support
from uncurated.objectives.tiled.kernels.transforms import negative_log_sigmoid

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="the kernels need CUDA or Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py)",
)

CONTRASTIVE = ("infonce", "siglip", "cyclip", "dcl", "hcl", "rince", "clip_reg")
STATEFUL = ("sogclr", "isogclr", "nuclr")
BATCH, DIM, BLOCK = 300, 96, 128  # neither a multiple of its block


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The interpreter multiplies blocks with NumPy; threads of a multi-threaded BLAS only contend on tiles."""
    with threadpool_limits(1, user_api="blas"):
        yield


def features(batch, dim, seed=0, dtype=torch.float32, duplicate=True):
    generator = torch.Generator().manual_seed(seed)
    a, b = (torch.randn(batch, dim, generator=generator).to(dtype) for _ in range(2))
    if duplicate:  # a repeated sample: equal rows and equal columns of the score matrix
        a[-1], b[-1] = a[0], b[0]
    return a.requires_grad_(True), b.requires_grad_(True)


def value_and_gradients(fn, tensors):
    value = fn()
    return [value.detach(), *torch.autograd.grad(value, tensors)]


def assert_float32_close(expected, got, tolerance=2e-5):
    """Each tensor to ``tolerance`` of its largest entry (float32 rounding, summed in another order)."""
    assert len(expected) == len(got)
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape
        scale = max(float(want.abs().max()), 1e-30)
        torch.testing.assert_close(have, want, rtol=0.0, atol=tolerance * scale)


def build_pair(name, pairing, temperature=None, block=BLOCK, learned=True, **options):
    """The same objective twice: dense, and on the kernels; ``learned``: CLIP's and SigLIP's temperature (and bias)
    learned, else each objective's defaults."""
    params = {"pairing": pairing, **options}
    if temperature is not None:
        params["temperature"] = temperature
    if name in STATEFUL:
        params.setdefault("num_samples", 4 * BATCH)
        if name == "isogclr":
            params.setdefault("temperature_lr", 0.05)
    elif learned and name in ("infonce", "siglip"):
        params.setdefault("learnable", True)
    dense = objectives.build(name, tiling="never", **params)
    kernels = objectives.build(name, tiling="triton", block_size=block, **params)
    for objective in (dense, kernels):
        if name in STATEFUL:
            objective.set_epoch(10)  # past NUCLR's frozen epochs: every update runs
    return dense, kernels


def assert_no_worse_than_dense(reference, dense, got, tolerance=2e-5):
    """Where float32 itself is ill-conditioned (RINCE at t = 0.01 reaches 1e19 and cancels): the kernels' error
    against a float64 reference at most twice the dense float32 engine's, or float32 rounding."""
    for want, have, baseline in zip(reference, got, dense, strict=True):
        assert have.dtype == baseline.dtype and have.shape == want.shape
        finite = torch.isfinite(want)
        assert torch.equal(finite, torch.isfinite(have))
        want, have, baseline = want[finite], have[finite].double(), baseline[finite].double()
        scale = max(float(want.abs().max()) if want.numel() else 0.0, 1e-30)
        dense_error = float((baseline - want).abs().max()) if want.numel() else 0.0
        error = float((have - want).abs().max()) if want.numel() else 0.0
        assert error <= 2 * dense_error + tolerance * scale, (error, dense_error, scale)


def state_of(objective):
    state = objective.state
    return {key: state.gather(*key, torch.arange(state.sizes[key[1]])) for key in state.tensors}


def assert_same_state(dense, kernels, step):
    want, have = state_of(dense), state_of(kernels)
    for key in want:
        finite = torch.isfinite(want[key])
        assert torch.equal(finite, torch.isfinite(have[key])), f"state {key} at step {step}"
        scale = max(float(want[key][finite].abs().max()) if finite.any() else 0.0, 1.0)
        torch.testing.assert_close(have[key][finite], want[key][finite], rtol=0.0, atol=2e-5 * scale)
    assert kernels.state.scalar_values() == pytest.approx(dense.state.scalar_values(), rel=1e-6)


def step_of(objective, a, b, call):
    """Value and gradients (features, then parameters) of one training call."""
    if isinstance(objective, objectives.StatefulObjective):
        objective.begin_step()
    return value_and_gradients(lambda: objective(a, b, **call), [a, b, *objective.parameters()])


def run_objectives(name, pairing, batch, dim, steps, temperature=None, against_float64=False, **options):
    """Value, input and parameter gradients (and state, for the global objectives) of both engines, step by step;
    ``against_float64``: both float32 engines against a float64 dense one (:func:`assert_no_worse_than_dense`)."""
    dense, kernels = build_pair(name, pairing, temperature, **options)
    reference = build_pair(name, pairing, temperature, **options)[0].double() if against_float64 else None
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        a, b = features(batch, dim, seed=step)
        call = {"index": torch.randperm(4 * BATCH, generator=generator)[:batch]} if name in STATEFUL else {}
        expected, got = step_of(dense, a, b, call), step_of(kernels, a, b, call)
        if reference is None:
            assert_float32_close(expected, got)
            if name in STATEFUL:
                assert_same_state(dense, kernels, step)
            continue
        wide = [x.detach().double().requires_grad_(True) for x in (a, b)]
        exact = step_of(reference, *wide, call)
        assert_no_worse_than_dense(exact, expected, got)
        if name in STATEFUL:
            want, baseline, have = state_of(reference), state_of(dense), state_of(kernels)
            for key in want:
                assert_no_worse_than_dense([want[key]], [baseline[key]], [have[key]])


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", CONTRASTIVE)
def test_batch_objectives_equal_dense(name, pairing):
    """B = 300, d = 96, a duplicated sample; learned temperature (and SigLIP's bias) where the paper learns it."""
    with recorded_launches() as launches:
        run_objectives(name, pairing, BATCH, DIM, steps=1)
    assert launches, "the kernels ran"


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", STATEFUL)
def test_global_objectives_equal_dense_in_value_gradients_and_state(name, pairing):
    """Two steps: the second reads the state (``u``, iSogCLR's temperatures, NUCLR's popularities) the first wrote."""
    run_objectives(name, pairing, BATCH, DIM, steps=2)


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", CONTRASTIVE + STATEFUL)
def test_temperature_0_01_stays_finite_and_equal(name, pairing):
    """Scores up to 100 (and beyond, for unnormalized features): the running maxima keep every exponential finite."""
    options = {"block": 32}
    if name == "isogclr":
        options["temperature_min"] = 0.01
    if name == "rince":
        # q = 0.1 (the thesis's ImageNet setting): at the default q = 0.5 the loss reaches e^50 and no float32 engine
        # keeps a digit of its gradient (the dense one errs by 1e4 times the gradient's size, two views, B = 70).
        options["q"] = 0.1
    steps = 2 if name in STATEFUL else 1
    run_objectives(name, pairing, 70, 40, steps, temperature=0.01, against_float64=True, **options)


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("magnitude", [1.0, 3.0, 10.0])
def test_unnormalized_features_at_temperature_0_01(magnitude, pairing):
    """Scores up to about 2e5 (features of norm 5 times ``magnitude``): both sides' gradients agree with the dense
    engine to float32 rounding whatever ``|S|``, because the backward pass recomputes each score bitwise as the
    forward pass formed it. A score rounded otherwise, off by about ``|S| 2^{-24}``, puts ``e^{S - L}`` off the
    forward pass's softmax by as much, relatively: 5e-4 of the gradient at 3 times, 7e-3 at 10 times.

    No duplicated sample: the softmax of two equal candidates at t = 0.01 is split by the last bit of each engine's
    product (the interpreter's NumPy product rounds equal columns at different places differently on some CPUs),
    which no engine agrees on with another."""
    a, b = (x.detach().mul(magnitude).requires_grad_(True) for x in features(50, 24, duplicate=False))
    options = {"temperature": 0.01, "normalize": False, "pairing": pairing}
    dense = value_and_gradients(lambda: functional.infonce(a, b, **options), [a, b])
    got = value_and_gradients(lambda: functional.infonce(a, b, tiling="triton", block_size=32, **options), [a, b])
    assert all(bool(torch.isfinite(x).all()) for x in got)
    assert_float32_close(dense, got)


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", ["infonce", "dcl", "hcl", "rince"])
def test_supervised_oracle_masks_same_label_columns(name, pairing):
    a, b = features(60, 24)
    labels = torch.arange(60) % 7
    fn = getattr(functional, name)
    dense = value_and_gradients(lambda: fn(a, b, pairing=pairing, labels=labels), [a, b])
    got = value_and_gradients(lambda: fn(a, b, pairing=pairing, labels=labels, tiling="triton", block_size=32), [a, b])
    assert_float32_close(dense, got)


@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_hcl_fallback_asks_three_weights_and_extra_positives(beta):
    """HCL with the fallback clamp asks L(beta + 1), L(beta) and L(1); extra positive views stay outside the kernels."""
    a, b = features(40, 24)
    extra = torch.randn(40, 2, 24)
    options = {"beta": beta, "clamp": "fallback", "extra_positives": extra, "temperature": 0.2}
    dense = value_and_gradients(lambda: functional.hcl(a, b, **options), [a, b])
    got = value_and_gradients(lambda: functional.hcl(a, b, tiling="triton", block_size=32, **options), [a, b])
    assert_float32_close(dense, got)


def test_rectangular_local_rows_against_all_columns():
    """A rank's rows against the gathered columns (distributed training), in both directions: the ranks' rows make
    up the whole loss, and each rank's positives sit at its own column offset."""
    a, b = features(90, 40)
    world, share = 3, 30

    def whole():
        forward, backward = cross_pairing(a, b, 14.0)
        return infonce_rows(forward).sum() + infonce_rows(backward).sum()

    def by_ranks():
        total = 0.0
        for rank in range(world):
            rows = slice(rank * share, (rank + 1) * share)
            columns = torch.arange(rows.start, rows.stop)
            for anchors, candidates in ((a, b), (b, a)):
                local = TiledScoreMatrix(anchors[rows], candidates, 14.0, columns, tiling=Tiling("triton", 32))
                (rows_loss,) = fused_map(infonce_rows, [local])
                total = total + rows_loss.sum()
        return total

    assert_float32_close(value_and_gradients(whole, [a, b]), value_and_gradients(by_ranks, [a, b]))


def test_per_anchor_scales_offsets_and_sums_with_gradients():
    """Every transform at once, every input differentiated: per-anchor scales and column offsets in both directions,
    three log-sum-exp weights, the mean score, SigLIP's sum with its bias."""
    a, b = features(37, 20)
    generator = torch.Generator().manual_seed(2)
    row_scale, column_scale = (torch.rand(37, generator=generator).add(2.0).requires_grad_(True) for _ in range(2))
    offset_a, offset_b = (torch.randn(37, generator=generator).requires_grad_(True) for _ in range(2))
    bias = torch.tensor(-1.5, requires_grad=True)
    tensors = [a, b, row_scale, column_scale, offset_a, offset_b, bias]

    def loss(matrix):
        forward = matrix(a, b, row_scale, torch.arange(37), column_offset=offset_b)
        backward = forward.transposed(scale=column_scale, column_offset=offset_a)

        def rows(scores):
            return (
                scores.negative_logsumexp(1.0)
                + 0.3 * scores.negative_logsumexp(2.5)
                - 0.2 * scores.negative_logsumexp(0.5)
                + scores.negative_mean_score()
                + 0.1 * scores.negative_sum(negative_log_sigmoid, bias)
            )

        return sum(r.sum() for r in fused_map(rows, [forward, backward]))

    def kernels(*args, **kwargs):
        return TiledScoreMatrix(*args, tiling=Tiling("triton", 32), **kwargs)

    assert_float32_close(
        value_and_gradients(lambda: loss(ScoreMatrix), tensors), value_and_gradients(lambda: loss(kernels), tensors)
    )


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
def test_column_statistic_on_demand_and_after_backward(pairing):
    """NUCLR's column statistic: in a value-only launch of its own, and out of the backward launch."""
    a, b = features(45, 24)
    generator = torch.Generator().manual_seed(3)
    kernels = lambda *args, **kwargs: TiledScoreMatrix(*args, tiling=Tiling("triton", 32), **kwargs)  # noqa: E731
    if pairing == "cross":
        offsets = {"offset_a": torch.randn(45, generator=generator), "offset_b": torch.randn(45, generator=generator)}
        dense, tiled = cross_pairing(a, b, 5.0, **offsets), cross_pairing(a, b, 5.0, matrix=kernels, **offsets)
    else:
        views = torch.cat([a, b])
        positives = (torch.arange(90) + 45) % 90
        offset = torch.randn(90, generator=generator)
        own = torch.arange(90)
        dense = (ScoreMatrix(views, views, 5.0, positives, own_column=own, column_offset=offset),)
        tiled = (
            TiledScoreMatrix(
                views, views, 5.0, positives, own_column=own, column_offset=offset, tiling=Tiling("triton", 32)
            ),
        )
    row_offsets = [torch.rand(m.anchors.shape[0], generator=generator) * 3 for m in dense]
    with torch.no_grad():
        expected = [m.negative_column_logsumexp(r) for m, r in zip(dense, row_offsets, strict=True)]
        on_demand = [m.negative_column_logsumexp(r) for m, r in zip(tiled, row_offsets, strict=True)]
    assert_float32_close(expected, on_demand)
    rows = fused_map(lambda scores: scores.negative_logsumexp().sum(), tiled)
    got = []
    assert column_logsumexp_after_backward(list(zip(tiled, row_offsets, strict=True)), got.extend)
    assert got == []  # nothing until the backward pass
    sum(rows).backward()
    assert_float32_close(expected, got)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["infonce", "siglip", "nuclr"])
def test_half_precision_features_follow_the_precision_contract(name, dtype):
    """Products in the features' type, statistics in float32: as close to the Python engine as it is to the dense
    one, gradients in the features' type."""
    dense, kernels = build_pair(name, "cross", block=32)
    python = build_pair(name, "cross")[0]
    python.tiling = Tiling("always", 32)
    a, b = features(70, 40, dtype=dtype)
    call = {"index": torch.arange(70)} if name in STATEFUL else {}
    results = {}
    for key, objective in (("dense", dense), ("python", python), ("kernels", kernels)):
        if name in STATEFUL:
            objective.begin_step()
        results[key] = value_and_gradients(lambda: objective(a, b, **call), [a, b])  # noqa: B023
    assert results["kernels"][1].dtype == dtype
    for k, want in enumerate(results["dense"]):
        python_error = float((results["python"][k].float() - want.float()).abs().max())
        kernel_error = float((results["kernels"][k].float() - want.float()).abs().max())
        assert kernel_error <= 4 * python_error + 1e-6 * float(want.float().abs().max()), (
            k,
            kernel_error,
            python_error,
        )


@pytest.mark.parametrize(("name", "pairing"), [("infonce", "cross"), ("siglip", "cross"), ("nuclr", "two_view")])
def test_gpu_block_shapes_step_through_and_split_the_features(name, pairing):
    """The shapes a GPU gets (products 16 float32 columns at a time, a gradient wider than 128 columns taken in
    32-column slices), run by the interpreter: d = 200 (padded to 256) takes 13 product steps and 8 gradient slices
    per column block."""
    config = configs.choose("cuda", 200, torch.float32, block_size=32, interpreter=False)
    assert (config.block_m, config.block_k, config.block_d, config.stages) == (32, 16, 32, 3)
    assert configs.choose("cuda", 128, torch.float32, block_size=32, interpreter=False).block_d == 128  # held whole
    with configs.launching(config):
        run_objectives(name, pairing, 40, 200, steps=2 if name in STATEFUL else 1, block=32)


@pytest.mark.slow
@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", ["infonce", "hcl", "nuclr"])
def test_larger_batches_equal_dense(name, pairing):
    """B = 1,200, d = 1,000 (near the limit, not a power of two), blocks of 128."""
    run_objectives(name, pairing, 1200, 1000, steps=2 if name in STATEFUL else 1)


STRIDED_SCRIPT = """
import json, sys
import torch
from uncurated.objectives.engine import cross_pairing
from uncurated.objectives.infonce import infonce_rows
from uncurated.objectives.tiled import TiledScoreMatrix, Tiling, fused_map

rows, dim, stride = 9, 16, 2**28
try:
    storage = torch.empty(rows * stride)  # 8 GiB reserved, never touched but for the rows' pages
except RuntimeError:
    sys.exit(77)
a, b = (storage.as_strided((rows, dim), (stride, 1), offset) for offset in (0, dim))
generator = torch.Generator().manual_seed(0)
with torch.no_grad():
    a.copy_(torch.randn(rows, dim, generator=generator))
    b.copy_(torch.randn(rows, dim, generator=generator))
dense = [t.detach().clone().requires_grad_(True) for t in (a, b)]
a.requires_grad_(True)
b.requires_grad_(True)
scores = TiledScoreMatrix(a, b, 14.0, torch.arange(rows), tiling=Tiling("triton", 16))
(loss,) = fused_map(infonce_rows, [scores])
got = [loss.sum(), *torch.autograd.grad(loss.sum(), [a, b])]
forward, _ = cross_pairing(*dense, 14.0)
want = infonce_rows(forward).sum()
want = [want, *torch.autograd.grad(want, dense)]
print(json.dumps([float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want)]))
"""


def test_feature_offsets_past_two_to_the_31_elements():
    """Rows ``2**28`` elements apart, so the last of 9 sits ``2**31`` elements in: an offset int32 cannot hold
    (``R d >= 2**31``, a two-view batch of ``2**20`` at ``d = 1,024``). The features are views into an 8 GiB
    allocation of which only their rows' pages are ever written, so the test holds a few MiB; with 32-bit offsets
    the loads wrap to a negative address and the interpreter crashes, hence the subprocess."""
    source = Path(objectives.__file__).parents[2]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", STRIDED_SCRIPT], capture_output=True, text=True, env=environment, timeout=600
    )
    if done.returncode == 77:
        pytest.skip("no 8 GiB of address space to reserve (strict overcommit)")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    errors = json.loads(done.stdout.splitlines()[-1])
    assert max(errors) < 2e-5, errors


COMPILE_SCRIPT = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import triton_kernels
variants = json.loads(sys.argv[2])
with tempfile.TemporaryDirectory() as folder:
    listed = Path(folder) / "variants.json"
    listed.write_text(json.dumps(variants))
    rows = triton_kernels.compile_variants(listed, [96, 1024], ["float32", "bfloat16"])
print(json.dumps([{key: row[key] for key in ("registers", "aligned", "accesses_16B")} for row in rows]))
"""


def test_a_launch_records_the_arguments_triton_specializes_as_divisible_by_16():
    """The record's ``divisible`` is what Triton's own launcher marks ``tt.divisibility = 16``: checked value by value
    against triton's specializer (pointers at every offset of a float32 and a bfloat16 buffer, integers, a bool),
    and on CLIP's launches: at B = 64 every pointer, size and stride is (the floats never are); at B = 40 the sizes
    are not."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend

    from uncurated.objectives.tiled.kernels.launch import divisible_by_16

    values = [torch.zeros(64, dtype=dtype)[offset:] for dtype in (torch.float32, torch.bfloat16) for offset in range(9)]
    values += [0, 1, 15, 16, 17, 48, 2**33, 2**33 + 8, True, False]
    for value in values:
        triton_key = native_specialize_impl(CUDABackend, value, False, True, True)[1]
        assert divisible_by_16(value) == (triton_key == "D"), value
    launched = {}
    for batch in (40, 64):
        a, b = features(batch, 96)
        with recorded_launches() as launches:
            functional.infonce(a, b, tiling="triton", block_size=64).backward()
        launched[batch] = launches
    for launch in launched[64]:  # all but the floats (the log-sum-exps' weights)
        assert launch.divisible == {k for k, code in launch.signature.items() if code != "fp32"}, launch.kernel
    for launch in launched[40]:
        wanted = {k for k, code in launch.signature.items() if code != "fp32"} - {"sides.n_rows", "sides.n_cols"}
        assert launch.divisible == wanted, launch.kernel


@pytest.mark.slow
def test_clip_kernels_compile_for_an_h100():
    """CLIP's forward and backward kernels, each direction's (the second forms its blocks transposed), compile for
    sm_90 with triton's compiler and ptxas (no GPU needed), at the GPU block shapes, float32 and bfloat16, d = 96
    and 1,024 (in a process without the interpreter), with the alignment hints a launch at B = 64 adds: every
    binary moves 16 bytes per global access somewhere, which none does without them."""
    a, b = features(64, 96)
    with recorded_launches() as launches:
        functional.infonce(a, b, tiling="triton", block_size=64).backward()
    variants = [
        {
            "kernel": launch.kernel,
            "switches": {k: v for k, v in launch.switches.items() if not k.startswith("shape.") and k != "BLOCK_D"},
            "signature": launch.signature,
            "divisible": sorted(launch.divisible),
            "objectives": ["infonce/cross"],
        }
        for launch in launches
    ]
    orientations = [
        (launch.kernel, launch.switches.get("VIEW.TRANSPOSED", launch.switches.get("A.TRANSPOSED")))
        for launch in launches
    ]
    assert orientations == [
        (kernel, transposed) for kernel in ("statistics_kernel", "gradient_kernel") for transposed in (False, True)
    ]
    benchmarks = Path(__file__).parent.parent / "benchmarks"
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_SCRIPT, str(benchmarks), json.dumps(variants)],
        env={**os.environ, "TRITON_INTERPRET": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(compiled) == 4 * 2 * 2 and all(0 < row["registers"] <= 255 for row in compiled)
    assert all(row["aligned"] == len(variants[index // 4]["divisible"]) > 0 for index, row in enumerate(compiled))
    assert all(row["accesses_16B"] > 0 for row in compiled)


def test_the_compile_report_keeps_a_section_per_triton_version(monkeypatch, tmp_path):
    """``--compile`` run under each triton writes its own section of one JSON: a second version's run keeps the
    first's section; a run with other settings starts the file anew."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "benchmarks"))
    import triton_kernels

    monkeypatch.setattr(triton_kernels, "RESULTS", tmp_path)
    settings = {"target": "sm_90", "alignment": "a launch's"}
    for version, rows in (("3.9.0", [1]), ("3.6.0", [2]), ("3.10.0", [3])):
        monkeypatch.setattr(triton_kernels, "_run_record", lambda version=version: {"triton": version})
        triton_kernels._write_by_triton("compiled.json", settings, rows)
    report = json.loads((tmp_path / "compiled.json").read_text())
    assert report["alignment"] == "a launch's"
    assert list(report["by_triton"]) == ["3.10.0", "3.9.0", "3.6.0"]  # newest first
    assert report["by_triton"]["3.6.0"] == {"triton": "3.6.0", "results": [2]}
    triton_kernels._write_by_triton("compiled.json", {**settings, "alignment": None}, [4])
    assert list(json.loads((tmp_path / "compiled.json").read_text())["by_triton"]) == ["3.10.0"]


def test_counted_work_per_step_does_not_grow_with_the_dimension(monkeypatch):
    """``benchmarks/triton_kernels.py --work`` counts a step's ``B^2 d`` multiply-adds from the launches' grids and
    loops at a GPU's shapes. A CLIP cross step takes 6 units at d = 128 (one gradient slice) and at d = 256 (two):
    the scores once per forward launch, and once plus ``dG Y`` per backward launch."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "benchmarks"))
    import triton_kernels

    counted = [triton_kernels.work("infonce", "cross", dim) for dim in (128, 256)]
    assert [c["per_launch"] for c in counted] == [[1, 1, 2, 2]] * 2
    assert [c["total"] for c in counted] == [6, 6]


# -- bad input ----------------------------------------------------------------------------------------


def test_unknown_tiling_lists_the_accepted_values():
    with pytest.raises(ValueError, match="tiling must be one of 'auto', 'always', 'never', 'triton'; got 'fused'"):
        objectives.build("infonce", tiling="fused")


@pytest.mark.parametrize(
    ("dtype", "dim", "message"),
    [
        (torch.float64, 8, "takes float32, bfloat16, float16 features, got anchors of type float64"),
        (torch.float32, 1025, "dimension at most 1024, got 1025"),
    ],
)
def test_unsupported_features_raise_naming_value_and_limit(dtype, dim, message):
    a, b = (torch.randn(4, dim, dtype=dtype) for _ in range(2))
    with pytest.raises(ValueError, match=message):
        functional.infonce(a, b, tiling="triton")


def test_non_float_features_are_refused_naming_their_type():
    a, b = (torch.arange(32).reshape(4, 8) for _ in range(2))
    with pytest.raises(ValueError, match="a must be a floating-point tensor, got dtype torch.int64"):
        functional.infonce(a, b, tiling="triton")


def test_anchors_and_candidates_of_two_types_are_refused_naming_both():
    a, b = torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="anchors and candidates of one type, got float32 and float16"):
        functional.infonce(a, b, tiling="triton")


def test_more_rows_than_int32_indices_reach_are_refused_naming_the_count():
    """2**31 rows as a broadcast view of one row: checked before anything reads them."""
    many = torch.zeros(1, 8).expand(2**31, 8)
    with pytest.raises(ValueError, match=rf"at most {support.MAX_ROWS} rows .* got anchors of 2147483648 rows"):
        support.check_features(many, torch.zeros(4, 8))
    assert not support.accepts(
        SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32, ndim=2, shape=(2**31, 8))
    )
    support.check_features(torch.zeros(1, 8).expand(support.MAX_ROWS, 8), torch.zeros(4, 8))


def test_block_size_must_be_a_power_of_two_in_range():
    for bad in (8, 100, 512):
        with pytest.raises(ValueError, match=r"block_size must be a power of two in \[16, 256\]"):
            objectives.build("infonce", tiling="triton", block_size=bad)


def test_negative_sums_of_other_functions_are_refused():
    a, b = features(6, 8)
    scores = TiledScoreMatrix(a, b, 1.0, torch.arange(6), tiling=Tiling("triton"))
    with pytest.raises(ValueError, match="negative sums of .*negative_log_sigmoid.* only, got 'cos'"):
        fused_map(lambda s: s.negative_sum(torch.cos), [scores])


def test_missing_triton_names_the_extra(monkeypatch):
    monkeypatch.setattr(support, "installed", lambda: False)
    with pytest.raises(ImportError, match=r"pip install 'uncurated\[triton\]'"):
        objectives.build("nuclr", num_samples=10, tiling="triton")


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    a, b = features(6, 8)
    with pytest.raises(RuntimeError, match="CPU tensors.*set TRITON_INTERPRET=1"):
        functional.infonce(a, b, tiling="triton")


def test_auto_takes_the_kernels_for_cuda_features_they_accept():
    def like(dtype=torch.float32, dim=256, device="cuda"):
        return SimpleNamespace(device=torch.device(device), dtype=dtype, ndim=2, shape=(8, dim))

    auto = Tiling("auto")
    assert auto.use_kernels(like())
    assert not auto.use_kernels(like(device="cpu"))
    assert not auto.use_kernels(like(dtype=torch.float64))
    assert not auto.use_kernels(like(dim=2048))
    assert Tiling("triton").use_kernels(like(device="cpu"))  # and then refuses what it cannot take
    assert Tiling("triton").use_tiles(2, 2, torch.float32)
    assert not Tiling("always").use_kernels(like())


# -- launches ---------------------------------------------------------------------------------------


class OperatorCount(TorchDispatchMode):
    """Counts the PyTorch operators dispatched, those the tiled engine dispatched, and the largest tensor made."""

    def __init__(self):
        super().__init__()
        self.operators, self.engine, self.largest = 0, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.operators += 1
        frame = sys._getframe(1)
        while frame is not None and f"{os.sep}uncurated{os.sep}" not in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is not None and f"objectives{os.sep}tiled{os.sep}" in frame.f_code.co_filename:
            self.engine += 1
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.largest = max([self.largest, *sizes])
        return out


ENGINE_BUDGET = 24
"""Operators and launches of the statistics themselves per step (the engine and its kernels)."""
STEP_BUDGET = {False: 96, True: 208}
"""Operators and launches of a whole step, each objective's own arithmetic, input checks and state included: a batch
objective's, a global one's (NUCLR's, 202: its update written in the backward pass is refused on the device, one
``where`` per field, and its xi kept there, where reading both would stall the host)."""


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("name", CONTRASTIVE + STATEFUL)
def test_one_step_makes_few_operators_and_launches_whatever_the_batch(name, pairing):
    """A training step (each objective's defaults, past the first step, which creates the state and records what
    the row loss asks) makes the same operators and launches at two batch sizes, never a tensor of B x B elements,
    at most ``STEP_BUDGET`` in all, and the statistics at most ``ENGINE_BUDGET`` of them
    (``benchmarks/triton_kernels.py`` records them by layer)."""
    counts = []
    for batch in (64, 256):
        kernels = build_pair(name, pairing, block=256, learned=False)[1]
        a, b = features(batch, 24)
        call = {"index": torch.arange(batch)} if name in STATEFUL else {}
        for _ in range(2):  # the second step is counted
            kernels.begin_step()
            with recorded_launches() as launches, OperatorCount() as counted:
                kernels(a, b, **call).backward()
        counts.append((counted.operators, counted.engine, len(launches)))
        assert counted.largest < batch * batch
    assert counts[0] == counts[1], counts
    operators, engine, launched = counts[-1]
    assert launched == (4 if pairing == "cross" and name != "siglip" else 3 if pairing == "cross" else 2)
    assert engine + launched <= ENGINE_BUDGET, counts
    assert operators + launched <= STEP_BUDGET[name in STATEFUL], counts


def test_the_agreement_benchmark_runs_at_tiny_sizes():
    """``agreement`` of ``benchmarks/triton_kernels.py --errors`` (the committed errors' JSON) cannot rot: two steps,
    so the global objective's second reads the state its first wrote."""
    path = Path(__file__).parent.parent / "benchmarks" / "triton_kernels.py"
    spec = importlib.util.spec_from_file_location("triton_kernels_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = ("infonce", "nuclr")
    found = [module.agreement(name, pairing, 40, 24, "cpu") for name in names for pairing in module.PAIRINGS]
    assert [(row["objective"], row["steps"]) for row in found] == [("infonce", 2)] * 2 + [("nuclr", 2)] * 2
    assert all("state" in row for row in found[2:])
    quantities = ("value", "features", "parameters", "state")
    assert all(row[key] < 1e-5 for row in found for key in quantities if key in row)


class CudaOne(torch.Tensor):
    """A CPU tensor that says it is on ``cuda:1`` (no GPU here)."""

    @property
    def device(self):
        return torch.device("cuda", 1)


def test_a_launch_runs_on_the_device_of_its_tensors(monkeypatch):
    """Triton launches on the current CUDA device: features on ``cuda:1`` launch inside ``torch.cuda.device`` of it
    (CPU tensors, under the interpreter, inside nothing)."""
    from uncurated.objectives.tiled.kernels import launch as launching
    from uncurated.objectives.tiled.kernels.arguments import Sides

    entered, ran = [], []

    class Device:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            entered.append("exit")

    class Kernel:
        def __getitem__(self, grid):
            return lambda **arguments: ran.append((grid, list(entered)))

    monkeypatch.setattr(torch.cuda, "device", Device)
    features = torch.zeros(4, 2).as_subclass(CudaOne)
    sides = Sides(features, features, 4, 4, 2, 2, 2)
    launching.launch(Kernel(), (3,), {"sides": sides}, warps=8)
    assert ran == [((3,), [torch.device("cuda", 1)])] and entered[-1] == "exit"
    entered.clear()
    launching.launch(Kernel(), (3,), {"sides": Sides(*(torch.zeros(4, 2),) * 2, 4, 4, 2, 2, 2)}, warps=8)
    assert entered == []
