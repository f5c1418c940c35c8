"""Task encoders and teachers where z lives: the same numbers as before they moved off the
host, and on another device nothing copied to or from the host once warm.

tests/data/encodings_before_device.json holds every encoder's output (and the bijections'
inverses), `fewshot`'s first three calls, and the teachers' forward, as computed on the CPU
before the encoders and teachers ran on z's device (commit f08a0ab). Regenerate it only from
code whose outputs are known good: `python -m tests.test_encodings_device --record`.

No accelerator is needed: the device checks run the encoders on torch's `meta` device (shapes
only, no data), under a TorchFunctionMode that sees every torch call and its tensors.
"""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from constructions import ENCODING_NAMES, HyperteacherConfig, make_encoder, sample_hyperteacher
from constructions.tasks import encodings
from constructions.tasks.multilayer import sample_multilayer_hyperteacher

DATA = Path(__file__).parent / "data" / "encodings_before_device.json"
CFG = HyperteacherConfig(I=4, H=6, O=3, M=7, K=3, seed=3)
TEACHER = sample_hyperteacher(CFG)  # no Q: `orthogonal` draws its own from the seed
ORTHOGONAL_TEACHER = sample_hyperteacher(HyperteacherConfig(**{**CFG.__dict__, "encoding": "orthogonal"}))
MULTI = sample_multilayer_hyperteacher(CFG, 3)
SEEDS = (0, 5)
OPTIONS = {"fewshot": {"n_shots": 3}}  # 3 shots, not 50, to keep the file small; the stream is the same code
FEWSHOT_CALLS = 3
BIJECTIONS = ("identity", "orthogonal", "interval_shuffle", "invertible_nn", "invertible_nn_tanh")
META = torch.device("meta")


def latents() -> torch.Tensor:
    """(10, 7) tasks with at most K = 3 active modules: the edges 0 and 1, the discrete levels,
    values just below and at interval starts, and a few continuous ones."""
    rows = [[0, 0, 0, 0, 0, 0, 0],
            [1, 0, 0, 1, 0, 0, 1],
            [0.5, 0.6, 0, 0, 0, 0, 0.7],
            [0, 0, 0.8, 0.9, 0, 1, 0],
            [0, 0, 0.05, 0, 0.999, 0, 0],
            [0.1, 0, 0, 0, 0, 0.95, 0],
            [0, np.nextafter(0.2, 0), 0, 0, 0.3, 0, 0],
            [0, 0, 0, np.nextafter(1.0, 0), 0, 0, np.nextafter(0.0, 1)],
            [0.61803398875, 0, 0, 0, 0, 0.7071067811865476, 0.5772156649],
            [0, 0, 0.75, 0, 0, 0, 0]]
    return torch.tensor(rows, dtype=torch.float64)


def inputs() -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(11).uniform(-1, 1, (10, CFG.I)))


def teacher_for(name):
    return ORTHOGONAL_TEACHER if name == "orthogonal" else TEACHER


def outputs() -> dict:
    """Every number the record pins, as nested lists of floats (JSON keeps float64 exactly)."""
    z, x = latents(), inputs()
    out = {"z": z.tolist(), "x": x.tolist(), "encoders": {}, "teachers": {}}
    for name in ENCODING_NAMES:
        for seed in SEEDS:
            enc = make_encoder(name, teacher_for(name), seed=seed, **OPTIONS.get(name, {}))
            calls = FEWSHOT_CALLS if enc.stochastic else 1
            e = [enc(z) for _ in range(calls)]
            record = {"e": [c.tolist() for c in e]}
            if name in BIJECTIONS:
                record["inverse"] = enc.inverse(e[0]).tolist()
            out["encoders"][f"{name}/{seed}"] = record
    for label, teacher in (("single", TEACHER), ("multi", MULTI)):
        for dtype in (torch.float64, torch.float32):
            out["teachers"][f"{label}/{dtype}"] = teacher.forward(z.to(dtype), x.to(dtype)).double().tolist()
    return out


@pytest.fixture(scope="module")
def before():
    return json.loads(DATA.read_text())


def f64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


ULPS = 32  # of the values' scale, in the dtype computed


