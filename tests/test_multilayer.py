"""Multi-layer teachers and their construction: L = 1 is the single-layer teacher, size = formula,
certificate ≤ ε, dense = structured, measured ≤ certificate, interval bounds contain the teacher;
and the checks that show these assertions can fail."""

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from constructions import HyperteacherConfig, build_shallow, sample_hyperteacher
from constructions.base import count_hidden_units
from constructions.multilayer import MultiLayerConstruction, build_multilayer
from constructions.tasks.hyperteacher import TeacherBase, dense_latents, enumerate_supports
from constructions.tasks.multilayer import MultiLayerHyperteacher, sample_multilayer_hyperteacher
from tests.strategies import FAST_COARSE_GRID as FAST
from tests.strategies import random_tasks, small_configs
from theory import multilayer as theory
from verify.theorem.measure import measure_sup_error


def student_inputs(teacher, z, x):
    return torch.cat([teacher.encode(z), x], dim=1)


def test_one_layer_is_the_single_layer_teacher_and_layers_do_not_depend_on_L(tmp_path):
    cfg = HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, encoding="orthogonal", seed=3)
    single, one = sample_hyperteacher(cfg), sample_multilayer_hyperteacher(cfg, 1)
    z, x = random_tasks(single, 64, 0)
    assert torch.equal(single.forward(z, x), one.forward(z, x))
    assert np.array_equal(single.Q, one.Q) and np.array_equal(single.A, one.A)
    two, three = sample_multilayer_hyperteacher(cfg, 2), sample_multilayer_hyperteacher(cfg, 3)
    for l in range(2):
        assert np.array_equal(two.Ws[l], three.Ws[l]) and np.array_equal(two.bs[l], three.bs[l])
    assert two.Ws[1].shape == (5, 4, 4) and not np.array_equal(two.Ws[1], three.Ws[2])
    assert three.L == 3 and three.sizes == (3, 4, 4, 4) and three.n_supports() == 15
    three.save_npz(tmp_path / "t.npz")
    loaded = MultiLayerHyperteacher.load_npz(tmp_path / "t.npz")
    assert torch.equal(loaded.forward(z, x), three.forward(z, x)) and loaded.encoding == "orthogonal"


def test_both_teachers_read_their_sizes_weights_and_encoding_from_one_base():
    """The shared properties live once (TeacherBase); each teacher only names its layers, and a
    single-layer teacher still has no Ws (build_multilayer refuses it by that)."""
    cfg = HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, weights="continuous", encoding="orthogonal", seed=7)
    single, three = sample_hyperteacher(cfg), sample_multilayer_hyperteacher(cfg, 3)
    assert isinstance(single, TeacherBase) and isinstance(three, TeacherBase)
    for teacher in (single, three):
        assert (teacher.M, teacher.I, teacher.H, teacher.O, teacher.K) == (5, 3, 4, 2, 2)
        assert teacher.n_supports() == 15 and np.array_equal(teacher.weight_values, [0.5, 1.0])
    z = torch.rand(4, 5, dtype=torch.float64)
    assert torch.equal(single.encode(z), three.encode(z))
    assert torch.equal(single.encode(z), z @ torch.as_tensor(single.Q).T)
    assert not hasattr(single, "Ws") and not hasattr(single, "L")
    wide = sample_multilayer_hyperteacher(dataclasses.replace(cfg, H=6), 2)
    assert wide.H == 6 and wide.sizes == (3, 6, 6)


@given(cfg=small_configs(max_io=4, max_M=6), L=st.integers(1, 3), log_eps=st.floats(-3.0, 0.0),
       constants=st.sampled_from(["apriori", "instance"]))
