"""python -m verify.images.train: the controlled text-to-image experiment, one run (issue 25, part 3).

A small pixel-space denoiser (verify.images.denoiser: a diffusers UNet2DConditionModel with a
CLIP text encoder, trained from scratch) learns the rendered shape/colour/position family
(constructions.tasks.images) on the training combinations of a random split, and is then
analysed as a real model would be:

1. train on the training combinations' renders and prompts (DDPM noise, epsilon MSE, AdamW,
   the prompt dropped to "" with probability --p-uncond for classifier-free guidance);
2. save the pipeline with save_pretrained into OUT/pipeline, with the split it was trained on
   (OUT/pipeline/split.json, which `analyse` reads: verify.images.split_record);
3. load that folder with verify.images.pipeline.load, as SD would be loaded;
4. generate --n-seeds images for up to --eval-prompts training and --eval-prompts held-out
   prompts (the anchor's seeds), recording pooled activations of the --layers at the
   --fractions of the denoising steps, and the text encoder's output;
5. fit the linear probe per layer on the training prompts' images and score it on the held-out
   prompts' images (weighted F1, exact match);
6. judge every image with the exact judge (shape, colour and position read from the pixels).

Steps 4 to 6 are verify.images.analyse's, the code of `python -m verify.images analyse`: the
trained folder is analysed exactly as any other pipeline is.

The report holds the configuration, the split with its coverage, the loss curve, decodability per
layer, the success rates on training and held-out prompts (per slot too), timings and provenance;
OUT/results.json holds the analysis record (verify.images.results) with the training added.
The same arguments give the same numbers (one machine, one thread count).

A study runs this program per grid point through build_parser / parse_args / run_config / run,
as it runs verify.sgd. Exit codes: 0 done, 2 usage error, 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from verify import cli
from verify.cli import UsageError, positive_int
from verify.images.image_run import (
    DEFAULT_HELD_OUT,
    PROGRAM,
    ImageRun,
    ImageRuntime,
)
from verify.learning import tracking
from verify.learning.settings import add_setting_flags, setting_fields, typed_only

PROG = "python -m verify.images.train"
# Settings that do not change a run's result, left out of its configuration's key.
RUNTIME = ("threads", "no_progress", "json", "out", "force", "device", "log", "log_group", "log_name")
DEFAULT_OUT = Path("out") / "images-train"  # relative to the working folder; a run goes in <key[:12]>/
GENERATE_BATCH = 64
SAMPLES = 8  # held-out images kept in the report (the first seed of the first prompts), for the figure


def build_parser() -> cli.Parser:
    p = cli.Parser(PROG, __doc__)
    cover = p.add_mutually_exclusive_group()
    cover.add_argument("--held-out", type=cli.open_fraction,
                       help="share of combinations held out, in (0, 1): ceil(share · n) of them, at random "
                            f"(the anchor's rule) (default {DEFAULT_HELD_OUT:g})")
    cover.add_argument("--train-combinations", type=positive_int,
                       help="number of training combinations, the rest held out (instead of --held-out)")
    add_setting_flags(p, ImageRun)
    p.add_argument("--out", metavar="DIR",
                   help="folder for the saved pipeline (DIR/pipeline) and DIR/results.json; a folder "
                        "that already holds them is refused unless --force (default "
                        "out/images-train/<the configuration's key> under the working folder)")
    p.add_argument("--force", action="store_true",
                   help="let --out replace the pipeline and results.json an earlier run left in DIR")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda / cuda:N where a GPU is present (default cpu)")
    cli.add_json(p)
    tracking.add_flags(p, what="the denoiser's loss curve and the run's success and decodability",
                       group=PROGRAM, name="seed<N>")
    cli.add_common(p, threads_default="the cores the load leaves free")
    return p


@functools.cache
def _parser() -> cli.Parser:
    """One parser for every parse (a study resolves many runs), with the settings' defaults
    left to ImageRun (what was typed is what is given)."""
    return typed_only(build_parser(), setting_fields(ImageRun))


def parse_args(argv=None) -> ImageRun:
    """The run the command line asks for; one line and exit 2 for bad input, before any work
    (nothing is created while parsing)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = _parser().parse_args(argv)
    names = set(setting_fields(ImageRun))
    run = ImageRun.build({k: v for k, v in vars(ns).items() if k in names})
    try:
        log = tracking.spec_of(ns, PROGRAM, f"seed{run.seed}")
    except ValueError as e:
        raise UsageError(str(e)) from None
    return run.replace(runtime=runtime_at(run, ns.out, ns.device, force=ns.force, threads=ns.threads,
                                          no_progress=ns.no_progress, json=ns.json, log=log))


