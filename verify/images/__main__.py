"""python -m verify.images: the paper's text-to-image experiment from the command line (issue 25).

Commands:
  train    train the controlled experiment's denoiser on a split of the rendered family, then
           analyse it: exactly `python -m verify.images.train` (its flags, output and exit codes)
  analyse  analyse a text-to-image pipeline (a folder written by save_pretrained, such as the
           pipeline/ folder that train writes, or a hub id already in the local Hugging Face
           cache) on a prompt family: generate with the anchor's seeds, record activations, probe
           decodability per layer on training prompts, score it on held-out ones, judge every
           image, write DIR/results.json
  report   read results files of analyse or train: per file the success rates and the best
           denoiser layer's held-out decodability; given 3 or more, the correlation of the two

`python -m verify.images COMMAND --help` describes each command's flags.
Exit codes: 0 done, 2 usage error (one line, before any work), 3 internal error, 130 interrupted.
"""

from __future__ import annotations

import sys

from constructions.tasks.image_setups import ANCHOR_SEED
from verify import cli
from verify.cli import non_negative_float, non_negative_int, positive_int
from verify.images import analyse

PROG = "python -m verify.images"
PROGRAM = "verify.images"
COMMANDS = ("train", "analyse", "report")

ANALYSE = """Analyse a text-to-image pipeline on a prompt family (verify.images.analyse).

MODEL is a folder written by save_pretrained (the pipeline/ folder that `python -m verify.images
train` writes, say) or a hub id ("owner/name") already in the local Hugging Face cache: nothing is
downloaded. The family's prompts are split into training and held-out ones: by default the split
a pipeline of `train` records it was trained on (MODEL/split.json), so that no prompt it was
trained on is scored as held out; for any other pipeline the family's own, ceil(0.3·n) held out at
random by the anchor's rule. --test-fraction / --split-seed ask for the family's split at that share
and seed instead, refused where it holds out a prompt the pipeline was trained on unless
--allow-train-overlap; a pipeline of an older `train`, which records no split, needs both. The
report says which split was used, where it came from and what it holds out, with the coverage
report (does every constituent occur in training?). Up to
--prompts training and --prompts held-out prompts get --n-seeds images each, with the anchor's seeds
(prompt i's k-th image: --seed + i·n_seeds + k, i its index in the whole family), the pooled
activations of the --layers at the --fractions of the denoising steps and the text encoders'
outputs recorded. The linear probe per layer is fitted on the training prompts' images and scored
on the held-out prompts' images (weighted F1, exact match); the judge decides, per image and slot,
whether it shows what its prompt asked for. DIR/results.json holds it all with its provenance.
"""

REPORT = """Summarise results files of `analyse` or `train` (verify.images.results).

Per file: the model, the family, the judge's success on training and held-out prompts, and the
denoiser's best layer by held-out F1 (never the text encoder's) with its F1 and exact match.
Given 3 or more files: Pearson's and Spearman's correlation across files of that F1 with held-out
success, with percentile bootstrap intervals (verify.images.study_report.correlation).
"""


