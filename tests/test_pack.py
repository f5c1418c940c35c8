"""Packs: many runs of one shape as one batched model (verify.learning.pack).

A packed run must end as the same run trained alone, up to float32 rounding: batched
products may round differently from single ones (on this machine the 16-wide MLPs come out
bit for bit, a 4-wide one and the transformer within 1.2e-7 of a weight after 30 steps), so
the checks allow 1e-6 on a weight of scale ~1 and 1e-6 relative on a loss: ~8 float32 ulps,
far below what a wrong member (its own data, init or state swapped) moves (≥ 1e-3).
Each member's checkpoint is the one a run alone writes.
"""

from __future__ import annotations

import copy

import pytest
import torch

from verify.learning import pack, train
from verify.learning import sgd_program as sgd
from verify.learning.train import TrainConfig

HYPERTEACHER = ["--M", "5", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--shapes", "custom", "--widths",
                "16", "16"]
PREFERENCE = ["--family", "preference", "--M", "4", "--K", "2", "--F", "4", "--widths", "16"]
TRANSFORMER = ["--M", "5", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--student", "transformer",
               "--d-model", "16", "--n-layers", "1", "--d-ffw", "16"]


def member(flags, seed, steps=30, checkpoint=None, **config):
    """A run of verify.sgd's flags at `seed` (its own teacher or world, split and data) as a
    pack Member, its student initialised as the run alone initialises it."""
    args = sgd.parse_args([*flags, "--seed", str(seed)])
    family = sgd.make_family(args)
    torch.manual_seed(seed)
    (net, widths), = sgd.build_students(args, family, []).values()
    cfg = TrainConfig(steps=steps, tasks_per_batch=8, samples_per_task=4, seed=seed, lr=1e-3, **config)
    return pack.Member(family, sgd.split_of(args).train, net, cfg, name=f"seed {seed}", widths=widths,
                       checkpoint=checkpoint)


def alone(m: pack.Member, **kwargs):
    return train.train_student(m.family, m.train_supports, copy.deepcopy(m.net), m.cfg, progress=False,
                               log_every=1, **kwargs)


def same_parameters(a, b, atol=1e-6):
    return all(torch.allclose(p, q, rtol=0, atol=atol)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))


def same_losses(a, b) -> bool:
    return [s for s, _ in a.losses] == [s for s, _ in b.losses] and \
        [v for _, v in a.losses] == pytest.approx([v for _, v in b.losses], rel=1e-6)


@pytest.mark.parametrize("flags", [HYPERTEACHER, [*HYPERTEACHER, "--encoding", "fewshot"], PREFERENCE],
                         ids=["hyperteacher", "fewshot", "preference"])
def test_a_packed_mlp_ends_as_each_run_alone(flags):
    # Fresh members for each: fewshot's encoder carries its own random stream, which a run advances.
    runs = [alone(member(flags, seed)) for seed in (0, 1, 2)]
    packed = pack.train_pack([member(flags, seed) for seed in (0, 1, 2)], progress=False, log_every=1)
    for run, p in zip(runs, packed, strict=True):
        assert same_losses(p, run) and same_parameters(p.net, run.net)
        assert p.config["packed_with"] == 3
    # The members really differ (their own data and init): a pack is not one run three times.
    assert not same_parameters(packed[0].net, packed[1].net, atol=1e-3)


def test_a_packed_transformer_ends_as_each_run_alone_up_to_float_rounding():
    members = [member(TRANSFORMER, seed) for seed in (0, 1)]
    runs = [alone(m) for m in members]
    for run, p in zip(runs, pack.train_pack(members, progress=False, log_every=1), strict=True):
        assert same_losses(p, run) and same_parameters(p.net, run.net)


def test_a_pack_with_a_cosine_schedule_and_all_decay_steps_as_its_runs():
    members = [member(HYPERTEACHER, seed, steps=12, schedule="cosine", warmup_steps=3, decay="all")
               for seed in (3, 4)]
    for run, p in zip([alone(m) for m in members], pack.train_pack(members, progress=False, log_every=1),
                      strict=True):
        assert same_losses(p, run) and same_parameters(p.net, run.net)


def interrupted_pack(tmp_path, monkeypatch):
    """Two 10-step runs, trained alone (their uninterrupted results), then as a pack stopped
    during step 6 under a clock that ticks 1 s a reading (so the checkpoints hold step 4).
    Returns (fresh members on those checkpoints, a factory of them, the runs alone)."""
    def members():
        return [member(HYPERTEACHER, seed, steps=10, checkpoint=tmp_path / f"{seed}.ckpt") for seed in (0, 1)]

    whole = [alone(m) for m in members()]
    ticks = iter(range(10**6))
    monkeypatch.setattr(train, "_clock", lambda: next(ticks))
    real, steps = pack._pack_step, []

    def stop_at_six(*a):
        steps.append(1)
        if len(steps) == 6:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(pack, "_pack_step", stop_at_six)
    with pytest.raises(KeyboardInterrupt):
        pack.train_pack(members(), progress=False, log_every=1, checkpoint_seconds=4)
    monkeypatch.setattr(pack, "_pack_step", real)
    assert [torch.load(tmp_path / f"{s}.ckpt", weights_only=False)["step"] for s in (0, 1)] == [4, 4]
    return members, whole