def test_construction_holds_on_random_instances(cfg, L, log_eps, constants):
    eps = 10.0**log_eps
    teacher = sample_multilayer_hyperteacher(cfg, L)
    net = build_multilayer(teacher, eps, constants=constants)
    dense = net.to_sequential()

    # Size: the built MLP's widths = the formula = what the buffers hold.
    widths = count_hidden_units(dense)
    assert widths == list(net.hidden_units().widths) == net.counted_widths()
    assert sum(widths) == net.hidden_units().total == theory.count_closed_form(cfg.I, cfg.H, cfg.M, net.N)
    assert sum(net.hidden_units().terms.values()) == net.hidden_units().total
    assert all(isinstance(m, (torch.nn.Linear, torch.nn.ReLU)) for m in dense)

    # Certificate ≤ ε, and ≤ Σ κ_l/N_l² (the bound the allocation minimised).
    cert = net.certificate()
    assert cert <= eps
    assert cert <= np.sum(theory.kappas(net.bounds, teacher.A) / np.square(net.N)) * (1 + 1e-12)

    # Dense = structured, on X × Z_K (within both rounding floors) and off the box. (64 rows:
    # the dense net has up to ~10⁵ units here.)
    with torch.no_grad():
        on = student_inputs(teacher, *random_tasks(teacher, 64, cfg.seed))
        assert (dense(on) - net(on)).abs().max() <= net.rounding_floor() + net.rounding_floor(dense=True)
        off = student_inputs(teacher, *random_tasks(teacher, 64, cfg.seed + 1, spread=1.5))
        assert (dense(off) - net(off)).abs().max() <= 1e-10 * (1 + net(off).abs().max())

    # The interval bounds contain the teacher's activations.
    z, x = random_tasks(teacher, 512, cfg.seed + 2)
    for h, lb in zip(teacher.activations(z, x), net.bounds, strict=True):
        assert (h <= torch.as_tensor(lb.U) * (1 + 1e-12) + 1e-12).all()

    # Measured sup error ≤ certificate + rounding floor.
    measured = measure_sup_error(net, teacher, seed=cfg.seed, **FAST)
    assert measured.sup_error <= cert + net.rounding_floor()


def test_layer_one_bound_is_attained_at_a_vertex():
    """U¹ is the exact sup of h¹: at the best vertex z = 1_T and x_i = sign(c_ih(z)), h¹_h = U¹_h."""
    teacher = sample_multilayer_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=9), 2)
    U = theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K)[0].U
    supports = enumerate_supports(teacher.M, teacher.K)
    z = torch.as_tensor(dense_latents(supports, np.ones(supports.shape), teacher.M))
    c = torch.einsum("vm,mih->vih", z, torch.as_tensor(teacher.Ws[0])) / np.sqrt(teacher.K)
    best = np.zeros(teacher.H)
    for h in range(teacher.H):
        x = torch.sign(c[:, :, h])
        best[h] = teacher.activations(z, x)[0][:, h].max()
    np.testing.assert_allclose(best, U, rtol=1e-12)
    # and the separable bound (per-term sups) is never below it
    loose = theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K, vertex_limit=0)
    assert all((a.U >= b.U * (1 - 1e-12)).all() for a, b in
               zip(loose, theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K), strict=True))


def test_one_layer_apriori_is_the_shallow_theorem_network():
    teacher = sample_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=1))
    one = sample_multilayer_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5, K=2, seed=1), 1)
    shallow, multi = build_shallow(teacher, 1e-3), build_multilayer(one, 1e-3, constants="apriori")
    assert build_shallow(one, 1e-3).N == shallow.N  # an L = 1 teacher serves shallow too
    with pytest.raises(AttributeError, match="2-layer"):
        build_shallow(sample_multilayer_hyperteacher(HyperteacherConfig(I=3, H=4, O=2, M=5), 2), 1e-3)
    assert multi.N == (shallow.N,) and multi.certificate() == pytest.approx(shallow.certificate(), rel=1e-12)
    assert multi.hidden_units().total == shallow.hidden_units().total
    z, x = random_tasks(one, 128, 0, spread=1.5)
    with torch.no_grad():
        inputs = student_inputs(one, z, x)
        assert (multi(inputs) - shallow(inputs)).abs().max() <= 1e-12
    # Instance constants use the per-(i, h) ranges, so they never need a larger N.
    assert build_multilayer(one, 1e-3, constants="instance").N[0] <= build_shallow(
        teacher, 1e-3, constants="instance").N


def test_allocation_is_close_to_the_best_integer_allocation():
    """Brute force over N_1 (for each, the smallest N_2 meeting ε) against the Lagrange + trim."""
    teacher = sample_multilayer_hyperteacher(HyperteacherConfig(I=2, H=3, O=2, M=4, K=2, seed=2), 2)
    bounds, eps = theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K), 1e-2
    w = theory.square_weights(bounds)
    N = theory.allocate_N(bounds, teacher.A, eps)
    best, n2 = np.inf, 20 * N[1]
    for n1 in range(1, 20 * N[0]):  # the smallest feasible N_2 only falls as N_1 grows
        if theory.certificate(bounds, teacher.A, (n1, n2)) > eps:
            continue
        while n2 > 1 and theory.certificate(bounds, teacher.A, (n1, n2 - 1)) <= eps:
            n2 -= 1
        best = min(best, w[0] * n1 + w[1] * n2)
    assert best <= w @ np.array(N) <= 1.02 * best