def build_parser() -> cli.Parser:
    p = cli.Parser(PROG, __doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # `train` is dispatched to verify.images.train before this parser runs (see main); its entry
    # here is for this --help.
    sub.add_parser("train", help="train and analyse the controlled denoiser (python -m verify.images.train)",
                   add_help=False)

    a = sub.add_parser("analyse", help="analyse a text-to-image pipeline on a prompt family",
                       description=ANALYSE)
    a.add_argument("model", metavar="MODEL",
                   help="a pipeline folder (save_pretrained) or a hub id in the local Hugging Face cache")
    a.add_argument("--setup", required=True, metavar="NAME",
                   help="the prompt family: one of the anchor's 31 setups "
                        "(constructions.tasks.image_setups), or scene1 / scene2, the rendered family with 1 "
                        "or 2 objects")
    a.add_argument("--test-fraction", type=cli.open_fraction,
                   help="ask for the family's split holding out this share of its prompts, in (0, 1): "
                        "ceil(share · n) of them, at random (the anchor's rule) (default: the split the "
                        "pipeline records it was trained on; else 0.3)")
    a.add_argument("--split-seed", type=cli.seed,
                   help="ask for the family's split drawn with this seed, which also draws the analysed "
                        "prompts' subsets (default: the split the pipeline records it was trained on; else "
                        "the family's own, 42 for the anchor's setups as the anchor drew them, 0 for "
                        "scene1 / scene2 as verify.images.train draws them)")
    a.add_argument("--allow-train-overlap", action="store_true",
                   help="run a split asked for by --test-fraction / --split-seed even where it holds out "
                        "prompts the pipeline records it was trained on (refused otherwise): they are then "
                        "scored as held out, and the report says so")
    a.add_argument("--prompts", type=non_negative_int, default=0,
                   help="training and held-out prompts analysed, each side, drawn at random where a side has "
                        "more; 0: all (default 0, as the anchor)")
    a.add_argument("--n-seeds", type=positive_int, default=1,
                   help="images per prompt, seeds by the anchor's rule (default 1, the anchor's)")
    a.add_argument("--seed", type=cli.seed, default=ANCHOR_SEED,
                   help="base of the images' seeds: prompt i's k-th image has seed SEED + i·n_seeds + k "
                        "(default 42, the anchor's)")
    a.add_argument("--steps", type=positive_int, default=analyse.DEFAULT_STEPS,
                   help=f"denoising steps per image (default {analyse.DEFAULT_STEPS}, the anchor's for every "
                        "model; verify.images.train samples with --sample-steps, 20 by default)")
    a.add_argument("--guidance", type=non_negative_float,
                   help="classifier-free guidance scale; ≤ 1 runs no unconditional rows (default: the "
                        "pipeline's own, not passed)")
    a.add_argument("--layers", nargs="+", metavar="PATTERN",
                   help="regular expressions for the denoiser modules to record, matched against the full "
                        "module name (default: every resnet, attention, down- and upsampler of a UNet's "
                        "blocks, every transformer block of SD3 or FLUX); the text encoders are always "
                        "recorded")
    a.add_argument("--fractions", type=float, nargs="+", default=list(analyse.DEFAULT_FRACTIONS),
                   help="fractions of the denoising steps whose activations are kept, in [0, 1] (default "
                        + " ".join(f"{f:g}" for f in analyse.DEFAULT_FRACTIONS) + ")")
    a.add_argument("--rows", choices=("cond", "both"), default="cond",
                   help="CFG rows recorded: the conditional ones, or both (the unconditional ones under "
                        "LAYER@uncond, probed too) (default cond)")
    a.add_argument("--batch", type=positive_int, default=analyse.DEFAULT_BATCH,
                   help=f"images per pipeline call; an image depends on its seed, not on its batch "
                        f"(default {analyse.DEFAULT_BATCH})")
    a.add_argument("--judge", choices=("exact", "clip", "llm"), default="exact",
                   help="who decides whether an image shows its prompt: exact (reads the pixels; scene1 "
                        "and scene2 only), clip (zero-shot per slot, needs --clip-model) or llm (a "
                        "vision-language model through the llm package, needs --llm-model and its API key) "
                        "(default exact)")
    a.add_argument("--clip-model", metavar="FOLDER",
                   help="the clip judge's CLIP checkpoint: a local folder (or a hub id in the local cache)")
    a.add_argument("--llm-model", metavar="NAME",
                   help="the llm judge's model, as the llm package names it (e.g. gemini-2.0-flash)")
    a.add_argument("--llm-per-slot", action="store_true",
                   help="the llm judge asks one question per slot instead of one per image")
    a.add_argument("--out", metavar="DIR",
                   help="folder for DIR/results.json, which is replaced (default out/images-analyse/<the "
                        "model's name>-<setup> under the working folder)")
    a.add_argument("--device", default="cpu",
                   help="cpu, or cuda / cuda:N where a GPU is present (default cpu)")
    cli.add_json(a)
    cli.add_common(a, threads_default="the cores the load leaves free")

    r = sub.add_parser("report", help="summarise results files; correlate decodability with success",
                       description=REPORT)
    r.add_argument("files", nargs="+", metavar="RESULTS.json", help="results files of analyse or train")
    cli.add_json(r)
    return p


def parse_args(argv):
    args = build_parser().parse_args(argv)
    if args.command == "analyse":
        settings = analyse.Settings(
            n_seeds=args.n_seeds, steps=args.steps, guidance=args.guidance,
            layers=tuple(args.layers or analyse.DEFAULT_PATTERNS), fractions=tuple(args.fractions),
            rows=args.rows, batch=args.batch, base_seed=args.seed)
        args.request = analyse.Request(
            model=args.model, setup=args.setup, judge=args.judge, clip_model=args.clip_model,
            llm_model=args.llm_model, llm_per_slot=args.llm_per_slot, test_fraction=args.test_fraction,
            split_seed=args.split_seed, allow_train_overlap=args.allow_train_overlap, prompts=args.prompts,
            settings=settings, out=args.out,
            device=args.device, threads=args.threads,
            progress=False if args.no_progress else None).checked()
    elif args.command == "report":
        args.records = [analyse.read_results(path) for path in args.files]
    return args


def work(args) -> int:
    if args.command == "analyse":
        report = analyse.run(args.request)
        cli.emit(cli.to_json(report) if args.json else analyse.format_report(report))
    else:
        summary = analyse.report(args.files, args.records)
        cli.emit(cli.to_json(summary) if args.json else analyse.format_summary(summary))
    return cli.EXIT_OK


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        from verify.images import train

        return train.main(argv[1:])
    prog = f"{PROGRAM} {argv[0]}" if argv[:1] and argv[0] in COMMANDS else PROGRAM
    return cli.main_of(prog, parse_args, work, argv)


if __name__ == "__main__":
    cli.exit(main())
