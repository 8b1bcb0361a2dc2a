"""Neighbour-aggregation kernels on a CUDA GPU: our two implementations and both torch library
calls against a float64 reference on uniform, power-law and hand-built graphs (empty rows, rows
at the long-row boundary, odd widths), every output element written, the generator on the GPU,
the offline census describing the loaded code, and one timing of the two torch methods (printed,
for the choice of TORCH_METHOD).

Tolerance: element (i, f) sums d_i FP32 terms; each addition rounds by at most 2^-24 of its
partial sum S_k, and in any order S_k is about (k / d_i) * ref + a random walk of spread
sqrt(k) (x is N(0, 1)), so the error's spread is below 2^-24 * (d_i + sqrt(d_i) * |ref|). Each
element must be within 1e-6 + 8 * 2^-24 * (d_i + sqrt(d_i) * |ref|) of the float64 sum: a dropped
or doubled edge moves an element by |x| ~ 1, far more for almost every feature.

Skipped cleanly without a GPU (conftest.py skips the `gpu` marker; the module also skips when
torch cannot be imported or CUDA is not available).
"""

from __future__ import annotations

import functools
from typing import Literal

import pytest

import torch  # noqa: E402

from harness.build import census, toolchain
from harness.build.build import device_arch
from harness import ops
from harness.errors import EvidenceError
from harness.ops import neighbor_aggregation as na  # noqa: E402
from harness.ops.neighbor_aggregation import graphs  # noqa: E402
from harness.ops.neighbor_aggregation.kernels import (  # noqa: E402
    LONG_ROW_CHUNK,
    cuda_instances,
    launch_cuda,
    launch_triton,
    triton_instances,
)

U = 2.0**-24
LAUNCHERS = {"cuda": launch_cuda, "triton": launch_triton}
IMPLS = ["cuda", "triton", "torch-index_add", "torch-sparse_mm"]

CASES = [  # (kind, nodes, edges, features)
    ("uniform", 1000, 16000, 64),
    ("uniform", 777, 5000, 7),        # scalar path
    ("uniform", 513, 3000, 36),       # vec4, 9 vectors in groups of 16 lanes
    ("uniform", 100, 2000, 130),      # scalar, 5 slots
    ("uniform", 300, 5000, 1),
    ("uniform", 300, 5000, 4),        # one lane per row, 32 edges at once
    ("uniform", 200, 3000, 1024),     # widest
    ("uniform", 65536, 1048576, 128),
    ("powerlaw", 65536, 1048576, 64),  # the default power-law shape: hubs of ~90 000 edges
    ("powerlaw", 4096, 200000, 256),  # 2 slots, long rows
    ("powerlaw", 5000, 100000, 100),  # 25 vectors over 32 lanes
    ("powerlaw", 64, 50000, 16),      # few nodes, every hub many pieces, repeated sources
    ("powerlaw", 1001, 40000, 3),     # scalar long pass
]


def _graph(kind: str, nodes: int, edges: int, features: int, seed: int) -> dict:
    """Inputs as make_inputs builds them, for an explicit graph size."""
    return na.make_inputs(f"{nodes}x{edges}x{features}-{kind}", seed, {"degree_exponent": 2.0})


def _from_csr(indptr: list[int], indices: list[int], features: int, seed: int) -> dict:
    """Inputs for a hand-built CSR."""
    nodes, edges = len(indptr) - 1, len(indices)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ip = torch.tensor(indptr, dtype=torch.int32, device="cuda")
    ix = torch.tensor(indices, dtype=torch.int32, device="cuda")
    dst = graphs.coo_rows(ip, edges)
    return {"x": torch.randn(nodes, features, device="cuda", generator=gen), "indptr": ip,
            "indices": ix, "dst": dst, "src": ix.long(),
            "adjacency": na.adjacency_csr(dst, ix.long(), nodes),
            "max_degree": graphs.in_degrees(ip).max().cpu() if nodes else torch.tensor(0)}


def _run(impl: str, inputs: dict, max_degree: int | None | Literal["given"] = "given"):
    """One call into a NaN-poisoned output; waits for it."""
    out = torch.full_like(inputs["x"], float("nan"))
    if impl in LAUNCHERS:
        md = int(inputs["max_degree"]) if max_degree == "given" else max_degree
        LAUNCHERS[impl](inputs["x"], inputs["indptr"], inputs["indices"], out, max_degree=md)
        result = out
    else:
        result = na.TORCH_METHODS[impl.split("-", 1)[1]](inputs, out, {})()
    torch.cuda.synchronize()
    return result