def assert_same(got, want, what, dtype=torch.float64):
    """Equal up to ULPS units in the last place of the largest value, in `dtype` (NaN nowhere).
    The last bits of a matrix product depend on the CPU's BLAS kernels (their summation order):
    pinned on an earlier machine, an AMD EPYC gives 1–8 ulps less or more. A changed draw, permutation
    or formula moves the numbers at O(1) (test_a_wrong_permutation_fails_the_pinned_numbers)."""
    got, want = torch.as_tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
    assert got.shape == want.shape and not got.isnan().any(), what
    tol = ULPS * torch.finfo(dtype).eps * max(1.0, float(want.abs().max()))
    assert float((got - want).abs().max()) <= tol, what


# ----------------------------------------------------------------------------- the same numbers

@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_every_encoder_gives_the_numbers_it_gave_on_the_host(before, name):
    z = f64(before["z"])
    assert_same(z, latents().tolist(), "the latents")
    for seed in SEEDS:
        enc = make_encoder(name, teacher_for(name), seed=seed, **OPTIONS.get(name, {}))
        record = before["encoders"][f"{name}/{seed}"]
        for call, want in enumerate(record["e"]):  # fewshot: its first calls, in order
            assert_same(enc(z), want, f"{name} seed {seed} call {call}")
        if "inverse" in record:
            assert_same(enc.inverse(f64(record["e"][0])), record["inverse"], f"{name} inverse")


def test_the_teachers_give_the_numbers_they_gave_before(before):
    z, x = f64(before["z"]), f64(before["x"])
    for label, teacher in (("single", TEACHER), ("multi", MULTI)):
        for dtype in (torch.float64, torch.float32):
            for _ in range(2):  # the second call reads the cached tensors
                got = teacher.forward(z.to(dtype), x.to(dtype))
                assert got.dtype == dtype
                assert_same(got.double(), before["teachers"][f"{label}/{dtype}"], f"{label} {dtype}", dtype)


def test_a_wrong_permutation_fails_the_pinned_numbers(before, monkeypatch):
    """The comparison can fail: interval_shuffle built with two intervals of its permutation
    swapped gives other numbers."""
    real = np.random.default_rng

    class Swapped:  # the real generator, but two intervals of every permutation swapped
        def __init__(self, seed):
            self.rng = real(seed)

        def __getattr__(self, name):
            return getattr(self.rng, name)

        def permutation(self, n):
            perm = self.rng.permutation(n)
            perm[[0, 1]] = perm[[1, 0]]
            return perm

    monkeypatch.setattr(np.random, "default_rng", Swapped)
    enc = make_encoder("interval_shuffle", TEACHER, seed=0)
    with pytest.raises(AssertionError):
        assert_same(enc(f64(before["z"])), before["encoders"]["interval_shuffle/0"]["e"][0], "")


def test_fewshot_checkpoints_its_cpu_stream():
    """state["generator"] is the CPU stream (verify.learning.train saves and restores it):
    restoring its state repeats the draws, as before. The fixed maps have no stream."""
    enc = make_encoder("fewshot", TEACHER, seed=2, n_shots=4)
    assert enc.generator_on("cpu") is enc.state["generator"]
    assert make_encoder("fewshot_fixed_x", TEACHER).generator_on("cpu") is None
    z = latents()
    enc(z)
    saved = enc.state["generator"].get_state()
    first = enc(z)
    assert not torch.equal(enc(z), first)
    enc.state["generator"].set_state(saved)
    assert torch.equal(enc(z), first)


# ----------------------------------------------------------------------------- nothing crosses

FROM_HOST_DATA = (torch.as_tensor, torch.tensor, torch.asarray, torch.from_numpy)


