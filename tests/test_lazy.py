"""The lazy-to-rich axis (issue 45, verify/learning/lazy.py): the centred model α·(f − f₀) and
AdamW's lr ÷ α. Each test compares what the scaling must do with what a wrong one does."""

import copy

import pytest
import torch
from torch import nn

from verify.learning import kernel_vs_sgd, lazy

SMALL = ["--M", "5", "--K", "2", "--I", "2", "--H", "2", "--O", "2", "--eval-tasks", "16",
         "--eval-samples", "4", "--samples-per-task", "4", "--depth", "2", "--method", "trained",
         "--width", "8", "--steps", "20",
         "--tasks-per-batch", "4", "--probe-rows", "16", "--no-progress"]


def _net(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 2)).double()


def _adam_steps(alpha: float, lr_of, steps: int = 1, seed: int = 0):
    """(the centred model after `steps` AdamW steps at lr_of(alpha), the rows, its output)."""
    model = lazy.Centred(_net(seed), alpha)
    rows = torch.randn(32, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.randn(32, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    # ε far below every gradient, so that the first step is −lr·sign(g) to rounding (AdamW's
    # default 1e-8 bends it where a gradient is that small, differently at each α).
    opt = torch.optim.AdamW(model.net.parameters(), lr=lr_of(alpha), weight_decay=0.0, eps=1e-30)
    for _ in range(steps):
        opt.zero_grad()
        ((model(rows) - target) ** 2).mean().backward()
        opt.step()
    return model, rows, model(rows).detach()


def test_the_centred_model_is_zero_at_init_and_its_gradient_is_alpha_times_the_net_s():
    net = _net()
    model = lazy.Centred(copy.deepcopy(net), 7.0)
    rows = torch.randn(10, 3, dtype=torch.float64)
    assert torch.equal(model(rows), torch.zeros(10, 2, dtype=torch.float64))
    model(rows).sum().backward()
    net(rows).sum().backward()
    for p, q in zip(model.net.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, 7.0 * q.grad, rtol=1e-12, atol=0)
    assert all(p.grad is None for p in model.init.parameters())  # θ₀ never trains


def test_under_adam_lr_over_alpha_moves_the_function_as_far_at_every_alpha():
    # Adam's first step is −lr·sign(g) per parameter, so the function's first change,
    # α·J·Δθ, is the same at every α with lr/α; with gradient descent's lr/α² it shrinks as 1/α.
    # What separates them is the second-order term, the product of the two layers' steps:
    # α·(lr/α)² a pair, lr²/α (at lr 1e-5 it reached 7e-10 against changes of about 5e-6, no
    # ReLU flipping). At lr 1e-8 it is about 1e-15 of a change of about 5e-9, a difference of
    # O(1) outputs that float64 rounds to about 1e-7 of itself.
    lr = 1e-8
    changes = {a: _adam_steps(a, lambda a: lazy.learning_rate(lr, a))[2] for a in (1.0, 10.0, 100.0)}
    for a in (10.0, 100.0):
        torch.testing.assert_close(changes[a], changes[1.0], rtol=1e-5, atol=0)
    wrong = {a: _adam_steps(a, lambda a: lr / a**2)[2] for a in (1.0, 100.0)}
    ratio = float(wrong[100.0].norm() / wrong[1.0].norm())
    assert ratio == pytest.approx(0.01, rel=0.05)  # what the check above would catch


def test_the_parameters_move_as_one_over_alpha_in_the_lazy_regime():
    moved = {a: lazy.parameter_movement(_adam_steps(a, lambda a: lazy.learning_rate(1e-3, a), steps=10)[0])
             for a in (100.0, 1000.0)}
    assert moved[100.0] / moved[1000.0] == pytest.approx(10.0, rel=0.05)


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("inf"), float("nan")])
def test_a_scale_that_is_not_positive_and_finite_is_refused(alpha):
    with pytest.raises(ValueError, match="positive finite"):
        lazy.Centred(_net(), alpha)


def test_a_run_on_the_axis_trains_the_centred_model_at_lr_over_alpha_without_decay():
    run = kernel_vs_sgd.parse_args([*SMALL, "--alpha", "10"])
    assert run.weight_decay == 0.0 and kernel_vs_sgd._train_config(run).lr == pytest.approx(run.lr / 10)
    report = kernel_vs_sgd.run(run)
    record = report["record"]
    assert report["alpha"] == 10 and record["parameter_movement"] > 0 and record["kernel_movement"] >= 0
    assert "centred α·(f − f₀), α = 10" in kernel_vs_sgd.format_report(report)
    decayed = kernel_vs_sgd.parse_args([*SMALL, "--alpha", "10", "--weight-decay", "0.01"])
    assert decayed.weight_decay == 0.01  # asked for: kept


def test_a_key_without_alpha_is_the_key_it_was_and_alpha_is_for_the_trained_network_only(capsys):
    plain = kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args(SMALL))
    assert "alpha" not in plain and plain["weight_decay"] > 0  # the family's decay, as stored runs had
    assert kernel_vs_sgd.run_config(kernel_vs_sgd.parse_args([*SMALL, "--alpha", "0.5"]))["alpha"] == 0.5
    at = SMALL.index("--probe-rows")
    linearised = [a if a != "trained" else "linearised" for a in SMALL[:at] + SMALL[at + 2:]]
    assert kernel_vs_sgd.main([*linearised, "--alpha", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--alpha does not apply to --method linearised" in err[0]