# What a run writes into its folder, and replaces there.
OUTPUTS = ("pipeline", "results.json")


def runtime_at(run: ImageRun, out: str | None, device: str, force: bool = True, **rest) -> ImageRuntime:
    """The runtime that writes into `out` (default: DEFAULT_OUT/<the key's first 12>), on
    `device`, both checked. Without `force` a folder that holds an earlier run's pipeline or
    results is refused (the --save rule of cli.prepare_out_dir: results are not replaced by
    accident); a study's run folder is its own (force)."""
    from verify.studies.store import config_key

    cli.check_device(device)
    out = str(DEFAULT_OUT / config_key(run.key())[:12]) if out is None else out
    folder = cli.check_out_dir(out, "--out")  # nothing is created while parsing
    held = [name for name in OUTPUTS if (folder / name).exists()]
    if held and not force:
        raise UsageError(f"--out {out!r} already holds a trained run ({', '.join(held)}); pass --force to "
                         "replace it, or choose a new folder")
    return ImageRuntime(out=out, device=device, **rest)


def run_config(run: ImageRun) -> dict:
    """A run's resolved configuration, as a study keys it (ImageRun.key): every setting but
    the runtime ones (the split is keyed by its number of training combinations, whichever
    setting gave it)."""
    return run.key()


# --- a study's run (verify.studies.interfaces.StudyProgram) ---------------------------------

def config_of(params: dict) -> ImageRun:
    """The run of a study's grid point (its parameters by name, as the study file types them)."""
    return ImageRun.build(params)


def from_key(config: dict, place: cli.RunPlace | None = None) -> ImageRun:
    """The run a stored key stands for, to run at `place` (one thread, quiet, its saved
    pipeline in the run's folder, its tracker if any), or, with no place, to replay."""
    run = ImageRun.build(config)
    if place is None:
        return run.replace(runtime=ImageRuntime(no_progress=True))
    try:
        log = tracking.parse_log(list(place.log), place.log_group, place.log_name) if place.log else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    return run.replace(runtime=runtime_at(run, place.run_dir, place.device, threads=1, no_progress=True,
                                          log=log))


def command_line(run: ImageRun) -> list[str]:
    """The flags that reproduce `run`."""
    return cli.argv_of(_parser(), {k: v for k, v in run.key().items() if k != "program"})


# --- the run -----------------------------------------------------------------------------------

def _split(scene, n_train: int, seed: int):
    """The split holding out n − n_train combinations by `image_setups.draw_test`'s rule (the head
    of RandomState(seed).permutation(n)), with the coverage report: `images.split` with
    test_fraction (n − n_train) / n, for a count rather than a share."""
    from constructions.tasks import images as scenes
    from constructions.tasks.image_setups import split_by_test

    present, names = scenes.constituents(scene)
    n = len(present)
    test = np.sort(np.random.RandomState(seed).permutation(n)[: n - n_train])
    return split_by_test(present, names, test, n_objects=scene.n_objects, test_fraction=(n - n_train) / n,
                         seed=seed)


def _save_atomically(pipe, folder: Path, scene, split) -> None:
    """save_pretrained into a temporary folder beside `folder`, with the split it was trained on
    (verify.images.split_record: what `analyse` holds out by default), then put it in `folder`'s
    place: a crash leaves the old pipeline or the new one, never weights beside another split."""
    from verify.images import denoiser, split_record
    from verify.images.analyse import family_name

    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        denoiser.save(pipe, tmp)
        split_record.write(tmp, family_name(scene), split)
        if folder.exists():
            old = folder.parent / f".{folder.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def run(args) -> dict:
    """One run: train, save, load, generate, probe, judge; the report (JSON-able)."""
    from verify.images.analyse import quiet_libraries

    with quiet_libraries():
        return _run(args)


