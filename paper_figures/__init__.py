"""The theory figures, one module per figure; `python -m paper_figures` regenerates them.

fig1_units_vs_eps           hidden units vs 1/ε (slope 1/2), counted on built networks
fig2_units_vs_M             hidden units vs M: theorem, lean, memorization, number of tasks
fig3_error_vs_eps           measured sup error and certificate vs ε, under y = ε
fig4_where_error_lives      f − g over a slice of x for the worst task; per-task error / certificate
fig5_sgd_error_vs_size      SGD-trained MLPs vs the construction at equal size: sup error and RMSE
                            on training and held-out tasks (slow: trains networks)
fig6_sgd_r2_vs_tasks        held-out compositional R² of SGD-trained MLPs vs the number of training
                            tasks (slow)
fig7_probe_vs_r2            linear-probe R² for z vs held-out R², every SGD run of 5 and 6 (slow)
fig8_constructions_vs_eps   hidden units and depth vs ε for every construction (shallow, exact, deep,
                            optimal), with the memorization baseline
fig9_studies                the paper's sweeps from the study stores (verify.study): held-out R²
                            vs training tasks, vs width per encoding, per support kind, MLP vs
                            transformer; SGD ÷ construction sup error at equal units; convergence
fig10_preference            the preference grid's sweeps from its study stores: held-out acc_all vs
                            training tasks, vs width per encoding, per support kind, MLP vs
                            transformer; convergence; held-out per-step acc against acc_all
fig11_width_vs_M            the width SGD needs, w*(M), against the construction's units and the
                            memoriser's (the width-vs-M study: this project's, issue 22)
fig12_images                held-out success of a small text-to-image denoiser against its held-out
                            decodability, one point per run, with coverage and model-size ladders and
                            held-out samples (the image-composition study: issue 25)

This package imports nothing heavy: `python -m paper_figures --help` answers before torch
or matplotlib is loaded.
"""

from pathlib import Path

# Relative to the working folder, never to this package: in the checkout's root they are the
# committed figures (and the git-ignored previews, so a smoke run never replaces those); from
# an installed wheel they land under the user's folder, not in site-packages.
DEFAULT_OUT = Path("paper_figures") / "output"
PREVIEW_OUT = Path("paper_figures") / "preview"
