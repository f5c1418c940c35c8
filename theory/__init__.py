"""The theorem's bounds as formulas (`bounds`) and their symbolic derivations (`symbolic`).

    bounds      N(ε), the certificate, the counts and constants, the square interpolant, the
                bounded N search, and what every construction shares: γ_n, the top-K sum over
                Z_K, the ε check
    symbolic    sympy derivations of each constant, which the tests compare with `bounds`
    exact, deep, optimal, multilayer
                the formulas of the constructions of the same name
    instance    the shallow error's phase form and the instance bounds built on it
    lipschitz   interval and Lipschitz bounds for the exact sup's z-cells (verify.exact_sup)
"""
