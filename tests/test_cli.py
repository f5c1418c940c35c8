"""python -m verify.bound: output, exit codes, bad input and --save."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import verify.bound
from constructions import Hyperteacher, registry
from constructions.catalogue import CONSTRUCTIONS, REGISTRY
from verify.theorem.measure import measure_sup_error

SMALL = ["--M", "5", "--K", "2", "--I", "3", "--H", "3", "--O", "2", "--eps", "1e-2", "--no-progress"]


def run_main(capsys, argv):
    code = verify.bound.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_module_entry_point_prints_a_passing_report():
    proc = subprocess.run([sys.executable, "-m", "verify.bound", *SMALL], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for text in ("squares 2·I·H·N", "certificate", "measured", "PASS", "verdict       PASS"):
        assert text in proc.stdout


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        verify.bound.main(["--help"])
    assert exc.value.code == 0
    assert "--eps" in capsys.readouterr().out


@pytest.mark.parametrize("variant", ["theorem", "lean"])
@pytest.mark.parametrize("constants", ["apriori", "instance"])
def test_json_report_holds_the_figures(capsys, variant, constants):
    code, out, _ = run_main(capsys, [*SMALL, "--json", "--variant", variant, "--constants", constants])
    r = json.loads(out)
    assert code == 0 and r["passed"] and all(r["checks"].values())
    N, units = r["N"], r["hidden_units"]
    carry = 5 if variant == "theorem" else 3
    assert units["total"] == 2 * 3 * 3 * N + carry + 3 == sum(units["widths"])
    assert r["certificate"] <= r["eps"] and r["measured"]["sup_error"] <= r["certificate"]
    assert r["measured"]["tasks_enumerated"] and r["measured"]["n_tasks"] == 15
    assert r["dense_vs_structured_max_abs"] <= 1e-10


# Every registered construction as the CLI picks it (a multi-layer one: its blocks and
# --layers 2), then cases of their own.
EVERY_CONSTRUCTION = [["--construction", e.blocks, "--layers", "2"] if e.multi_layer
                      else ["--construction", name] for name, e in REGISTRY.items()]


@pytest.mark.parametrize("argv", [
    *EVERY_CONSTRUCTION, ["--construction", "exact", "--weights", "khot"],
    ["--layers", "3", "--constants", "instance"],
])
def test_every_construction_passes_its_own_checks(capsys, argv):
    code, out, _ = run_main(capsys, [*SMALL, "--json", *argv])
    r = json.loads(out)
    assert code == 0 and r["passed"] and len(r["checks"]) == 4, r["checks"]
    units = r["hidden_units"]
    assert units["total"] == sum(units["widths"]) == sum(units["terms"].values())
    assert r["dense_vs_structured_max_abs"] <= 1e-10
    if r["construction"]["task_set"] == "levels":  # exact: zero error, and says where that ends
        assert r["measured"]["sup_error"] <= 1e-12 and r["off_task_set"]
        levels = 6 if "discrete" in r["teacher"]["weights"] else 1
        assert r["level_tasks"]["enumerated"] and r["level_tasks"]["n_tasks"] == 5 * levels + 10 * levels**2
        assert r["level_tasks"]["max_error"] <= 1e-12
    else:
        assert r["measured"]["sup_error"] <= r["certificate"] <= r["eps"]
    code, out, _ = run_main(capsys, [*SMALL, *argv])
    assert "verdict       PASS" in out
    # The text names the construction; the theorem's own network is named by the theorem's N.
    assert r["construction"]["name"] in out or "= ⌈√(I·C·a/ε)⌉" in out


@pytest.mark.parametrize("argv,message", [
    (["--eps", "0"], "positive"), (["--eps", "-1e-3"], "positive"), (["--eps", "nan"], "positive"),
    (["--eps", "inf"], "positive"), (["--eps", "abc"], "positive"), (["--M", "3", "--K", "4"], "at most"),
    (["--M", "0"], "positive integer"), (["--I", "-2"], "positive integer"),
    (["--weights", "binary"], "khot, discrete, continuous"),
    (["--encoding", "tokens"], "identity, orthogonal"),
    (["--variant", "wide"], "theorem, lean"), (["--constants", "guess"], "apriori, instance"),
    (["--frobnicate"], "unrecognized"),
    (["--construction", "magic"], ", ".join(CONSTRUCTIONS)),
    (["--construction", "exact", "--weights", "continuous"], "finite weight set"),
    (["--construction", "deep", "--layers", "2"], "shallow blocks only"),
    (["--layers", "9"], "at most 8"), (["--layers", "0"], "positive integer"),
    (["--layers", "2", "--variant", "lean"], "lean"),
])
def test_bad_input_gets_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_main(capsys, argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_dense_that_cannot_fit_is_refused_with_its_size(capsys):
    code, _, err = run_main(capsys, ["--M", "1024", "--eps", "1e-5", "--dense"])
    assert code == 2 and "GiB" in err and "--dense" in err


def test_eps_below_float64_resolution_is_refused(capsys):
    code, _, err = run_main(capsys, [*SMALL[:-3], "--eps", "1e-15"])
    assert code == 2 and "float64" in err


def test_a_violated_bound_exits_1(capsys, monkeypatch):
    """Feed in a constant that is too small: the measurer must catch it and the CLI say FAIL."""
    real = registry.BUILDERS["shallow"]

    def too_small(teacher, eps, **kw):
        net = real(teacher, eps, **kw)
        return real(teacher, eps, C=0.5 * net.C, **kw)

    monkeypatch.setitem(registry.BUILDERS, "shallow", too_small)
    code, out, _ = run_main(capsys, SMALL)
    assert code == 1
    assert "FAIL          measured <= certificate" in out and "verdict       FAIL" in out


def test_save_writes_the_three_files_other_tools_read(capsys, tmp_path):
    code, out, _ = run_main(capsys, [*SMALL, "--json", "--save", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["N"] == json.loads(out)["N"]
    with np.load(tmp_path / "teacher.npz") as f:
        assert f["W"].shape == (5, 3, 3) and f["b"].shape == (5, 3) and f["A"].shape == (3, 2)
        assert int(f["K"]) == 2 and len(f["weight_values"]) == 6
    teacher = Hyperteacher.load_npz(tmp_path / "teacher.npz")
    state = torch.load(tmp_path / "network.pt")
    n1, n2 = report["hidden_units"]["widths"]
    net = torch.nn.Sequential(torch.nn.Linear(8, n1), torch.nn.ReLU(), torch.nn.Linear(n1, n2),
                              torch.nn.ReLU(), torch.nn.Linear(n2, 2)).double()
    net.load_state_dict(state)
    # The reloaded plain MLP, measured afresh against the reloaded teacher, meets the certificate.
    assert measure_sup_error(net, teacher, refine_steps=30).sup_error <= report["certificate"]


def test_dense_flag_measures_the_nn_sequential(capsys):
    code, out, _ = run_main(capsys, [*SMALL, "--json", "--dense"])
    r = json.loads(out)
    assert code == 0 and r["measured"]["network"] == "dense nn.Sequential"


@pytest.mark.parametrize("argv", [["--construction", "deep"], ["--layers", "2"]])
def test_saved_deeper_networks_reload_from_the_reported_widths(capsys, tmp_path, argv):
    """network.pt of any construction is a plain Linear/ReLU stack: the widths in report.json
    rebuild it, and the reloaded network still meets the certificate."""
    from constructions.tasks.multilayer import MultiLayerHyperteacher
    from verify.learning.train import mlp

    code, _, _ = run_main(capsys, [*SMALL, *argv, "--save", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    load = MultiLayerHyperteacher if "--layers" in argv else Hyperteacher
    teacher = load.load_npz(tmp_path / "teacher.npz")
    net = mlp(5 + 3, report["hidden_units"]["widths"], 2).double()
    net.load_state_dict(torch.load(tmp_path / "network.pt"))
    assert code == 0 and len(report["hidden_units"]["widths"]) > 2
    assert measure_sup_error(net, teacher, refine_steps=30).sup_error <= report["certificate"]


@pytest.mark.parametrize("module, sizes, strict", [
    ("verify.bound", dict(M=32, K=3, I=16, H=16, O=16), False),
    ("verify.exact_sup", dict(M=2, K=1, I=1, H=1, O=1), False),
    ("verify.sgd", dict(M=8, K=2, I=4, H=4, O=4), True),
])
def test_every_cli_takes_the_teacher_flags_from_one_helper(module, sizes, strict):
    """--M --K --I --H --O --weights --encoding (and --seed) come from cli.add_teacher_flags: each
    CLI keeps its own defaults, and a bad name is refused by argparse (sgd) or by the CLI's check."""
    import importlib

    from verify.cli import TEACHER_SIZE_HELP, Parser, UsageError, add_teacher_flags

    actions = {a.dest: a for a in importlib.import_module(module).build_parser()._actions}
    for name, default in sizes.items():
        assert actions[name].default == default
        assert actions[name].help == f"{TEACHER_SIZE_HELP[name]} (default {default})"
    assert actions["weights"].default == "discrete" and actions["encoding"].default == "identity"
    assert (actions["weights"].choices is not None) == strict
    p = Parser("test")
    add_teacher_flags(p, dict(sizes, weights="khot"), strict_names=strict, with_seed=not strict)
    args = p.parse_args([])
    assert {n: getattr(args, n) for n in sizes} == sizes and args.weights == "khot"
    assert hasattr(args, "seed") != strict
    if strict:
        with pytest.raises(UsageError, match="invalid choice"):
            p.parse_args(["--encoding", "tokens"])
    else:
        assert p.parse_args(["--encoding", "tokens"]).encoding == "tokens"  # the CLI's check refuses it