def _check(result, inputs: dict) -> None:
    assert not torch.isnan(result).any(), f"{int(torch.isnan(result).sum())} outputs not written"
    ref = na.reference(inputs, {})
    degrees = graphs.in_degrees(inputs["indptr"]).double()[:, None]
    tol = 1e-6 + 8 * U * (degrees + degrees.sqrt() * ref.abs())
    err = (result.double() - ref).abs()
    worst = int((err - tol).argmax())
    row = worst // ref.shape[1]
    assert bool((err <= tol).all()), (
        f"error {float(err.flatten()[worst]):.3g} > {float(tol.flatten()[worst]):.3g} in row "
        f"{row} of in-degree {int(degrees[row])}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("kind", "nodes", "edges", "features"), CASES)
def test_matches_float64_reference(impl: str, kind: str, nodes: int, edges: int,
                                   features: int) -> None:
    inputs = _graph(kind, nodes, edges, features, seed=nodes + 31 * features)
    if kind == "powerlaw" and nodes >= 4096:
        assert int(inputs["max_degree"]) > LONG_ROW_CHUNK  # the long pass runs
    _check(_run(impl, inputs), inputs)


def _boundary_csr() -> tuple[list[int], list[int]]:
    """Rows of in-degree 0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 CHUNK, 5 CHUNK + 3, 0, 33, with
    some rows starting on a piece boundary (multiples of CHUNK)."""
    c = LONG_ROW_CHUNK
    degrees = [0, c, 1, c - 1, c, c + 1, 0, 2 * c, 5 * c + 3, 0, 33, c + 1, 0]
    indptr = [0]
    for d in degrees:
        indptr.append(indptr[-1] + d)
    nodes = len(degrees)
    indices = [(7 * e + 3) % nodes for e in range(indptr[-1])]
    return indptr, indices


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("features", [64, 7, 256])
def test_rows_at_the_long_row_boundary(impl: str, features: int) -> None:
    indptr, indices = _boundary_csr()
    assert indptr[2] % LONG_ROW_CHUNK == 0  # a row starts on a piece boundary
    inputs = _from_csr(indptr, indices, features, seed=features)
    result = _run(impl, inputs)
    _check(result, inputs)
    assert bool((result[0] == 0).all()) and bool((result[-1] == 0).all())  # empty rows: zeros


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_graphs_without_edges_give_zeros(impl: str) -> None:
    for indptr in ([0, 0, 0, 0], [0]):
        inputs = _from_csr(indptr, [], 8, seed=1)
        result = _run(impl, inputs, max_degree=None)
        assert bool((result == 0).all())


@pytest.mark.parametrize("impl", ["cuda", "triton"])
@pytest.mark.parametrize("kind", ["uniform", "powerlaw"])
def test_max_degree_none_runs_the_long_pass(impl: str, kind: str) -> None:
    """Without max_degree the pieces and the zeroing always run: the same sums (bitwise for a
    graph without long rows, where they add and zero nothing)."""
    inputs = _graph(kind, 8192, 131072, 64, seed=5)
    given, unknown = _run(impl, inputs), _run(impl, inputs, max_degree=None)
    _check(unknown, inputs)
    if kind == "uniform":
        assert int(inputs["max_degree"]) <= LONG_ROW_CHUNK
        assert torch.equal(given, unknown)


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_understated_max_degree_is_wrong(impl: str) -> None:
    """max_degree is trusted: claiming short rows skips the pieces and the zeroing (this test
    shows that they are what sums the hubs, and that the promise matters): the hub rows come out
    wrong (or NaN: they are added into the unzeroed, NaN-poisoned output)."""
    inputs = _graph("powerlaw", 4096, 200000, 16, seed=8)
    result = _run(impl, inputs, max_degree=LONG_ROW_CHUNK)
    ref = na.reference(inputs, {})
    hubs = graphs.in_degrees(inputs["indptr"]) > LONG_ROW_CHUNK
    assert bool(hubs.any())
    err = (result.double() - ref)[hubs].abs().nan_to_num(nan=float("inf"))
    assert float(err.max()) > 1.0
    short = ~hubs
    assert bool(((result.double() - ref)[short].abs() <= 1e-3).all())  # short rows unaffected


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_repeated_runs_are_identical_without_long_rows(impl: str) -> None:
    """Rows of at most CHUNK edges are summed in a fixed order: no race, the same bits each run."""
    inputs = _graph("uniform", 20000, 320000, 64, seed=7)
    first = _run(impl, inputs)
    for _ in range(3):
        assert torch.equal(_run(impl, inputs), first)


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_runs_on_torchs_current_stream(impl: str) -> None:
    inputs = _graph("powerlaw", 4096, 100000, 64, seed=3)
    out = torch.full_like(inputs["x"], float("nan"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        LAUNCHERS[impl](inputs["x"], inputs["indptr"], inputs["indices"], out,
                        max_degree=int(inputs["max_degree"]))
    stream.synchronize()
    _check(out, inputs)


@pytest.mark.parametrize("impl", ["cuda", "triton"])
def test_bad_arguments_are_refused_in_one_sentence(impl: str) -> None:
    inputs = _graph("uniform", 64, 512, 16, seed=4)
    x, ip, ix = inputs["x"], inputs["indptr"], inputs["indices"]
    out = torch.empty_like(x)
    launch = LAUNCHERS[impl]
    with pytest.raises(EvidenceError, match="float32"):
        launch(x.double(), ip, ix, out)
    with pytest.raises(EvidenceError, match="int32"):
        launch(x, ip.long(), ix, out)
    with pytest.raises(EvidenceError, match="indptr has shape"):
        launch(x, ip[:-1].clone(), ix, out)
    with pytest.raises(EvidenceError, match="contiguous"):
        launch(x.t(), ip, ix, out.t())
    with pytest.raises(EvidenceError, match="aligned"):
        flat = torch.randn(64 * 16 + 1, device="cuda")
        launch(flat[1:].view(64, 16), ip, ix, out)
    with pytest.raises(EvidenceError, match="output has shape"):
        launch(x, ip, ix, out[:4])
    with pytest.raises(EvidenceError, match="overlaps"):
        launch(x, ip, ix, x)
    with pytest.raises(EvidenceError, match="max_degree"):
        launch(x, ip, ix, out, max_degree=-1)
    with pytest.raises(EvidenceError, match="outside the supported range"):
        wide = torch.randn(64, 1028, device="cuda")
        launch(wide, ip, ix, torch.empty_like(wide))


# ----------------------------------------------------------------------------- the op module


@pytest.mark.parametrize("shape", ["65536x1048576x16", "65536x1048576x64-powerlaw",
                                   "3001x40000x33-powerlaw"])
def test_op_implementations_through_make_inputs(shape: str) -> None:
    inputs = na.make_inputs(shape, 20261129, {"degree_exponent": 2.0})
    nodes, edges, features, _ = na.dims(shape)
    assert inputs["x"].shape == (nodes, features) and inputs["indices"].numel() == edges
    assert int(inputs["indptr"][-1]) == edges
    for impl in na.OP.implementations:
        out = na.make_output(inputs, shape).fill_(float("nan"))
        result = ops.run("neighbor_aggregation", impl, inputs, out, {}, shape)
        torch.cuda.synchronize()
        _check(result, inputs)


def test_same_seed_same_graph_for_every_implementation() -> None:
    a = na.make_inputs("4096x65536x8-powerlaw", 9, {})
    b = na.make_inputs("4096x65536x8-powerlaw", 9, {})
    for name in ("x", "indptr", "indices"):
        assert torch.equal(a[name], b[name])
    c = na.make_inputs("4096x65536x8-powerlaw", 9, {"degree_exponent": 3.0})
    assert int(c["max_degree"]) < int(a["max_degree"])


def test_reference_against_a_cpu_loop() -> None:
    """op.reference (float64 index_add_ on the GPU) against a plain loop over the CSR on the CPU."""
    import numpy as np

    inputs = na.make_inputs("300x5000x6-powerlaw", 2, {})
    ref = na.reference(inputs, {}).cpu().numpy()
    x = inputs["x"].double().cpu().numpy()
    ip, ix = inputs["indptr"].cpu().numpy(), inputs["indices"].cpu().numpy()
    loop = np.zeros_like(ref)
    for i in range(len(ip) - 1):
        for e in range(ip[i], ip[i + 1]):
            loop[i] += x[ix[e]]
    assert np.allclose(ref, loop, rtol=1e-12, atol=1e-10)


def test_generator_on_the_gpu() -> None:
    n, e = 65536, 1 << 20
    for kind in graphs.KINDS:
        ip, ix = graphs.generate_torch(n, e, kind, 1, device="cuda")
        ip2, ix2 = graphs.generate_torch(n, e, kind, 1, device="cuda")
        assert ip.is_cuda and ip.dtype == torch.int32 and ix.dtype == torch.int32
        assert int(ip[0]) == 0 and int(ip[-1]) == e and bool((ip[1:] >= ip[:-1]).all())
        assert int(ix.min()) >= 0 and int(ix.max()) < n
        assert torch.equal(ip, ip2) and torch.equal(ix, ix2)
    uniform = graphs.in_degrees(graphs.generate_torch(n, e, "uniform", 2)[0]).max()
    power = graphs.in_degrees(graphs.generate_torch(n, e, "powerlaw", 2)[0]).max()
    assert int(power) > 100 * int(uniform)


def test_time_the_torch_methods(capsys: pytest.CaptureFixture[str]) -> None:
    """Both torch methods, timed with CUDA events on the default shapes (median of 20 calls after
    5 warm-ups); prints which is faster, for the choice of TORCH_METHOD."""
    lines = []
    for shape in ("65536x1048576x64", "65536x1048576x64-powerlaw"):
        inputs = na.make_inputs(shape, 1, {})
        out = torch.empty_like(inputs["x"])
        times = {}
        for name, method in na.TORCH_METHODS.items():
            call = method(inputs, out, {})  # bound once, as the pipeline binds it
            _check(call(), inputs)
            for _ in range(5):
                call()
            samples = []
            for _ in range(20):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
            times[name] = sorted(samples)[len(samples) // 2]
            assert times[name] > 0
        best = min(times, key=times.__getitem__)
        lines.append(f"{shape}: " + ", ".join(f"{k} {v:.1f} us" for k, v in times.items())
                     + f" -> {best} is faster (TORCH_METHOD is {na.TORCH_METHOD!r})")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


# ----------------------------------------------------------------------------- census vs run time




@functools.cache
def _offline_build(kernel: str):
    """One offline NVRTC compile per name expression per process (neighbor_zero_long_rows<4>
    serves several widths; a repeated compile of it once came back with no ptxas report)."""
    from harness.ops.neighbor_aggregation.kernels import CUDA_SOURCE

    return toolchain.compile_offline(CUDA_SOURCE, [kernel], arch=device_arch(), compiler="nvrtc")


@pytest.mark.parametrize("features", [64, 256, 7])
def test_cuda_census_matches_the_loaded_kernels(features: int) -> None:
    from harness.launch import cuda as cuda_module
    from harness.ops.neighbor_aggregation.kernels import CUDA_SOURCE

    inputs = _graph("powerlaw", 4096, 100000, features, seed=features)
    _run("cuda", inputs)  # compiles and loads both passes
    for v in cuda_instances(features):
        with cuda_module.on_device(inputs["x"].device):
            kernel = cuda_module.get_function(CUDA_SOURCE, v.kernel)
            runtime_regs, runtime_local = kernel.num_regs, kernel.local_size_bytes
        build = _offline_build(v.kernel)
        info = census.parse_ptxas_log(build.ptxas_log)[build.lowered[v.kernel]]
        assert runtime_regs == info.registers
        assert runtime_local == 0 and info.spill_stores == 0


@pytest.mark.parametrize("features", [64, 7])
def test_triton_census_matches_the_jit_kernels(features: int) -> None:
    from harness.build.build import compile_triton
    from kernels.neighbor_aggregation.neighbor_aggregation_triton import (
        neighbor_sum,
        neighbor_zero_long_rows,
    )

    inputs = _graph("powerlaw", 4096, 100000, features, seed=features)
    x, ip, ix = inputs["x"], inputs["indptr"], inputs["indices"]
    out = torch.zeros_like(x)
    summing, zeroing = triton_instances(features)
    jits = [
        (summing, neighbor_sum[(4,)](x, ip, ix, out, 4096, 100000, **summing.constexprs(),
                                     num_warps=summing.num_warps)),
        (zeroing, neighbor_zero_long_rows[(4,)](ip, out, 4096, **zeroing.constexprs(),
                                                num_warps=zeroing.num_warps)),
    ]
    torch.cuda.synchronize()
    for v, jit in jits:
        offline, log = compile_triton(v, device_arch())
        jit._init_handles()
        regs = census.parse_res_usage(toolchain.resource_usage(offline.asm["cubin"]))
        assert jit.n_regs == regs[v.kernel].registers
        assert jit.n_regs == census.parse_ptxas_log(log)[v.kernel].registers
        assert census.ptx_code(jit.asm["ptx"]) == census.ptx_code(offline.asm["ptx"])
        assert jit.n_spills == 0
