"""The theorem's checks: build a construction for a hyperteacher and check its claims.

    bound         python -m verify.bound: one (M, ε) point, its certificate and measured sup error
    check         verify_point, the library behind verify.bound and verify.sweep; the size refusals
    measure       the measured sup error (a lower estimate, by search)
    instance      the instance bound: a rigorous bracket on the exact sup error (--bound instance)
    exact_sup     python -m verify.exact_sup: the exact sup error by MILP, on small instances
    exact_checks  the exact construction's checks over its level tasks and off the task set
    sweep         python -m verify.sweep: the two scaling claims, measured over a grid
    report        verify.bound's text report
    presets       every preset: the measurement budgets, and the training choices verify.sgd offers

The entry points keep their names (python -m verify.bound, verify.exact_sup, verify.sweep), and
verify.bound, verify.measure, … still import: each is an alias of the module here. Nothing here
imports the learning side, the studies or the images (tests/test_layering.py).
"""
