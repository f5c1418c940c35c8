"""A study of the controlled image experiment, read back from its store: the report of
`python -m verify.study report STUDY` for a study whose program is verify.images.train.

The paper's last claim: where a network composes, a task's constituents are linearly decodable
from its activations, and decodability tracks whether text-to-image models compose. One point
per run:

- x, decodability: the probe's weighted F1 on the held-out prompts' images, at the denoiser's
  best layer (the UNet layer with the highest held-out F1; the text encoder, which reads the
  prompt itself, is reported beside it and never chosen);
- y, success: the share of held-out prompts' images the exact judge finds fully right.

The report gives each run; the mean ± sd over seeds per setting (training combinations, model);
whether more training combinations and a larger model help held-out success (the two ends of
each ladder, at every other setting alike, judged by verify.studies.verdicts under the study
file's plan: Welch's t, Holm's correction, a model-size claim tested only above its floor);
and the correlation of x with y across runs, Pearson and Spearman, each with a percentile
bootstrap interval over runs (descriptive: coverage moves both). Whether decodability
predicts success beyond coverage is the regression of success on coverage (a factor) and
decodability, tested on the means of the clusters that share a split (coverage × split seed),
not on runs (`cluster_means_fit`): a t-test with G − C − 1 degrees of freedom, 6% size in 400
planted null studies of 9 clusters, where a percentile cluster bootstrap called an effect in
17% (its interval of the run-level partial correlation is shown as descriptive, from 8
clusters). The model-size claim is tested only where a model composes a tenth of the held-out
prompts (the paper's claim is conditional on enough data).

The experiment this reads (notes kept here, beside its report, because the modules that make
a run are fingerprinted: verify.studies.provenance):
- The paper's image code (Florian-toll/compgen-vision) runs SD, SDXL, SD3 and FLUX through
  diffusers on 31 prompt setups with a Gemini judge. The same analysis is rebuilt in
  verify/images/ and tested on tiny pipelines built from configs; the claim itself is tested
  on a controlled family trained from scratch.
- The family (constructions/tasks/images.py): a 16×16 image holds one object (or two): a
  square, circle, triangle or cross, red, green, blue or yellow, in one of the four quadrants;
  the prompt is "a red square top left". The `exact` judge inverts the renderer: right on every
  render, and a wrong colour, shape or place is read as what it shows (tests with noise up to
  sd 0.1·255 and deliberately wrong images). One object gives 64 combinations, so a held-out
  combination is a (shape, colour, position) triple never seen together.
- The denoiser (verify/images/denoiser.py): a diffusers UNet2DConditionModel (pixel space,
  cross-attention to the text at 8×8 and below) with a small CLIPTextModel and a word-level
  tokenizer, trained with a diffusers DDPM schedule, saved with save_pretrained and read back
  by the same pipeline.load that opens SD. Each prompt has one image, so the UNet predicts the
  clean image (--prediction sample): at 3,000 steps the tiny model gets every training image
  right that way, and 0.01 of them when it predicts the noise (2,000 steps; the v-prediction run
  was no better). Guidance overshoots such a model (right on 1.00, 0.65, 0.28 of training
  images at guidance 1, 2, 3), so the default is none.
- The analysis (verify/images/analyse.py), the same for the trained model and for SD: the
  prompts split 70/30 at random by the anchor's rule (every seed of a prompt on its side), with
  a coverage report; N seeds per prompt with the anchor's seeds; pooled activations of every
  UNet block (spatial mean) at 30, 50, 70 and 100% of the denoising steps, concatenated with
  their mean over all steps, and of the text encoders (token mean), recording the conditional
  classifier-free-guidance rows (--rows both adds the unconditional ones as LAYER@uncond); one
  linear probe per layer, the anchor's scikit-learn pipeline (StandardScaler(with_mean=False),
  one LogisticRegression(lbfgs, max_iter=100) per label bit; a bit constant on the training rows
  is predicted constant) fitted on the training prompts' images and scored on the held-out
  prompts' images by weighted F1 and exact match, with each layer's convergence (`converged`,
  and `bits_converged` as "k of m"); the judge per image and slot.
- A real model: no machine here reaches a model hub, holds SD or FLUX weights or a Gemini key,
  and no GPU was lent to this task, so no real model was run: the real path is tested only for
  its plumbing. Estimated from public throughput, not measured: SD 1.5 at 512², 30 steps with
  guidance is about 1.5 s an image on one A100, so the anchor's 100-prompt setup at 4 seeds is
  about 10 minutes with the hooks, and all 31 setups (18,862 prompts) about 8 GPU-hours at the
  anchor's one seed a prompt, 31 at 4 seeds; SDXL and FLUX.1-dev are 3–6 times slower an image.
- The cpu study (image-composition.yaml): one object; a nested random split of the 64
  combinations leaves 16, 32 or 48 for training (every constituent in training at each), drawn
  by three split seeds a coverage; two UNet widths (8-16 and 16-32 channels); 2,500 steps of
  64, the clean image predicted, no guidance; two seeds; every prompt analysed with 4 seeds.
  Decodability is the best UNet layer's held-out F1, an optimistic pick per run, as in the
  anchor. What it leaves out: the 1-object family only (with two objects in separate quadrants,
  96 training combinations already show 58 of the 64 single-object triples and a tiny model is
  right on 0.97 of held-out images, measured: no composition left to test); two model sizes a
  factor 3.6 apart; two seeds. The paper-scale grid (84 runs: coverage 8–56, the four presets up
  to 11M parameters, 10,000 steps, three seeds) is a GPU's work.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from verify import cli
from verify.learning.records import mean_sd
from verify.studies import behaviour, verdicts
from verify.studies.effects import code_of, csv_text, export_runs, hashable, key_cell, store_notes
from verify.studies.grids import study_plan
from verify.studies.store import RunStore, reads_report
from verify.studies.summary import kept_notes

# The settings that make a model's size: runs that differ in them are compared by parameters.
SIZE_KEYS = ("preset", "channels", "layers_per_block", "text_hidden", "text_layers")
TEXT_LAYER_PREFIX = "text_encoder"
LADDERS = ("train_combinations", "parameters")  # the factors whose ladders the report compares
BOOTSTRAP = 10_000
MIN_CLUSTERS = 8  # partial_fit: 6,435 distinct cluster resamples
BOOTSTRAP_SEED = 0
LEVEL = 0.95
RUN_COLUMNS = ("key", "seed", "train_combinations", "model", "parameters", "train_success", "test_success",
               "best_layer", "decodability", "decodability_exact", "text_decodability", "code")


def is_text_layer(layer: str) -> bool:
    return layer.split("@")[0].startswith(TEXT_LAYER_PREFIX)


def best_unet_layer(decodability: dict) -> str | None:
    """The denoiser layer with the highest held-out F1 (the first of ties, in the report's order)."""
    layers = [k for k in decodability if not is_text_layer(k)]
    return max(layers, key=lambda k: decodability[k]["test_f1"]) if layers else None


@reads_report
def run_row(run: dict, judge=None) -> dict:
    """One done run as the report reads it."""
    r, config = run["report"], run["config"]
    size = r["model"]["size"]
    params = r["model"]["parameters"]
    best = best_unet_layer(r["decodability"])
    text = [d["test_f1"] for k, d in r["decodability"].items() if is_text_layer(k) and "@" not in k]
    model = f"{size['preset']} {'-'.join(map(str, size['channels']))}/{size['layers_per_block']}, text " \
            f"{size['text_hidden']}×{size['text_layers']}"
    return dict(key=run["key"], seed=config["seed"], split_seed=config.get("split_seed", 0),
                train_combinations=config["train_combinations"],
                model=model, parameters=int(params["unet"] + params["text_encoder"]),
                train_success=r["success"]["train"]["rate"], test_success=r["success"]["test"]["rate"],
                best_layer=best, decodability=r["decodability"][best]["test_f1"] if best else None,
                decodability_exact=r["decodability"][best]["test_exact"] if best else None,
                text_decodability=max(text) if text else None, layers=r["decodability"],
                config=config, code=code_of(run, judge))


# --- statistics ----------------------------------------------------------------------------------

def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, ties averaged (scipy.stats.rankdata, row by row)."""
    from scipy.stats import rankdata

    return rankdata(a, axis=-1)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair; nan where either row is constant."""
    xc, yc = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
    den = np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def correlation(x, y, *, n_boot: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED, level: float = LEVEL) -> dict:
    """Pearson's and Spearman's correlation of paired samples with percentile bootstrap
    intervals (pairs resampled with replacement; resamples where either side is constant are
    dropped and counted), and scipy's two-sided p-values (which assume independent pairs)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(x)
    out = dict(n=n, level=level, bootstrap=n_boot, seed=seed)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return out | dict(status="too few points or a constant side", pearson=None, spearman=None)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    xb, yb = x[idx], y[idx]
    tail = (1 - level) / 2
    for name, point, p, boot in (
            ("pearson", *stats.pearsonr(x, y), _pearson_rows(xb, yb)),
            ("spearman", *stats.spearmanr(x, y), _pearson_rows(_ranks(xb), _ranks(yb)))):
        kept = boot[np.isfinite(boot)]
        lo, hi = np.quantile(kept, [tail, 1 - tail]) if len(kept) else (math.nan, math.nan)
        out[name] = dict(r=float(point), p=float(p), lo=float(lo), hi=float(hi),
                         degenerate=int(n_boot - len(kept)))
    return out | dict(status="fitted")


def partial_fit(x, y, coverage, clusters, *, n_boot: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED,
                level: float = LEVEL) -> dict:
    """Held-out success y regressed on coverage (as a factor) and decodability x: the partial
    correlation of x and y given coverage and x's coefficient, both from x and y less their
    coverage's mean (Frisch–Waugh–Lovell), with percentile intervals from a cluster bootstrap
    (whole clusters of runs resampled with replacement: runs that share a coverage and split
    seed share their held-out combinations, so they are not independent). Below MIN_CLUSTERS
    clusters the interval is not given: there are too few distinct resamples (C(2k − 1, k): 10
    for k = 3) for a 95% interval's tails.

    The verdict does not rest on that interval: with 9 clusters the percentile cluster
    bootstrap called an effect in 17% of 100 planted null studies, and a cluster-robust t
    (CR1, G − 1 df) in 11% of 400 (tests/test_images_study.py's _clustered design). It rests
    on the regression of the clusters' mean success on their mean decodability with coverage
    as a factor (`cluster_means`): a classical linear model with G − C − 1 degrees of
    freedom (C coverages), whose t-interval for the coefficient had 6% size and full power
    there. verdicts.interval_side reads it: "> 0", "< 0" or inconclusive."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    labels = sorted(set(clusters), key=str)
    out = dict(n=len(x), clusters=len(labels), level=level, bootstrap=n_boot, seed=seed)

    def fit(idx):
        cov = [coverage[i] for i in idx]
        xr, yr = within(x[idx], cov), within(y[idx], cov)
        sxx, syy = float(xr @ xr), float(yr @ yr)
        if sxx == 0 or syy == 0:
            return math.nan, math.nan
        return float(xr @ yr) / math.sqrt(sxx * syy), float(xr @ yr) / sxx

    out["cluster_means"] = cluster_means_fit(x, y, coverage, clusters, level)
    out["verdict"] = out["cluster_means"]["verdict"]
    if len(x) < 3:
        return out | dict(status="too few runs", r=None, slope=None)
    r, slope = fit(np.arange(len(x)))
    if not math.isfinite(r):
        return out | dict(status="a side is constant within every coverage", r=None, slope=None)
    out |= dict(r=r, slope=slope)
    if len(labels) < MIN_CLUSTERS:
        status = f"{len(labels)} clusters (coverage × split seed), fewer than {MIN_CLUSTERS}: no interval"
        return out | dict(status=status, lo=None, hi=None)
    members = [np.array([i for i, c in enumerate(clusters) if c == label]) for label in labels]
    rng = np.random.default_rng(seed)
    boot = np.array([fit(np.concatenate([members[k] for k in rng.integers(0, len(labels), len(labels))]))
                     for _ in range(n_boot)])
    kept = boot[np.isfinite(boot[:, 0])]
    tail = (1 - level) / 2
    (lo, slope_lo), (hi, slope_hi) = np.quantile(kept, [tail, 1 - tail], axis=0)
    return out | dict(status="fitted", lo=float(lo), hi=float(hi), slope_lo=float(slope_lo),
                      slope_hi=float(slope_hi), degenerate=int(n_boot - len(kept)))


def cluster_means_fit(x, y, coverage, clusters, level: float = LEVEL, *, sensitivity: bool = True) -> dict:
    """The clusters' mean success regressed on their mean decodability and coverage (as a
    factor), by least squares: decodability's coefficient, its t-interval at `level` with
    G − C − 1 degrees of freedom (G clusters, C coverages), and the verdict of that interval
    against 0 (partial_fit's docstring says why this, not the bootstrap, decides)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    labels = sorted(set(clusters), key=str)
    cover = {label: coverage[clusters.index(label)] for label in labels}
    levels = sorted(set(cover.values()))
    xm = np.array([x[[c == g for c in clusters]].mean() for g in labels])
    ym = np.array([y[[c == g for c in clusters]].mean() for g in labels])
    design = np.column_stack([xm, *[np.array([cover[g] == c for g in labels], dtype=float) for c in levels]])
    df = len(labels) - design.shape[1]
    out = dict(clusters=len(labels), coverages=len(levels), df=df, level=level)
    if df < 1 or np.ptp(xm) == 0:
        return out | dict(slope=None, lo=None, hi=None, p=None, verdict=verdicts.INCONCLUSIVE,
                          status=f"{len(labels)} clusters at {len(levels)} coverages: no degrees of freedom "
                                 "left for a test (it needs more clusters than coverages + 1)")
    beta, *_ = np.linalg.lstsq(design, ym, rcond=None)
    resid = ym - design @ beta
    inverse = np.linalg.pinv(design.T @ design)
    se = math.sqrt(float(resid @ resid) / df * inverse[0, 0])
    slope = float(beta[0])
    if se == 0:
        return out | dict(slope=slope, lo=slope, hi=slope, p=0.0 if slope else 1.0, status="fitted",
                          verdict=verdicts.interval_side(slope, slope, 0.0))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    out |= dict(slope=slope, lo=slope - half, hi=slope + half, se=se, status="fitted",
                p=float(2 * stats.t.sf(abs(slope / se), df)),
                verdict=verdicts.interval_side(slope - half, slope + half, 0.0))
    if not sensitivity:
        return out
    return out | leave_one_cluster_out(x, y, coverage, clusters, level, out["verdict"])


def leave_one_cluster_out(x, y, coverage, clusters, level: float, verdict: str) -> dict:
    """The primary fit's sensitivity (issue 43): the fit again without each cluster in turn. A
    verdict that leaving out one cluster flips is `fragile`; the refits are printed beside it."""
    refits = []
    for label in sorted(set(clusters), key=str):
        keep = [c != label for c in clusters]
        kept = [i for i, k in enumerate(keep) if k]
        sub = cluster_means_fit(np.asarray(x)[kept], np.asarray(y)[kept], [coverage[i] for i in kept],
                                [clusters[i] for i in kept], level, sensitivity=False)
        refits.append(dict(left_out=label, slope=sub.get("slope"), p=sub.get("p"), verdict=sub["verdict"]))
    flips = [r for r in refits if r["verdict"] != verdict]
    return dict(leave_one_out=refits, fragile=bool(flips), flips=len(flips))


def within(values, groups) -> np.ndarray:
    """Each value less the mean of its group's values."""
    values = np.asarray(values, dtype=np.float64)
    out = values.copy()
    for g in set(groups):
        m = np.array([h == g for h in groups])
        out[m] -= values[m].mean()
    return out


def ladder_comparisons(groups: list[dict], factor: str, plan: verdicts.Plan) -> list[tuple[dict, object]]:
    """Along `factor`, at each setting of the other keys where it takes ≥ 2 values: its largest
    value's held-out success (per seed) against its smallest's, as a verdicts.Comparison, beside
    what the table prints of it. A claim with a floor is not tested where both ends are below
    it (nothing composes there: the claim's condition does not hold)."""
    others = [k for k in groups[0]["setting"] if k != factor] if groups else []
    buckets: dict[tuple, list[dict]] = {}
    for g in groups:
        buckets.setdefault(tuple(hashable(g["setting"][k]) for k in others), []).append(g)
    out = []
    for at, members in buckets.items():
        members = sorted(members, key=lambda g: g["setting"][factor])
        lo, hi = members[0], members[-1]
        if lo is hi or lo["test_success_mean"] is None or hi["test_success_mean"] is None:
            continue
        where = dict(zip(others, at, strict=True))
        claim = plan.claim_for(factor)
        fails = None
        if claim is not None and claim.floor is not None and \
                max(lo["test_success_mean"], hi["test_success_mean"]) < claim.floor:
            fails = (f"held-out success {lo['test_success_mean']:.3f} and {hi['test_success_mean']:.3f}, "
                     f"both below the floor {claim.floor:g}")
        name = f"{factor} {lo['setting'][factor]} → {hi['setting'][factor]} (at " + \
            ", ".join(f"{k} {key_cell(v)}" for k, v in where.items()) + ")"
        info = dict(factor=factor, at=where, low=lo["setting"][factor], high=hi["setting"][factor],
                    ladder=[(g["setting"][factor], g["test_success_mean"]) for g in members])
        values = "test_success_units" if plan.unit == "split_seed" else "test_success_values"
        out.append((info, verdicts.Comparison(name, dict(hi[values]), dict(lo[values]), claim, fails)))
    return out


def ladder_effects(groups: list[dict], plan: verdicts.Plan, seconds: dict | None = None
                   ) -> tuple[list[dict], list[str]]:
    """Every ladder's verdict (one family, Holm-corrected; verify.studies.verdicts), and the
    notes that say how they were decided; with `seconds` (a setting's mean run time, keyed
    (train_combinations, parameters)), what each undecided claim costs to resolve."""
    compared = [pair for factor in LADDERS for pair in ladder_comparisons(groups, factor, plan)]
    if not compared:
        return [], []
    comparisons = [c for _, c in compared]
    judged = verdicts.judge(comparisons, plan)
    effects = [info | dict(effect=v.outcome, test=verdicts.test_text(v), verdict=v.as_dict())
               for (info, _), v in zip(compared, judged, strict=True)]
    notes = verdicts.notes(plan, comparisons, judged)
    if seconds is not None:
        rows = {r["name"]: r for r in verdicts.power_rows(comparisons, plan, verdicts.family_size(judged))}
        notes += [line for (info, c), v in zip(compared, judged, strict=True)
                  if v.outcome in (verdicts.INCONCLUSIVE, verdicts.OPEN) and c.name in rows
                  for line in [_cost_line(info, rows[c.name], groups, seconds)] if line]
    return effects, notes


def _cost_line(info: dict, power: dict, groups: list[dict], seconds: dict) -> str | None:
    """What resolving one claim costs: the unit (a split seed) count its power calls for, less
    those run, times the runs a unit holds in each arm and their mean run time here."""
    unit = "split seed"
    if power["seeds_needed"] is None:
        return (f"cost to resolve {power['name']}: more than {verdicts.MAX_SEEDS} {unit}s an arm: "
                f"out of reach at this sd")
    extra = power["seeds_needed"] - power["seeds_run"]
    if extra <= 0:
        return None
    core_seconds, per_unit = 0.0, []
    for end in ("low", "high"):
        setting = {**info["at"], info["factor"]: info[end]}
        g = next(g for g in groups if g["setting"] == setting)
        runs_a_unit = g["runs"] / len(g["test_success_units"])
        per_unit.append(runs_a_unit)
        core_seconds += extra * runs_a_unit * seconds[setting["train_combinations"], setting["parameters"]]
    runs = round(extra * sum(per_unit))
    return (f"cost to resolve {power['name']}: {extra} more {unit}s an arm ({power['seeds_needed']} in "
            f"all, for {power['target']}), {runs} runs, about {core_seconds / 3600:.1f} core-hours at "
            f"this store's run times")


def _mean_seconds(stored: list[dict], done: list[dict]) -> dict:
    """A setting's mean stored run time, keyed (train_combinations, parameters)."""
    seconds = {r["key"]: r["seconds"] for r in stored if r.get("seconds")}
    by: dict[tuple, list[float]] = {}
    for r in done:
        if r["key"] in seconds:
            by.setdefault((r["train_combinations"], r["parameters"]), []).append(seconds[r["key"]])
    return {k: float(np.mean(v)) for k, v in by.items()}


# --- the table -----------------------------------------------------------------------------------

def _group_rows(runs: list[dict]) -> list[dict]:
    """Mean ± sd over seeds per setting: training combinations × model (by parameters)."""
    buckets: dict[tuple, list[dict]] = {}
    for r in runs:
        buckets.setdefault((r["train_combinations"], r["parameters"], r["model"]), []).append(r)
    rows = []
    for (n_train, parameters, model), members in sorted(buckets.items()):
        row = dict(setting=dict(train_combinations=n_train, parameters=parameters), model=model,
                   runs=len(members), seeds=sorted(m["seed"] for m in members))
        for metric in ("train_success", "test_success", "decodability", "text_decodability"):
            row[f"{metric}_mean"], row[f"{metric}_sd"] = mean_sd([m[metric] for m in members])
        # One value a run: runs of one setting differ in their seed and split seed.
        row["test_success_values"] = {f"{m['split_seed']}/{m['seed']}": m["test_success"] for m in members}
        # One value a split seed (the study's unit, where the split carries the design): the mean
        # of its runs.
        by_split: dict = {}
        for m in members:
            by_split.setdefault(m["split_seed"], []).append(m["test_success"])
        row["test_success_units"] = {k: float(np.mean(v)) for k, v in sorted(by_split.items())}
        rows.append(row)
    return rows


def effects_table(study: str, scale: str, out: Path, keys: set[str] | None = None,
                  fingerprint: str | None = None, plan: verdicts.Plan | None = None) -> dict:
    """The report of the runs in `keys` (the study's grid as it is now), or of every stored run;
    with `fingerprint` (the program's code fingerprint), runs made by other or unknown code are
    marked. The verdicts follow `plan`, by default the study file's."""
    if plan is None:
        plan = study_plan(study, missing_ok=True)
    with RunStore(out / "study.sqlite", readonly=True) as store:
        stored = store.rows()
    runs = [r for r in stored if keys is None or r["key"] in keys]
    judge = behaviour.Judge("verify.images.train", fingerprint) if fingerprint else None
    done = [run_row(r, judge) for r in runs if r["status"] == "done"]
    failed = [r for r in runs if r["status"] == "failed"]
    done.sort(key=lambda r: (r["train_combinations"], r["parameters"], r["seed"]))
    groups = _group_rows(done)
    effects, verdict_notes = ladder_effects(groups, plan, _mean_seconds(runs, done))
    x = [r["decodability"] for r in done]
    y = [r["test_success"] for r in done]
    coverage = [r["train_combinations"] for r in done]
    fit = correlation(x, y) if done else dict(n=0, status="no runs", pearson=None, spearman=None)
    partial = partial_fit(x, y, coverage, [(r["train_combinations"], r["split_seed"]) for r in done])
    notes = verdict_notes
    if y:
        notes.append(f"held-out success spans {min(y):.3f}–{max(y):.3f} across the {len(y)} runs")
    stale = [r for r in done if r["code"] != "current"] if fingerprint else []
    notes += store_notes(study, scale, n_done=len(done), n_failed=len(failed), n_stale=len(stale),
                         n_old=len(stored) - len(runs), keys=keys)
    return cli.plain(dict(study=study, scale=scale, program="verify.images.train", runs_done=len(done),
                          runs_failed=len(failed), runs=[{k: r[k] for k in RUN_COLUMNS} for r in done],
                          layers={r["key"]: {k: v["test_f1"] for k, v in r["layers"].items()} for r in done},
                          groups=groups, effects=effects, correlation=fit, partial=partial, notes=notes,
                          code_fingerprint=fingerprint, runs_other_code=len(stale), runs_unknown_code=0,
                          columns=list(RUN_COLUMNS)))


def _f(v, spec=".3f") -> str:
    return "—" if v is None else format(v, spec)


def _fit_line(name: str, fit: dict) -> str:
    if fit["status"] != "fitted":
        return f"- {name}: {fit['status']} (n = {fit['n']})"
    p, s = fit["pearson"], fit["spearman"]
    pct = round(100 * fit["level"])
    return (f"- {name} (n = {fit['n']} runs): Pearson r = {p['r']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}] "
            f"(p = {p['p']:.2g}), Spearman ρ = {s['r']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}] "
            f"(p = {s['p']:.2g}); "
            f"{pct}% percentile bootstrap intervals, {fit['bootstrap']:,} resamples of runs")


def _partial_line(fit: dict) -> str:
    head = (f"- given coverage (success regressed on coverage, as a factor, and decodability; n = {fit['n']} "
            f"runs in {fit['clusters']} clusters of coverage × split seed)")
    cm = fit["cluster_means"]
    pct = round(100 * fit["level"])
    if cm.get("slope") is None:
        decided = f"verdict: {cm['verdict']} ({cm['status']})"
    else:
        decided = (f"the primary analysis (declared: the cluster-mean regression), from the {cm['clusters']} "
                   f"cluster means (t, {cm['df']} df): coefficient {cm['slope']:.3f} [{cm['lo']:.3f}, "
                   f"{cm['hi']:.3f}], {cm['verdict']}")
        if cm.get("leave_one_out"):
            decided += _sensitivity_text(cm)
    if fit.get("r") is None:
        return f"{head}: {fit['status']}; {decided}"
    text = f"{head}: partial r = {fit['r']:.3f}, decodability's coefficient {fit['slope']:.3f}"
    if fit["status"] != "fitted":
        return f"{text}; {fit['status']}; {decided}"
    return (f"{text}; {pct}% cluster-bootstrap intervals [{fit['lo']:.3f}, {fit['hi']:.3f}] and "
            f"[{fit['slope_lo']:.3f}, {fit['slope_hi']:.3f}] ({fit['bootstrap']:,} resamples of clusters; "
            f"descriptive: liberal at this many clusters); {decided}")


def _sensitivity_text(cm: dict) -> str:
    """The primary fit's leave-one-cluster-out line: fragile (one cluster flips it) or robust, and
    the weakest refit."""
    refits = [r for r in cm["leave_one_out"] if r["p"] is not None]
    head = (f" (**fragile**: leaving out one cluster flips it in {cm['flips']} of {cm['clusters']} refits"
            if cm["fragile"] else f" (robust: no one of the {cm['clusters']} clusters left out flips it")
    if not refits:
        return head + ")"
    worst = max(refits, key=lambda r: r["p"])
    left = worst["left_out"]
    label = "/".join(map(str, left)) if isinstance(left, list | tuple) else left
    return head + f"; the weakest, without cluster {label}: {worst['slope']:.3f}, p = {worst['p']:.2g})"


def format_compact(table: dict) -> str:
    """The study's README block (verify.studies.summary): the decodability fits and each
    ladder's verdict (format_markdown's report, less its per-setting table and runs)."""
    lines = [_fit_line("across runs (coverage moves both: this is not evidence beyond coverage)",
                       table["correlation"]), _partial_line(table["partial"])]
    for e in table["effects"]:
        v = e["verdict"]
        diff = "—" if v["difference"] is None else f"{v['difference']:+.3f}"
        paper = f"; paper: {v['paper']}, agrees: {v['agrees']}" if v["paper"] else ""
        lines.append(f"- {v['name']}: {diff} ({e['effect']}; {e['test']}){paper}")
    return "\n".join(lines + kept_notes(table["notes"]))


def format_markdown(table: dict, runs: bool = True) -> str:
    """The report as markdown; `runs=False` (the README's block) leaves out the table of runs."""
    lines = [f"# {table['study']} ({table['scale']}): {table['runs_done']} runs done, "
             f"{table['runs_failed']} failed", "",
             "Decodability: the probe's held-out weighted F1 at the denoiser's best layer; success: held-out "
             "prompts' images the exact judge finds fully right.", "",
             "## Decodability against held-out success", "",
             _fit_line("across runs (coverage moves both: this is not evidence beyond coverage)",
                       table["correlation"]),
             _partial_line(table["partial"]), "",
             "## Per setting (mean ± sd over seeds)", "",
             "| training combinations | model | parameters | runs | training success | held-out success "
             "| decodability | text encoder F1 |", "|---|---|---|---|---|---|---|---|"]
    for g in table["groups"]:
        def ms(m, g=g):
            return f"{_f(g[m + '_mean'])} ± {_f(g[m + '_sd'])}"
        setting = g["setting"]
        lines.append(f"| {setting['train_combinations']} | {g['model']} | {setting['parameters']:,} | "
                     f"{g['runs']} | {ms('train_success')} | {ms('test_success')} | {ms('decodability')} | "
                     f"{ms('text_decodability')} |")
    lines += ["", "## Effects on held-out success (the paper: more data and larger models help)", ""]
    if not table["effects"]:
        lines.append("- no ladder: the grid varies neither coverage nor model size at a fixed other setting")
    for e in table["effects"]:
        v = e["verdict"]
        diff = "—" if v["difference"] is None else f"{v['difference']:+.3f}"
        paper = f"; paper: {v['paper']}; agrees: {v['agrees']}" if v["paper"] else ""
        lines.append(f"- {v['name']}: {diff} ({e['effect']}; {e['test']}){paper}")
    lines += ["", "## Runs", "", "| " + " | ".join(RUN_COLUMNS[1:]) + " |",
              "|" + "---|" * (len(RUN_COLUMNS) - 1)] if runs else []
    for r in table["runs"] if runs else []:
        lines.append("| " + " | ".join(key_cell(r[c]) if not isinstance(r[c], float) else f"{r[c]:.3f}"
                                       for c in RUN_COLUMNS[1:]) + " |")
    if table["notes"]:
        lines += [""] + [f"- {n}" for n in table["notes"]]
    return "\n".join(lines)


def write_table(table: dict, out: Path) -> None:
    cli.write_text_atomic(out / "effects.md", format_markdown(table) + "\n")
    cli.write_text_atomic(out / "effects.csv", csv_text(list(RUN_COLUMNS), table["runs"]))


def export_csv(out: Path, path: Path | str) -> int:
    """Every run, one line per (run, layer): its configuration, status, error, success and the
    layer's held-out decodability."""
    @reads_report
    def lines_of(r: dict) -> list[dict]:
        if r["status"] != "done":
            return [{}]
        rep = r["report"]
        success = rep["success"]
        return [dict(train_success=success["train"]["rate"], test_success=success["test"]["rate"],
                     layer=layer, test_f1=d["test_f1"], test_exact=d["test_exact"], train_f1=d["train_f1"])
                for layer, d in rep["decodability"].items()]

    return export_runs(out, path, lines_of)
