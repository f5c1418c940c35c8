"""python -m verify.kernel: the kernel limit of an MLP student beside SGD (verify.learning.kernel_vs_sgd).

The methods: `ntk`, kernel regression with the student's NTK, Θ(x*, X) Θ(X, X)⁻¹ Y, the mean
predictor of gradient flow at infinite width (verify/learning/kernel_limit.py; the kernels,
closed form, in verify/learning/kernels.py; --parametrization standard is the students' own,
Θ/width's limit, ntk Jacot's); `nngp`, the NNGP posterior mean; `linearised`, the student's
first-order Taylor expansion at init, trained by the student's optimiser and steps
(verify/learning/linearised.py); `trained`, the student itself (the same init, data stream,
loop and scoring as `verify.sgd --shapes custom`: a test holds the two to the same R²), with
its NTK's movement ‖Θ_T − Θ_0‖/‖Θ_0‖ on --probe-rows held-out rows. The networks train online
(fresh tasks every step) unless --data finite --tasks T: then in epochs over exactly the rows
the kernel limit with the same --tasks, --samples-per-task and --seed fits
(verify/learning/finite_rows.py), so that "trained − kernel" compares learning rules at equal
data. A setting another method
reads (--width for ntk), a depth that is not a positive integer, and more rows than 80% of the
available memory holds (estimated before any work) each get one line and exit 2.

On a small task (M = 6, K = 2, seed 0; the README shows both runs) the trained 4×128 network
beat the NTK limit held out (R² 0.79 against 0.69, one seed), and its NTK moved by ten times
its own size: AdamW in standard parametrization moves every weight by about lr per step
whatever the width, far from the lazy regime. The kernel-vs-sgd study
(verify/studies/kernel-vs-sgd.yaml, report verify/studies/kernel_report.py, figure 13) asks it
with intervals: the four methods on M = 16, K = 3, three encodings, widths 32–256 at cpu scale,
seeds 1–3 paired.
"""

from verify import cli
from verify.learning.kernel_vs_sgd import build_parser, main, parse_args, run, work  # noqa: F401 (its API, re-exported)

if __name__ == "__main__":
    cli.exit(main())