class Crossings(TorchFunctionMode):
    """Every torch call that reads or makes a tensor off `device`, or makes one from host
    data (a numpy array, a list): (call, {"cpu", "host data", …})."""

    def __init__(self, device):
        super().__init__()
        self.device, self.seen = device, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in _flatten((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        off = {str(t.device) for t in tensors if t.device != self.device}
        if func in FROM_HOST_DATA and args and not isinstance(args[0], torch.Tensor):
            off.add("host data")
        if off:
            self.seen.append((getattr(func, "__name__", str(func)), off))
        return out


def _flatten(tree):
    if isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _flatten(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _flatten(item)
    else:
        yield tree


def on_meta(f, *args):
    """(f's output, the calls off the meta device) for meta args."""
    with Crossings(META) as mode:
        out = f(*args)
    return out, mode.seen


def meta_encoder(name, teacher, monkeypatch):
    """A fresh encoder; `fewshot`'s device generator is None on meta, which has none."""
    made = []

    def generator_on(device, seed):
        made.append((device, seed))
        return None

    monkeypatch.setattr(encodings, "_device_generator", generator_on)
    return make_encoder(name, teacher, seed=1, **OPTIONS.get(name, {})), made


@pytest.mark.parametrize("name", ENCODING_NAMES)
def test_encoders_run_where_z_lives_and_copy_their_constants_once(name, monkeypatch):
    """On a device other than the CPU (meta here), the first call copies the encoder's
    constants there and reads nothing back; later calls touch no tensor off the device."""
    teacher = dataclasses.replace(teacher_for(name))  # its arrays not yet on meta (fewshot's use them)
    enc, made = meta_encoder(name, teacher, monkeypatch)
    z = latents().to(META)
    e, first = on_meta(enc, z)
    assert e.device == META and e.shape == (len(z), enc.dim) and e.dtype == torch.float64
    # The first call copies constants host → device (cpu in, meta out), never device → host.
    assert all(off <= {"cpu", "host data"} for _, off in first), first
    assert (first == []) == (name == "identity")  # every other encoder has constants to copy
    for _ in range(2):
        e, later = on_meta(enc, z)
        assert later == [] and e.device == META
    if name in BIJECTIONS:
        back, crossed = on_meta(enc.inverse, e)
        assert back.device == META and crossed == []  # encoding warmed the inverse's constants too
    if name == "fewshot":
        enc.generator_on("meta")  # the stream a checkpoint of a run there would save: the same one
        assert made == [(META, enc.state["seed"])]  # one generator for the device, from the seed


@pytest.mark.parametrize("teacher", [TEACHER, MULTI], ids=["single", "multi"])
def test_teachers_keep_their_arrays_on_the_device(teacher):
    teacher = dataclasses.replace(teacher)  # the same arrays, nothing kept yet (other tests used meta)
    z, x = latents().to(META), inputs().to(META)
    y, first = on_meta(teacher.forward, z, x)
    assert y.device == META and y.shape == (len(z), teacher.O)
    assert first and all(off == {"host data"} for _, off in first)  # the arrays, copied once
    y, later = on_meta(teacher.forward, z, x)
    assert y.device == META and later == []
    y, _ = on_meta(teacher.forward, z.float(), x.float())  # another dtype: its own copies
    assert y.dtype == torch.float32


def test_the_check_catches_encoders_that_use_the_host():
    """The harness above can fail: computing on the host, reading a CPU constant, or copying
    a constant to the device on every call is each seen."""
    z, Q = latents().to(META), torch.eye(CFG.M, dtype=torch.float64)
    with pytest.raises(NotImplementedError):  # meta data cannot be read: a hop to the host fails
        on_meta(lambda z: (z.cpu() @ Q).to(z.device), z)
    _, seen = on_meta(lambda z: z @ Q, z)  # a CPU tensor where the device's belongs (meta allows it)
    assert seen == [("matmul", {"cpu"})] or seen == [("__matmul__", {"cpu"})]
    for copy_each_call in (lambda z: z @ Q.to(z.device),
                           lambda z: z @ torch.as_tensor(Q.numpy(), device=z.device)):
        on_meta(copy_each_call, z)
        _, later = on_meta(copy_each_call, z)
        assert later, "a per-call copy is seen on every call"


def test_batches_make_their_codes_without_the_host(monkeypatch):
    """HyperteacherBatches no longer moves z to the CPU for the encoder."""
    from verify.learning.families import draw

    enc = make_encoder("interval_shuffle", TEACHER, seed=0)
    calls = []
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: calls.append(self) or self)
    z = latents()
    assert torch.equal(draw.encode_on(enc, z), enc(z)) and calls == []


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.test_encodings_device --record")
    torch.set_num_threads(1)  # as the tests run (tests/conftest.py)
    DATA.write_text(json.dumps(outputs()) + "\n")
    print(f"wrote {DATA} ({DATA.stat().st_size} bytes)")
