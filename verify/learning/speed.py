"""How fast training runs on a device: the measurements behind `verify.bench --device`.

Each figure is timed on the device itself, with the device synchronised only at the ends
of a timed stretch of steps (as the training loop syncs only when it logs):
- a dense float32 GEMM's FLOP/s, under the matmul precision training uses (the ceiling);
- the paper's training step, alone and packed (verify.learning.pack), and the model FLOP/s
  it reaches (2 × multiply-adds ÷ seconds, forward and backward, as verify.learning.train
  counts them);
- the share of a step spent making the batch;
- the time to write a checkpoint, and its share of wall time at the checkpoint interval.
The targets on an accelerator: the packed step at ≥ 50% of the GEMM's FLOP/s, data ≤ 10% of a
step, checkpoints ≤ 1% of wall time.

What the training loop does for an accelerator, measured on the project's 2-core CPU (one
thread, a 4×256 MLP on the paper's 2,048 rows, medians of two runs):
- the step loop never waits for the device: the running loss stays there and is read every
  --log-every steps (tested: 4 host reads in 40 steps logged every 10, batch making
  included); the teacher, the encoders (all nine, tested equal to their CPU numbers) and the
  preference grid's planner run where training runs;
- precision: a step takes 24.2 ms as it is, 22.1 ms with fused AdamW, 21.7 ms compiled and
  8.1 ms under bf16 autocast (the CPU's bf16 matrix units). The CPU defaults stay float32,
  unfused and eager all the same: they keep every committed number reproducible, and bf16
  carries 8 significant bits. Tested on CPU: bf16 moves the first loss by a few parts in 2⁸;
  fused AdamW and a compiled step train as the eager one within float32 rounding. The CUDA
  defaults (TF32, fused AdamW) are not yet measured: `verify.bench --device cuda` would;
- no step got slower on the CPU with this work: interleaved with the code before it (commit
  f08a0ab), three times, one thread, the hyperteacher's 4×256 step took 24.2–25.1 ms before and
  24.0–25.3 ms after, the preference grid's 2×256 step 22.8–24.4 ms before and 21.7–23.6 ms
  after;
- checkpoints (--checkpoint-minutes, default 10, and at the end) are fsynced and renamed into
  place, the disk checked for room first; a checkpoint written on another kind of device is
  refused in one line (its random streams do not carry over); a run started again resumes
  from them and ends bit for bit as an uninterrupted run (tested).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from verify.learning import pack, train
from verify.learning.families import TaskFamily
from verify.learning.train import Speed, TrainConfig


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, calls: int, repeats: int = 3) -> float:
    """Median over `repeats` of the seconds per call of `calls` back-to-back calls of fn."""
    fn()  # warm-up: caches, kernels, compilation
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def gemm_flops(device: torch.device, n: int, speed: Speed, calls: int = 10) -> float:
    """FLOP/s of an n×n×n float32 matrix product on `device` under speed's matmul precision."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    with train.matmul_precision(speed):
        return 2 * n**3 / timed(lambda: a @ b, device, calls)


def step_time(family: TaskFamily, supports, widths: list[int], device: torch.device, speed: Speed,
              n_pack: int = 1, tasks_per_batch: int = 128, samples_per_task: int = 16,
              steps: int = 10) -> dict:
    """The paper's training step of an MLP of `widths` on `device`, for one run (n_pack = 1)
    or a pack of n_pack: seconds a step, seconds a step per run, the share spent making the
    batches, and the model FLOP/s."""
    P = family.rows_per_task(samples_per_task)
    cfg = TrainConfig(steps=steps, tasks_per_batch=tasks_per_batch, samples_per_task=samples_per_task,
                      device=str(device))
    nets = [train.mlp(family.E + family.I, widths, family.O).to(device) for _ in range(n_pack)]
    batches = [family.batches(supports, tasks_per_batch, P, seed, device) for seed in range(n_pack)]
    autocast = torch.bfloat16 if speed.precision == "bf16" else None
    if n_pack == 1:
        opt = train.optimizer_of(nets[0], cfg, speed.fused)
        forward = train.forward_of(nets[0], speed.compile)

        def step():
            train.train_step(forward, opt, batches[0](), family.loss, autocast)
    else:
        stack = pack._Stack(nets, cfg, speed.fused)
        forward = pack.packed_forward(nets[0], speed.compile)

        def step():
            pack._pack_step(forward, stack, [b() for b in batches], family.loss, autocast)

    with train.matmul_precision(speed):
        seconds = timed(step, device, steps)
        data = timed(lambda: [b() for b in batches], device, steps)
    macs = n_pack * train.step_macs(nets[0], tasks_per_batch, P)
    return dict(widths=widths, n_pack=n_pack, rows=tasks_per_batch * P, step_s=seconds,
                per_run_step_s=seconds / n_pack, data_share=data / seconds, model_flops=2 * macs / seconds)


def checkpoint_time(family: TaskFamily, supports, widths: list[int], device: torch.device) -> dict:
    """Seconds to write one run's checkpoint (model and AdamW state, fsynced) and its size."""
    cfg = TrainConfig(device=str(device))
    net = train.mlp(family.E + family.I, widths, family.O).to(device)
    opt = train.optimizer_of(net, cfg)
    batches = family.batches(supports, 4, family.rows_per_task(1), 0, device)
    train.train_step(train.forward_of(net), opt, batches(), family.loss)  # AdamW's state exists after a step
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.ckpt"

        def save():
            train.save_checkpoint(path, {}, net.state_dict(), opt.state_dict(), batches, None,
                                  train.RunProgress(step=1))

        seconds = timed(save, torch.device("cpu"), calls=1)
        size = path.stat().st_size
    return dict(seconds=seconds, bytes=size,
                share_at_interval=seconds / (seconds + train.CHECKPOINT_SECONDS))