def _build(args, scene):
    """The untrained denoiser and text encoder; refuses --layers that match no UNet module
    (only now known, but before any training)."""
    from verify.images import denoiser

    size = args.size()
    with tempfile.TemporaryDirectory() as tok_folder:
        pipe = denoiser.build(scene, denoiser.resolve_size(args.preset, **size), args.seed, tok_folder,
                              args.prediction)
    names = [name for name, _ in pipe.unet.named_modules() if name]
    if not any(re.fullmatch(p, name) for p in args.layers for name in names):
        raise UsageError(f"--layers {' '.join(args.layers)}: no module of the UNet matches (its blocks are "
                         "named like down_blocks.0.attentions.0, mid_block.resnets.0, up_blocks.1.resnets.1)")
    return pipe, size


def _train(args, pipe, scene, combos, train_rows, progress, tracker=None) -> dict:
    """Train on the training combinations' renders and prompts: the loss record."""
    from constructions.tasks import images as scenes
    from verify.images import denoiser

    with cli.counting(args.steps, "train", progress) as count:  # a heartbeat off a terminal
        return denoiser.train(pipe, scenes.render(scene, combos[train_rows]),
                              scenes.prompts(scene, combos[train_rows]), steps=args.steps, batch=args.batch,
                              lr=args.lr, weight_decay=args.weight_decay, p_uncond=args.p_uncond,
                              seed=args.seed, device=args.runtime.device, progress=count,
                              tracker=tracker)


def _log_scores(tracker, steps: int, a, best: str, decodability: dict) -> None:
    """The run's scores into its tracker (--log), then close it: the judge's success on the
    training combinations (`test/success`, the official loaders' name for that side) and the
    held-out ones (`ood/success`), and the best layer's probe F1 on the held-out images."""
    if tracker is None:
        return
    tracker.log(steps, {tracking.metric_name("train", "success"): a.success("train")["rate"],
                        tracking.metric_name("held_out", "success"): a.success("test")["rate"],
                        "probe/test_f1": decodability[best]["test_f1"]})
    tracker.close()


