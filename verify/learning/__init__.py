"""The learning side: students, their training, metrics and task families.

    families   the task families a student learns, one module each behind one interface and
               one registry (hyperteacher, preference grid): flags, batches, loss, named
               metrics, the convergence rule, a reference construction
    students   the paper's students (MLP, transformer, hypernetwork) as torch modules
    train      AdamW training of any student on any family, with checkpoints
    metrics    the hyperteacher's R², RMSE, sup error and the paper's probe
    sgd_program  python -m verify.sgd: train, score and report

Imports flow theory ← constructions ← verify (theorem checks) ← verify.learning ←
verify.studies; nothing here imports verify.studies.
"""
