"""The paper's text-to-image experiment on diffusers pipelines (issue 25, part 2).

- `pipeline`: load a text-to-image pipeline from local files; generate seeded images.
- `activations`: pooled activations of the denoiser's blocks and the text encoders, filed under
  the denoising step that computed them, conditional CFG rows by default.
- `probes`: the per-layer linear decodability probe, fitted on training prompts, scored on
  held-out ones.
- `judges`: exact (the rendered family), clip and llm judges behind one interface.
- `results`: the results file with its provenance.
- `tiny`: tiny random checkpoints built from configs, for tests and smoke runs.
- `denoiser`: the controlled experiment's pixel-space text-to-image pipeline (a UNet2DConditionModel
  with a CLIP text encoder and a word-level tokenizer), built at a named size and trained here.
- `train`: `python -m verify.images.train`, one controlled run: train on a split's combinations,
  save, then analyse the saved folder as a real model (probe per layer, exact judge).
- `analyse`: the analysis of any text-to-image pipeline on a prompt family (an anchor setup or the
  rendered family): split with coverage, seeded generation with recorded activations, the probe
  per layer, the judge, the results file; and the summary of results files. `train` analyses
  through it.
- `__main__`: `python -m verify.images train | analyse | report`, the experiment's command line.

Nothing here imports diffusers or transformers at import time; they are the optional extra
`images` (pip install -e '.[images]').
"""