def _run(args) -> dict:
    from constructions.tasks import images as scenes
    from verify.images import analyse, denoiser, pipeline, probes, results
    from verify.images.judges import ExactJudge

    start, seconds = time.perf_counter(), {}
    progress = False if args.runtime.no_progress else None
    threads = cli.set_threads(args.runtime.threads, cli.default_threads(True))
    out = cli.prepare_out_dir(args.runtime.out, "--out", force=None)
    scene = scenes.Scene(n_objects=args.objects)
    split = _split(scene, args.train_combinations, args.split_seed)
    combos = scenes.combinations(scene)

    def timed(name, stage, *a):
        t = time.perf_counter()
        value = stage(*a)
        seconds[name] = time.perf_counter() - t
        return value

    pipe, size = timed("build", _build, args, scene)
    n_params = {"unet": denoiser.parameters(pipe.unet),
                "text_encoder": denoiser.parameters(pipe.text_encoder)}
    tracker = tracking.open_tracker(args.runtime.log, run_config(args))
    training = timed("train", _train, args, pipe, scene, combos, split.train, progress, tracker)
    seconds["per_step"] = seconds["train"] / args.steps
    folder = out / "pipeline"
    timed("save", _save_atomically, pipe.to("cpu"), folder, scene, split)
    del pipe
    # The analysis: the saved folder, read back as any pipeline would be, analysed as
    # `python -m verify.images analyse` analyses one (the same code).
    pipe = timed("load", pipeline.load, folder, args.runtime.device)
    seen = analyse.subset(split.train, args.eval_prompts, args.split_seed, 0)
    unseen = analyse.subset(split.test, args.eval_prompts, args.split_seed, 1)
    settings = analyse.Settings(n_seeds=args.n_seeds, steps=args.sample_steps, guidance=args.guidance,
                                layers=tuple(args.layers), fractions=tuple(args.fractions),
                                batch=GENERATE_BATCH)
    a = analyse.analyse(pipe, scene, seen, unseen, ExactJudge(), settings, progress)
    seconds.update(a.seconds)
    generation = a.generation

    best = probes.best_layer(a.probe)
    decodability = analyse.decodability(a.probe)
    _log_scores(tracker, args.steps, a, best, decodability)
    config = run_config(args)
    training_record = dict(training, steps=args.steps, batch=args.batch, lr=args.lr,
                           weight_decay=args.weight_decay, p_uncond=args.p_uncond, seed=args.seed,
                           training_combinations=[int(r) for r in split.train], parameters=n_params,
                           size=dict(preset=args.preset, **size), threads=threads)
    record = analyse.record(a, model=folder, pipe=pipe, split=split,
                            extra={"training": training_record, "config": config, "program": PROGRAM})
    seconds["total"] = time.perf_counter() - start
    results.write(out / "results.json", {**record, "seconds": seconds})
    return cli.plain({
        "program": PROGRAM,
        "config": config,
        "scene": results.family_summary(scene),
        "split": split.summary(),
        "model": {"folder": str(folder), "pipeline": record["model"]["pipeline"],
                  "config_sha256": record["model"]["config_sha256"], "parameters": n_params,
                  "size": dict(preset=args.preset, **size)},
        "training": {k: training_record[k] for k in ("loss_curve", "first_loss", "last_loss", "steps",
                                                     "batch", "lr", "weight_decay", "p_uncond", "seed")},
        "analysis": {"train_prompts": [int(r) for r in seen], "test_prompts": [int(r) for r in unseen],
                     "n_seeds": args.n_seeds, "sample_steps": args.sample_steps,
                     "guidance": generation.guidance, "cfg": generation.cfg, "layers": a.layers,
                     "fractions": args.fractions, "steps_kept": generation.steps_kept},
        "decodability": decodability,
        "best_layer": {"layer": best, **decodability[best]},
        "success": {"train": a.success("train"), "test": a.success("test")},
        "samples": analyse.samples(a, "test", SAMPLES),
        "seconds": seconds, "threads": threads,
        "provenance": {k: record[k] for k in ("code_version", "git_commit", "timestamp")},
        "results_file": str(out / "results.json"),
    })


# --- the behaviour record (verify.studies.behaviour) -------------------------------------------

BEHAVIOUR_STEPS = 4  # training steps whose losses are recorded
BEHAVIOUR_PROMPTS = 4  # prompts a side the recorded analysis reads (one seed each)
BEHAVIOUR_SAMPLE_STEPS = 2  # denoising steps of its images


