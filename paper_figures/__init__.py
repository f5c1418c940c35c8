"""The theory figures, one module per figure; `python -m paper_figures` regenerates them.

fig1_units_vs_eps       hidden units vs 1/ε (slope 1/2), counted on built networks
fig2_units_vs_M         hidden units vs M: theorem, lean, memorization, number of tasks
fig3_error_vs_eps       measured sup error and certificate vs ε, under y = ε
fig4_where_error_lives  f − g over a slice of x for the worst task; per-task error / certificate
"""
