"""The paper's sweeps as studies: grid files (*.yaml), the driver that runs them on Ray
or serially (python -m verify.study), the SQLite store of their results, and the effects
table read from it. Committed cpu-scale stores are under results/.

One job a module: commands (python -m verify.study: run_study and the command line), grids
(study files and their runs), interfaces (what a program, a report and an analysis must
provide), provenance (the code fingerprint), behaviour (whether the installed code replays a
stored run's behaviour record), execution (one run or pack, in whatever process runs it),
engines (serial and Ray), ray_cluster (joining a cluster: its address, token and loopback
checks), folder_lock (one `run` a study folder at a time), store (the SQLite results store),
verdicts (every study's tests: paired or Welch t, TOST, Holm, power), effects (the effects
table), width (the width-vs-M analysis), kernel_report (the kernel-vs-sgd report), budget
(what a scale costs), summary (the README's generated result blocks), status (what a store
holds of a grid: runs done, failed, made by other code).

Where stores live: `run` writes under the current working folder (--out, default
verify/studies/results/STUDY/SCALE/): inside the checkout that is the committed stores' folder,
anywhere else a new folder there, never the installed package. `report`, `export`, `list` and
the figures read the working folder's store when it has one, and otherwise the committed
cpu-scale store shipped with the package (read-only: `report` writes its effects.md/effects.csv
into the working folder's study folder). Each run checkpoints every --checkpoint-minutes (10)
and at its end into runs/KEY/ beside the store, so a restarted run resumes where it stopped;
--retry-failed reruns failed runs, --rerun-stale the runs made by other or unknown code.
One `run` at a time holds a study folder (its study.lock); a second refuses, naming the first,
or waits with --wait. A store that is not one (empty, truncated, foreign) is refused in one line
naming it, and never altered.
"""