def behaviour(args) -> dict[str, list[float]]:
    """What a run computes, in a few numbers that any change to its training, generation,
    probing or judging code moves (verify.studies.behaviour compares them with the ones a
    stored run recorded), all from the run's own configuration:

    - `split`: how many combinations train and how many are held out, and a checksum of both;
    - `parameters`: the UNet's and the text encoder's;
    - `losses`: the first BEHAVIOUR_STEPS training losses, as the run trains them (its data
      stream; AdamW has no schedule, so they do not depend on the run's length);
    - from the model after those steps, saved and loaded back as the run's is, analysed as the
      run analyses it on BEHAVIOUR_PROMPTS prompts a side, one seed, BEHAVIOUR_SAMPLE_STEPS
      denoising steps: `features` (each recorded layer's mean activation), `decodability`
      (each layer's held-out and training F1) and `success` (the judge's rate a side).

    One thread, on the CPU, whatever the run used (a few seconds for the tiny preset)."""
    import torch

    from constructions.tasks import images as scenes
    from verify.images import analyse, denoiser, pipeline
    from verify.images.judges import ExactJudge

    with analyse.quiet_libraries(), tempfile.TemporaryDirectory() as tmp:
        torch.set_num_threads(1)  # quiet_libraries restores the caller's count
        scene = scenes.Scene(n_objects=args.objects)
        split = _split(scene, args.train_combinations, args.split_seed)
        sides = [np.asarray(split.train, dtype=np.int64), np.asarray(split.test, dtype=np.int64)]
        out = {"split": [float(len(s)) for s in sides]
               + [float((s * np.arange(1, s.size + 1)).sum()) for s in sides]}
        pipe, _ = _build(args, scene)
        out["parameters"] = [float(denoiser.parameters(pipe.unet)),
                             float(denoiser.parameters(pipe.text_encoder))]
        short = args.replace(steps=BEHAVIOUR_STEPS, runtime=ImageRuntime())
        training = _train(short, pipe, scene, scenes.combinations(scene), split.train, False)
        out["losses"] = [p["loss"] for p in training["loss_curve"]]  # one step a window
        folder = Path(tmp) / "pipeline"
        _save_atomically(pipe.to("cpu"), folder, scene, split)
        loaded = pipeline.load(folder, "cpu")
        settings = analyse.Settings(n_seeds=1, steps=BEHAVIOUR_SAMPLE_STEPS, guidance=args.guidance,
                                    layers=tuple(args.layers), fractions=tuple(args.fractions),
                                    batch=GENERATE_BATCH)
        seen = analyse.subset(split.train, BEHAVIOUR_PROMPTS, args.split_seed, 0)
        unseen = analyse.subset(split.test, BEHAVIOUR_PROMPTS, args.split_seed, 1)
        a = analyse.analyse(loaded, scene, seen, unseen, ExactJudge(), settings, False)
    layers = sorted(a.probe)
    out["features"] = [float(np.asarray(a.generation.features[k], dtype=np.float64).mean()) for k in layers]
    out["decodability"] = [float(a.probe[k][m]) for k in layers for m in ("test_f1", "train_f1")]
    out["success"] = [a.success(side)["rate"] for side in ("train", "test")]
    return out


# --- the command line --------------------------------------------------------------------------

def _f(v, spec=".3f") -> str:
    return "—" if v is None else format(v, spec)


def format_report(r: dict) -> str:
    c, s, tr, su = r["config"], r["split"], r["training"], r["success"]
    size = r["model"]["size"]
    curve = " ".join(f"{p['loss']:.3f}" for p in tr["loss_curve"])
    lines = [
        f"scene    {c['objects']} object(s): {s['n_train']} training combinations, {s['n_test']} held out "
        f"(split seed {c['split_seed']}); every constituent in training: "
        f"{'yes' if s['covers_all_constituents'] else 'no, missing ' + ', '.join(s['missing_constituents'])}",
        f"model    {size['preset']}: unet channels {size['channels']}, text {size['text_hidden']}×"
        f"{size['text_layers']}; {r['model']['parameters']['unet']:,} + "
        f"{r['model']['parameters']['text_encoder']:,} parameters",
        f"training {tr['steps']} steps of {tr['batch']}, AdamW lr {tr['lr']:g}, seed {tr['seed']}: "
        f"loss {curve} ({r['seconds']['per_step']:.3f} s/step, {r['threads']} thread(s))",
        f"analysis {len(r['analysis']['train_prompts'])} training + "
        f"{len(r['analysis']['test_prompts'])} held-out prompts × {r['analysis']['n_seeds']} seeds, "
        f"{r['analysis']['sample_steps']} DDIM steps, guidance "
        f"{r['analysis']['guidance']}",
        f"success  (exact judge) training {_f(su['train']['rate'])}, held out {_f(su['test']['rate'])}",
        "         per slot, held out: " + ", ".join(f"{k} {_f(v, '.2f')}"
                                                    for k, v in su["test"]["per_slot"].items()),
        f"probe    best layer {r['best_layer']['layer']}: held-out F1 {r['best_layer']['test_f1']:.3f}, "
        f"exact {r['best_layer']['test_exact']:.3f}",
    ]
    for layer, d in r["decodability"].items():
        lines.append(f"  {layer:<36} F1 {d['test_f1']:.3f}  exact {d['test_exact']:.3f}  (training F1 "
                     f"{d['train_f1']:.3f})")
    lines.append(f"saved    {r['model']['folder']}; results {r['results_file']} "
                 f"({r['seconds']['total']:.0f} s)")
    return "\n".join(lines)


work = cli.report_work(run, format_report)


def main(argv=None) -> int:
    return cli.main_of(PROGRAM, parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
