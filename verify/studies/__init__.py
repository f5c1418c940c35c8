"""The paper's sweeps as studies: grid files (*.yaml), the driver that runs them on Ray
or serially (python -m verify.study), the SQLite store of their results, and the effects
table read from it. Committed cpu-scale stores are under results/."""