def tiny_two_layer():
    cfg = HyperteacherConfig(I=1, H=1, O=1, M=1, K=1, weights="continuous", seed=0)
    return sample_multilayer_hyperteacher(cfg, 2)


def exhaustive_sup_tiny(net, teacher, n=1001):
    """sup of |f − g| over an n × n grid of all of X × Z_K = [-1, 1] × [0, 1] (I = M = K = 1)."""
    x, z = (g.reshape(-1, 1) for g in torch.meshgrid(torch.linspace(-1, 1, n, dtype=torch.float64),
                                                       torch.linspace(0, 1, n, dtype=torch.float64),
                                                       indexing="ij"))
    with torch.no_grad():
        return float((net(torch.cat([z, x], dim=1)) - teacher.forward(z, x)).abs().max())


def test_the_certificate_is_nearly_reached_and_one_more_knot_is_caught_on_the_tiny_instance():
    """I = H = O = M = K = 1, L = 2: the grid reaches 0.96 of the certificate, more than the
    certificate a network with N_l + 1 would have, so claiming that one would be caught."""
    teacher = tiny_two_layer()
    net = build_multilayer(teacher, 1e-2, constants="instance")
    truth = exhaustive_sup_tiny(net, teacher)
    assert 0.9 * net.certificate() <= truth <= net.certificate() + net.rounding_floor()
    assert truth > theory.certificate(net.bounds, teacher.A, [n + 1 for n in net.N])


def test_a_bound_U_that_is_too_small_is_caught():
    """Halving U¹ clamps the next block's input below the teacher's activation."""
    teacher = sample_multilayer_hyperteacher(HyperteacherConfig(I=3, H=3, O=2, M=5, K=2, seed=5), 2)
    good = theory.interval_bounds(teacher.Ws, teacher.bs, teacher.K)
    first = dataclasses.replace(good[0], U=good[0].U / 2)
    second = theory.layer_bounds(teacher.Ws[1], teacher.bs[1], teacher.K, first.U / 2, first.U / 2)
    bad = [first, second]
    net = MultiLayerConstruction(teacher, theory.allocate_N(bad, teacher.A, 1e-3), bounds=bad)
    assert net.certificate() <= 1e-3
    assert measure_sup_error(net, teacher, **FAST).sup_error > 10 * net.certificate()


@pytest.mark.parametrize("encoding", ["identity", "orthogonal"])
def test_network_for_one_teacher_fails_against_a_perturbed_layer_two(encoding):
    cfg = HyperteacherConfig(I=4, H=4, O=3, M=6, K=2, encoding=encoding, seed=11)
    teacher = sample_multilayer_hyperteacher(cfg, 2)
    net = build_multilayer(teacher, 1e-3, constants="instance")
    assert measure_sup_error(net, teacher, **FAST).sup_error <= net.certificate() + net.rounding_floor()
    W2 = teacher.Ws[1].copy()
    W2[3] += 0.02 * np.sign(W2[3]) * np.abs(W2).max()
    perturbed = dataclasses.replace(teacher, Ws=(teacher.Ws[0], W2))
    result = measure_sup_error(net, perturbed, **FAST)
    assert result.sup_error > 3 * net.certificate()
    assert 3 in result.support


def test_bad_options_are_refused():
    teacher = tiny_two_layer()
    with pytest.raises(ValueError, match="lean"):
        build_multilayer(teacher, 1e-2, variant="lean")
    with pytest.raises(ValueError, match="constants"):
        build_multilayer(teacher, 1e-2, constants="exact")
    with pytest.raises(ValueError, match="eps"):
        build_multilayer(teacher, -1.0)
    with pytest.raises(ValueError, match="MultiLayerHyperteacher"):
        build_multilayer(sample_hyperteacher(HyperteacherConfig(I=1, H=1, O=1, M=1, K=1)), 1e-2)
    with pytest.raises(ValueError, match="layers"):
        sample_multilayer_hyperteacher(HyperteacherConfig(), 0)


def test_symbolic_checks():
    assert all(theory.symbolic_checks().values())