def test_members_checkpoints_are_a_run_alones_and_a_pack_resumes_from_them(tmp_path, monkeypatch):
    """A pack stopped mid-run resumes from its members' checkpoints to the uninterrupted end;
    and a member's final checkpoint, read by a run alone, ends as the run alone does."""
    members, whole = interrupted_pack(tmp_path, monkeypatch)
    for run, p in zip(whole, pack.train_pack(members(), progress=False, log_every=1, checkpoint_seconds=4),
                      strict=True):
        assert same_losses(p, run) and same_parameters(p.net, run.net)
    # Read by a run alone: it finds the run done, and trains nothing.
    monkeypatch.setattr(train, "apply_tasks", lambda *a: pytest.fail("trained again"))
    for seed, run in zip((0, 1), whole, strict=True):
        m = member(HYPERTEACHER, seed, steps=10)
        again = train.train_student(m.family, m.train_supports, m.net, m.cfg, progress=False,
                                    checkpoint=tmp_path / f"{seed}.ckpt")
        assert same_losses(again, run) and same_parameters(again.net, run.net)


def test_a_member_resumed_alone_from_a_packs_checkpoint_continues_as_the_run(tmp_path, monkeypatch):
    """Stopped mid-pack, then each run finished alone from its own checkpoint."""
    members, whole = interrupted_pack(tmp_path, monkeypatch)
    for m, run in zip(members(), whole, strict=True):
        rest = train.train_student(m.family, m.train_supports, m.net, m.cfg, progress=False, log_every=1,
                                   checkpoint=m.checkpoint, checkpoint_seconds=10**9)
        assert same_losses(rest, run) and same_parameters(rest.net, run.net)


def test_runs_that_cannot_share_a_pack_are_refused(tmp_path):
    wide = member(["--M", "5", "--K", "2", "--I", "3", "--H", "2", "--O", "2", "--shapes", "custom",
                   "--widths", "32", "16"], 1)
    with pytest.raises(pack.PackMismatch, match="differ in parameters"):
        pack.check_packable([member(HYPERTEACHER, 0), wide])
    with pytest.raises(pack.PackMismatch, match="differ in config"):
        pack.check_packable([member(HYPERTEACHER, 0), member(HYPERTEACHER, 1, steps=31)])
    with pytest.raises(pack.PackMismatch, match="differ in family"):
        pack.check_packable([member(HYPERTEACHER, 0), member(PREFERENCE, 1)])
    same_file = tmp_path / "one.ckpt"
    with pytest.raises(pack.PackMismatch, match="share a checkpoint file"):
        pack.check_packable([member(HYPERTEACHER, 0, checkpoint=same_file),
                             member(HYPERTEACHER, 1, checkpoint=same_file)])
    # Checkpoints at different steps: the runs were not packed together; train them alone.
    first = member(HYPERTEACHER, 0, steps=4, checkpoint=tmp_path / "a.ckpt")
    alone(first, checkpoint=first.checkpoint)
    with pytest.raises(pack.PackMismatch, match="some runs of this pack have checkpoints"):
        pack.train_pack([member(HYPERTEACHER, 0, steps=4, checkpoint=tmp_path / "a.ckpt"),
                         member(HYPERTEACHER, 1, steps=4, checkpoint=tmp_path / "b.ckpt")], progress=False)


def test_verify_sgd_runs_packed_report_what_they_report_alone(tmp_path):
    """Three runs of a study (seeds, and so teachers, splits and data) through sgd.run_packed:
    each report's metrics are those of the same run alone, its row marked packed_with."""
    def argv(seed):
        return [*HYPERTEACHER, "--steps", "20", "--eval-tasks", "32", "--eval-samples", "4", "--no-progress",
                "--seed", str(seed), "--checkpoint", str(tmp_path / f"run{seed}")]

    packed = sgd.run_packed([sgd.parse_args(argv(seed)) for seed in (0, 1, 2)])
    for seed, report in zip((0, 1, 2), packed, strict=True):
        single = sgd.run(sgd.parse_args(argv(seed)[:-2]))
        assert same_metrics(report["metrics"], single["metrics"])
        assert report["rows"][-1]["packed_with"] == 3 and "packed_with" not in single["rows"][-1]
        assert (tmp_path / f"run{seed}" / f"seed{seed}_custom.ckpt").exists()
    with pytest.raises(pack.PackMismatch, match="one student each"):
        sgd.run_packed([sgd.parse_args(["--M", "4", "--K", "2", "--steps", "5"])])  # matched and balanced


def same_metrics(a: list[dict], b: list[dict]) -> bool:
    """Metric records equal but for float32 training's rounding (1e-6 relative, 1e-9 absolute)."""
    def names(records):
        return [(m["network"], m["side"], m["metric"]) for m in records]

    return names(a) == names(b) and \
        [m["value"] for m in a] == pytest.approx([m["value"] for m in b], rel=1e-6, abs=1e-9)
