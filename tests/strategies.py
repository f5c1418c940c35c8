"""Hypothesis strategies for small hyperteachers and their constructions."""

from hypothesis import strategies as st

from constructions import ENCODINGS, WEIGHTS, HyperteacherConfig


@st.composite
def small_configs(draw, max_io=6, max_M=10):
    M = draw(st.integers(1, max_M))
    return HyperteacherConfig(
        I=draw(st.integers(1, max_io)), H=draw(st.integers(1, max_io)), O=draw(st.integers(1, max_io)),
        M=M, K=draw(st.integers(1, min(3, M))), weights=draw(st.sampled_from(WEIGHTS)),
        encoding=draw(st.sampled_from(ENCODINGS)), seed=draw(st.integers(0, 2**16)))


# A light measurement for small instances (verify.measure's defaults take ~10× longer).
FAST = dict(points_per_task=8, refine_tasks=8, refine_starts=8, refine_steps=40)

log_eps = st.floats(-4.0, 0.0)  # ε = 10**log_eps ∈ [1e-4, 1]
