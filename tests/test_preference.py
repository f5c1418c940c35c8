"""The compositional preference grid (constructions/tasks/preference.py) against plain-Python models
of the official environment: the layout, value iteration (brute force over action sequences and a
loop over states), the greedy rollout with its tie rule and frozen end, the observation, and the
official JAX code's own outputs pinned in tests/data/preference_official.json.

The demonstrator is held to brute force over every action sequence (h ≤ 4 on 180 state-action
pairs, h = 8 on two), to a plain loop, and to outputs of the official JAX code run side by side
(38 start states: actions, masks and observations identical). Of 11 deliberate mutations 10
were caught; the survivor, no freeze after NOTHING, is unobservable, since NOTHING leaves the
state as it is.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from constructions.tasks.preference import (
    NOTHING,
    PreferenceConfig,
    PreferenceGrid,
    Starts,
    rms_normalise,
)

GAMMA = 0.9
# The official layout, written out again so that the tests do not read the module's copy.
ROWS = ["wwwwwww", "w  w  w", "w  w  w", "ww   ww", "w  w  w", "w  w  w", "wwwwwww"]
FREE = [(r, c) for r in range(7) for c in range(7) if ROWS[r][c] == " "]
MOVE = [(0, 0), (-1, 0), (0, 1), (1, 0), (0, -1)]  # NOTHING, UP, RIGHT, DOWN, LEFT
OFFICIAL = Path(__file__).parent / "data" / "preference_official.json"


# --- plain-Python model of the official environment --------------------------------------------

def py_step(pos, avail, action, objects):
    """One step: a move into a wall stays put; landing on an available object collects it.

    objects: [(pos, reward)]. Returns (pos', avail', reward)."""
    r, c = pos[0] + MOVE[action][0], pos[1] + MOVE[action][1]
    nxt = pos if ROWS[r][c] == "w" else (r, c)
    reward, avail = 0.0, list(avail)
    for i, (p, value) in enumerate(objects):
        if avail[i] and p == nxt:
            reward += value
            avail[i] = False
    return nxt, tuple(avail), reward


def py_objects(basis, z, cells, features):
    """[(pos, Σ_m basis[m, f]·z[m])] of one task, from plain lists."""
    value = [sum(basis[m][f] * z[m] for m in range(len(z))) for f in features]
    return [(FREE[c], v) for c, v in zip(cells, value, strict=True)]


def py_states(n_objects=4):
    """The states in the official index order: cell·2^n + mask, bit i = object i available."""
    return [(FREE[c], tuple(bool(m >> i & 1) for i in range(n_objects)))
            for c in range(len(FREE)) for m in range(2**n_objects)]


def py_index(pos, avail):
    return FREE.index(pos) * 2 ** len(avail) + sum(1 << i for i, a in enumerate(avail) if a)


def py_value_iteration(objects, backups, gamma=GAMMA):
    """Q_h by loops over states and actions: Q_{h+1}(s, a) = r + γ·max_a' Q_h(s', a')."""
    return py_value_iterations(objects, backups, gamma)[-1]


def py_value_iterations(objects, backups, gamma=GAMMA):
    """[Q_0, Q_1, ..., Q_backups]."""
    states = py_states(len(objects))
    Q = [[0.0] * 5 for _ in states]
    tables = [Q]
    for _ in range(backups):
        new = []
        for pos, avail in states:
            row = []
            for a in range(5):
                nxt, av, r = py_step(pos, avail, a, objects)
                row.append(r + gamma * max(Q[py_index(nxt, av)]))
            new.append(row)
        Q = new
        tables.append(Q)
    return tables


def best_return(pos, avail, action, h, objects, gamma=GAMMA):
    """The best discounted return of h steps that start with `action`: a plain recursion over all
    5^(h−1) continuations (no table, no sharing of sub-results)."""
    nxt, av, r = py_step(pos, avail, action, objects)
    if h == 1:
        return r
    return r + gamma * max(best_return(nxt, av, a, h - 1, objects, gamma) for a in range(5))


def first_max(q):
    return q.index(max(q))


def py_rollout(start_pos, objects, Q, T=8, pick=first_max, tables=None):
    """The official greedy episode under one Q table (lists): argmax with ties to the lowest action
    (`pick`), NOTHING ends the episode, then the state is frozen. `tables`, one Q per step, replaces
    the one Q (for mutants). Returns actions, positions, avails, mask."""
    pos, avail, done = start_pos, (True,) * len(objects), False
    actions, positions, avails, mask = [], [], [], []
    for t in range(T):
        positions.append(pos)
        avails.append(avail)
        mask.append(not done)
        a = pick((tables[t] if tables else Q)[py_index(pos, avail)])
        actions.append(a)
        if not done:
            pos, avail, _ = py_step(pos, avail, a, objects)
            done = a == NOTHING
    return actions, positions, avails, mask


def episode_return(start_pos, objects, actions, mask, gamma=GAMMA):
    pos, avail, total = start_pos, (True,) * len(objects), 0.0
    for t, (a, live) in enumerate(zip(actions, mask, strict=True)):
        if live:
            pos, avail, r = py_step(pos, avail, a, objects)
            total += gamma**t * r
    return total


def random_case(grid, n, seed):
    g = torch.Generator().manual_seed(seed)
    starts = grid.sample_starts(n, g)
    z = torch.randn(n, grid.M, generator=g, dtype=torch.float64)
    return starts, z


def task_objects(grid, starts, z, b):
    return py_objects(grid.basis.tolist(), z[b].tolist(), starts.object_cells[b].tolist(),
                      starts.features[b].tolist())


def one_task(grid, cells, features, agent, z):
    starts = Starts(torch.tensor([cells]), torch.tensor([features]), torch.tensor([agent]))
    return starts, torch.tensor([z], dtype=torch.float64)


# --- layout -------------------------------------------------------------------------------------

def test_layout_has_19_free_cells_304_states_and_the_wall_channel():
    grid = PreferenceGrid(PreferenceConfig())
    assert grid.free_cells.tolist() == [list(p) for p in FREE]
    assert FREE[:4] == [(1, 1), (1, 2), (1, 4), (1, 5)] and FREE[8:11] == [(3, 2), (3, 3), (3, 4)]
    assert (grid.n_cells, grid.n_states, grid.n_actions, grid.T) == (19, 304, 5, 8)
    assert grid.obs_shape == (7, 7, 34) and grid.obs_dim == 7 * 7 * 34
    walls = [[ch == "w" for ch in row] for row in ROWS]
    assert grid.walls.tolist() == walls and int(grid.walls.sum()) == 30
    nothing_left = torch.zeros(4, dtype=torch.bool)
    feature_0 = torch.zeros(4, dtype=torch.long)
    obs = grid.observe(torch.tensor([0, 1, 2, 3]), feature_0, nothing_left, torch.tensor(9))
    assert obs[..., -1].bool().tolist() == walls


def test_moves_stay_put_at_walls_and_step_by_one_cell_otherwise():
    grid = PreferenceGrid(PreferenceConfig())
    for c, pos in enumerate(FREE):
        for a in range(5):
            nxt, _, _ = py_step(pos, (), a, [])
            assert FREE[int(grid.cell_next[c, a])] == nxt
    # (1,1) is a corner: UP and LEFT stay; the corridor cell (3,3) has walls above and below.
    assert grid.cell_next[0].tolist() == [0, 0, 1, 4, 0]
    assert grid.cell_next[9].tolist() == [9, 9, 10, 9, 8]


# --- value iteration ----------------------------------------------------------------------------

def test_transition_tables_are_the_step_of_the_environment():
    grid = PreferenceGrid(PreferenceConfig(M=3, F=4, K=2, seed=1))
    starts, z = random_case(grid, 3, seed=2)
    next_state, reward = grid.transitions(starts, z)
    assert next_state.shape == reward.shape == (3, 304, 5) and reward.dtype == torch.float64
    for b in range(3):
        objects = task_objects(grid, starts, z, b)
        for s, (pos, avail) in enumerate(py_states()):
            for a in range(5):
                nxt, av, r = py_step(pos, avail, a, objects)
                assert int(next_state[b, s, a]) == py_index(nxt, av)
                assert math.isclose(float(reward[b, s, a]), r, abs_tol=1e-12)


def test_value_iteration_is_the_best_return_over_all_action_sequences():
    grid = PreferenceGrid(PreferenceConfig(M=3, F=4, K=2, seed=3))
    starts, z = random_case(grid, 3, seed=4)
    states = py_states()
    rng = np.random.default_rng(0)
    checked = []  # (h, b, s, a, brute force)
    for h in range(1, 5):
        Q = grid.value_iteration(starts, z, backups=h)
        for b in range(3):
            objects = task_objects(grid, starts, z, b)
            for s, a in zip(rng.integers(304, size=15), rng.integers(5, size=15), strict=True):
                brute = best_return(*states[s], int(a), h, objects)
                assert math.isclose(float(Q[b, s, a]), brute, rel_tol=1e-12, abs_tol=1e-12), (h, b, s, a)
                checked.append((h, b, int(s), int(a), brute))
    Q8 = grid.value_iteration(starts, z)  # the default: timelimit = 8 backups
    objects = task_objects(grid, starts, z, 0)
    start = py_index(FREE[int(starts.agent_cell[0])], (True,) * 4)
    for a in (NOTHING, int(Q8[0, start].argmax())):
        assert math.isclose(float(Q8[0, start, a]), best_return(*states[start], a, 8, objects), rel_tol=1e-12)
    assert len({c[4] for c in checked if c[0] > 1}) > 10  # the cases are not all the same value

    # Mutant: a discount of 0.8 is caught by the same comparison.
    wrong = PreferenceGrid(PreferenceConfig(M=3, F=4, K=2, seed=3, discount=0.8))
    caught = 0
    for h, b, s, a, brute in checked:
        if h > 1:
            caught += not math.isclose(float(wrong.value_iteration(starts, z, backups=h)[b, s, a]), brute,
                                       rel_tol=1e-12, abs_tol=1e-12)
    assert caught > 5


def test_value_iteration_equals_a_loop_over_states_and_the_table_backup():
    grid = PreferenceGrid(PreferenceConfig(M=4, F=6, K=2, seed=5))
    starts, z = random_case(grid, 3, seed=6)
    Q = grid.value_iteration(starts, z)
    assert Q.shape == (3, 304, 5) and Q.dtype == torch.float64
    for b in range(3):
        expected = py_value_iteration(task_objects(grid, starts, z, b), backups=8)
        expected = torch.tensor(expected, dtype=torch.float64)
        torch.testing.assert_close(Q[b], expected, rtol=1e-12, atol=1e-12)
    # The factorised backup gives the very floats of the backup on the transition tables.
    next_state, reward = grid.transitions(starts, z)
    table = torch.zeros_like(reward)
    for _ in range(8):
        next_value = torch.gather(table.amax(-1), 1, next_state.reshape(3, -1)).reshape(reward.shape)
        table = reward + GAMMA * next_value
    assert torch.equal(Q, table)
    assert torch.equal(grid.value_iteration(starts, z, backups=0), torch.zeros_like(Q))
    assert not torch.allclose(grid.value_iteration(starts, z, backups=7), Q)  # 8 backups, not 7


def test_z_enters_linearly_through_the_basis():
    grid = PreferenceGrid(PreferenceConfig(M=5, F=7, K=2, seed=7))
    starts, z = random_case(grid, 4, seed=8)
    expected = torch.stack([(grid.basis.T @ z[b])[starts.features[b]] for b in range(4)])
    torch.testing.assert_close(grid.object_rewards(starts.features, z), expected, rtol=1e-14, atol=1e-14)


# --- rollout ------------------------------------------------------------------------------------

def test_rollout_follows_the_argmax_of_the_one_final_Q():
    grid = PreferenceGrid(PreferenceConfig(M=3, F=4, K=2, seed=9))
    starts, z = random_case(grid, 12, seed=10)
    Q = grid.value_iteration(starts, z)
    rollout = grid.rollout(starts, Q)
    for b in range(12):
        objects = task_objects(grid, starts, z, b)
        actions, positions, avails, mask = py_rollout(FREE[int(starts.agent_cell[b])], objects, Q[b].tolist())
        assert rollout.actions[b].tolist() == actions
        assert [FREE[c] for c in rollout.agent_cell[b].tolist()] == positions
        assert [tuple(a) for a in rollout.available[b].tolist()] == avails
        assert rollout.mask[b].tolist() == mask


def test_a_task_worth_nothing_ties_everywhere_and_stops_at_once():
    grid = PreferenceGrid(PreferenceConfig())
    starts, _ = random_case(grid, 5, seed=11)
    z = torch.zeros(5, grid.M, dtype=torch.float64)
    demo = grid.demonstrate(starts, z)
    assert (grid.value_iteration(starts, z) == 0).all()
    assert (demo.actions == NOTHING).all()
    assert demo.mask.tolist() == [[True] + [False] * 7] * 5
    assert (demo.observations == demo.observations[:, :1]).all()  # frozen


def test_ties_between_symmetric_objects_go_to_the_lowest_action():
    # A mirror-symmetric world: one module, feature 0 worth 1 at (3,2) and (3,4) beside the agent at
    # (3,3), feature 1 worth −1 at (1,1) and (1,5). RIGHT (2) and LEFT (4) tie exactly.
    grid = PreferenceGrid(PreferenceConfig(M=1, F=2, K=1))
    grid.basis = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    starts, z = one_task(grid, [8, 10, 0, 3], [0, 0, 1, 1], 9, [1.0])
    Q = grid.value_iteration(starts, z)
    q = Q[0, grid.state_index(starts.agent_cell, torch.ones(1, 4, dtype=torch.bool))][0]
    assert q[2] == q[4] and q[2] == q.max() and q[1] < q[2]
    demo = grid.demonstrate(starts, z)
    # RIGHT collects (3,4), LEFT LEFT collects (3,2); then only losses are left, and NOTHING (0)
    # ties with every harmless move.
    assert demo.actions.tolist() == [[2, 4, 4, 0, 0, 0, 0, 0]]
    assert demo.mask.tolist() == [[True] * 4 + [False] * 4]
    # Mutant: ties to the highest action would go LEFT first.
    assert int(4 - q.flip(0).argmax()) == 4


def test_the_greedy_episode_need_not_attain_the_best_8_step_return():
    # At every step the official reads the 8-backup Q, though fewer steps are left: here it turns
    # UP at (3,2) for a plan whose second half lies beyond the episode.
    grid = PreferenceGrid(PreferenceConfig(M=1, F=4, K=1))
    grid.basis = torch.tensor([[1.0, -1.0, 3.0, 0.5]], dtype=torch.float64)
    starts, z = one_task(grid, [1, 5, 12, 15], [2, 3, 2, 0], 2, [1.0])
    Q = grid.value_iteration(starts, z)
    demo = grid.demonstrate(starts, z)
    assert demo.actions.tolist() == [[3, 3, 4, 4, 1, 1, 3, 3]]
    objects = task_objects(grid, starts, z, 0)
    start = FREE[2]
    got = episode_return(start, objects, demo.actions[0].tolist(), demo.mask[0].tolist())
    best = max(best_return(start, (True,) * 4, a, 8, objects) for a in range(5))
    assert math.isclose(best, float(Q[0, py_index(start, (True,) * 4)].max()), rel_tol=1e-12)
    assert got < best - 1  # 2.10 against 3.67


def test_after_nothing_the_state_is_frozen_and_the_rest_masked():
    grid = PreferenceGrid(PreferenceConfig(M=3, F=4, K=2, seed=12))
    starts, z = random_case(grid, 64, seed=13)
    rollout = grid.rollout(starts, grid.value_iteration(starts, z))
    demo = grid.demonstrate(starts, z)
    stopped = 0
    for b in range(64):
        acts, mask = rollout.actions[b].tolist(), rollout.mask[b].tolist()
        if NOTHING not in acts:
            assert all(mask)
            continue
        t = acts.index(NOTHING)
        stopped += 0 < t < 7
        # The NOTHING itself is a target (mask[t] True); everything after it is masked.
        assert mask == [True] * (t + 1) + [False] * (7 - t)
        assert (rollout.agent_cell[b, t:] == rollout.agent_cell[b, t]).all()
        assert (rollout.available[b, t:] == rollout.available[b, t]).all()
        assert (demo.observations[b, t:] == demo.observations[b, t]).all()
        assert acts[t:] == [NOTHING] * (8 - t)  # argmax at the same frozen state
    assert stopped >= 3  # the sample holds episodes that stop midway


# --- observation --------------------------------------------------------------------------------

def test_observation_value_by_value():
    F = 5
    grid = PreferenceGrid(PreferenceConfig(M=2, F=F, K=1))
    cells, features = torch.tensor([0, 10, 18, 5]), torch.tensor([3, 0, F - 1, 3])  # (1,1) (3,4) (5,5) (2,2)
    available = torch.tensor([True, False, True, True])
    obs = grid.observe(cells, features, available, torch.tensor(9))  # agent at (3,3)
    assert obs.shape == (7, 7, F + 2) and obs.dtype == torch.float32
    expected = np.zeros((7, 7, F + 2), dtype=np.float32)
    for r in range(7):
        for c in range(7):
            expected[r, c, F + 1] = ROWS[r][c] == "w"
    expected[1, 1, 3] = expected[5, 5, F - 1] = expected[2, 2, 3] = 1  # object (3,4) is collected
    expected[3, 3, F] = 1
    np.testing.assert_array_equal(obs.numpy(), expected)
    assert obs[3, 4].sum() == 0 and obs[1, 1, 3] == 1 and obs[0, 0, F + 1] == 1 and obs[1, 1, F + 1] == 0
    # Flattened row-major: (row, col, channel) is entry (7·row + col)·(F+2) + channel.
    flat = obs.reshape(-1)
    assert flat[(7 * 3 + 3) * (F + 2) + F] == 1 and int(flat.sum()) == 30 + 1 + 3
    # RMS normalisation: x·rsqrt(mean(x²) + 1e-6), here 34 ones among 7·7·(F+2).
    norm = rms_normalise(flat.double())
    scale = 1 / math.sqrt(34 / flat.numel() + 1e-6)
    torch.testing.assert_close(norm, flat.double() * scale, rtol=1e-15, atol=0)
    without_eps = flat.double() * math.sqrt(flat.numel() / 34)
    assert not torch.allclose(norm, without_eps, rtol=1e-9, atol=0)  # the 1e-6 is in
    # Batched: inputs broadcast over leading axes.
    flipped = torch.stack([available, ~available])
    many = grid.observe(cells[None], features[None], flipped, torch.tensor([9, 4]))
    assert many.shape == (2, 7, 7, F + 2) and torch.equal(many[0], obs)
    assert many[1, 3, 4, 0] == 1 and many[1, 2, 1, F] == 1 and many[1, 1, 1, 3] == 0  # agent at (2,1)


def test_demonstrate_is_the_rollout_observed_and_normalised():
    grid = PreferenceGrid(PreferenceConfig(M=4, F=6, K=2, seed=14))
    starts, z = random_case(grid, 20, seed=15)
    rollout = grid.rollout(starts, grid.value_iteration(starts, z))
    for dtype in (torch.float32, torch.float64):
        demo = grid.demonstrate(starts, z, dtype=dtype)
        assert demo.actions.shape == (20, 8) and demo.actions.dtype == torch.int64
        assert demo.mask.shape == (20, 8) and demo.mask.dtype == torch.bool
        assert demo.observations.shape == (20, 8, grid.obs_dim) and demo.observations.dtype == dtype
        assert torch.equal(demo.actions, rollout.actions) and torch.equal(demo.mask, rollout.mask)
        raw = grid.observe(starts.object_cells[:, None], starts.features[:, None], rollout.available,
                           rollout.agent_cell, dtype=dtype)
        expected = rms_normalise(raw.reshape(20, 8, -1))
        rtol = 1e-6 if dtype == torch.float32 else 1e-14
        torch.testing.assert_close(demo.observations, expected, rtol=rtol, atol=0)


# --- sampling, config, device -------------------------------------------------------------------

def test_start_states_are_uniform_on_distinct_cells():
    grid = PreferenceGrid(PreferenceConfig(F=8))
    n = 20000
    starts = grid.sample_starts(n, torch.Generator().manual_seed(16))
    assert starts.object_cells.shape == starts.features.shape == (n, 4) and starts.agent_cell.shape == (n,)
    assert starts.object_cells.dtype == starts.features.dtype == starts.agent_cell.dtype == torch.int64
    cells = torch.cat([starts.object_cells, starts.agent_cell[:, None]], 1)
    assert (cells.sort(1).values.diff(dim=1) > 0).all() and cells.min() >= 0 and cells.max() < 19
    marginals = ((starts.agent_cell, 19), (starts.object_cells[:, 2], 19), (starts.features.reshape(-1), 8))
    for values, k in marginals:
        counts = torch.bincount(values, minlength=k).double()
        expected = len(values) / k
        assert ((counts - expected).abs() < 5 * math.sqrt(expected)).all()
    again = grid.sample_starts(n, torch.Generator().manual_seed(16))
    assert torch.equal(again.object_cells, starts.object_cells)
    assert torch.equal(again.features, starts.features)


def test_basis_is_a_seeded_float64_standard_gaussian():
    a, b = PreferenceGrid(PreferenceConfig(seed=1)), PreferenceGrid(PreferenceConfig(seed=1))
    assert a.basis.shape == (16, 32) and a.basis.dtype == torch.float64 and torch.equal(a.basis, b.basis)
    assert not torch.equal(a.basis, PreferenceGrid(PreferenceConfig(seed=2)).basis)
    big = PreferenceGrid(PreferenceConfig(M=64, F=256, K=3)).basis
    assert abs(big.mean()) < 5 / 128 and abs(big.std() - 1) < 5 / 181  # 5 standard errors of 16384 draws


@pytest.mark.parametrize("bad", [dict(K=17), dict(weights="uniform"), dict(F=0), dict(discount=1.5),
                                 dict(n_objects=19)])
def test_invalid_configs_are_refused(bad):
    with pytest.raises(ValueError):
        PreferenceGrid(PreferenceConfig(**bad))


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", devices())
def test_everything_stays_on_the_device_of_the_inputs(device):
    grid = PreferenceGrid(PreferenceConfig(F=8), device=device)
    starts = grid.sample_starts(6, torch.Generator(device=device).manual_seed(17))
    z = torch.rand(6, grid.M, device=device, dtype=torch.float64)
    demo = grid.demonstrate(starts, z)
    for t in (grid.basis, starts.agent_cell, demo.actions, demo.observations, demo.mask,
              grid.value_iteration(starts, z)):
        assert t.device.type == device
    cpu = PreferenceGrid(PreferenceConfig(F=8))
    cpu_starts = Starts(*(t.cpu() for t in (starts.object_cells, starts.features, starts.agent_cell)))
    assert torch.equal(cpu.basis, grid.basis.cpu())
    assert torch.equal(cpu.demonstrate(cpu_starts, z.cpu()).actions, demo.actions.cpu())


# --- the official JAX code's outputs ------------------------------------------------------------

def official_blocks():
    return json.loads(OFFICIAL.read_text())["blocks"]


@pytest.mark.parametrize("block", official_blocks(), ids=lambda b: f"M{b['M']}-F{b['F']}")
def test_reproduces_the_official_demonstrations(block):
    M, F, cases = block["M"], block["F"], block["cases"]
    grid = PreferenceGrid(PreferenceConfig(M=M, F=F, K=min(3, M), seed=block["seed"]))
    # The pinned basis is this project's own draw (a change of torch's generator shows here).
    assert torch.equal(grid.basis, torch.tensor(block["basis"], dtype=torch.float64))
    assert grid.free_cells.tolist() == block["free_coord"]
    keys = ("object_cells", "features", "agent_cell")
    starts = Starts(*(torch.tensor([c[key] for c in cases]) for key in keys))
    demo = grid.demonstrate(starts, torch.tensor([c["z"] for c in cases], dtype=torch.float64))
    assert demo.actions.tolist() == [c["actions"] for c in cases]
    assert demo.mask.tolist() == [c["mask"] for c in cases]
    obs = demo.observations.reshape(len(cases), 8, 49, F + 2)
    assert obs[:, :, :, -1].ne(0).all(0).all(0).nonzero().squeeze(1).tolist() == block["walls"]
    for b, case in enumerate(cases):
        for t in range(8):
            ones = obs[b, t, :, :-1].reshape(-1).nonzero().squeeze(1)
            assert (ones // (F + 1) * (F + 2) + ones % (F + 1)).tolist() == case["ones"][t], (b, t)
            values = demo.observations[b, t][demo.observations[b, t] != 0]
            torch.testing.assert_close(values, torch.full_like(values, case["values"][t]), rtol=1e-6, atol=0)
    # The pinned cases exercise the rules: full episodes, early NOTHING, and the all-tie z = 0.
    lengths = [sum(c["mask"]) for c in cases]
    assert 8 in lengths and any(1 < n < 8 for n in lengths) and 1 in lengths


def test_the_python_model_reproduces_the_official_and_its_mutants_do_not():
    # The plain-Python episode under the one 8-backup Q matches every official case; each wrong
    # rule disagrees with the official somewhere, so the pinned data would catch it.
    def last_max(q):
        return max(range(5), key=lambda a: (q[a], a))

    # (A wrong discount changes no action of these cases; the brute-force test above catches it.)
    wrong = dict(ties_to_highest=0, remaining_horizon=0, mask_after_action=0, no_mask=0)
    for block in official_blocks():
        M, F = block["M"], block["F"]
        grid = PreferenceGrid(PreferenceConfig(M=M, F=F, K=min(3, M), seed=block["seed"]))
        for case in block["cases"]:
            starts, z = one_task(grid, case["object_cells"], case["features"], case["agent_cell"], case["z"])
            objects = task_objects(grid, starts, z, 0)
            start = FREE[case["agent_cell"]]
            tables = py_value_iterations(objects, 8)
            Q = tables[8]
            actions, _, _, mask = py_rollout(start, objects, Q)
            assert (actions, mask) == (case["actions"], case["mask"])
            official = (case["actions"], case["mask"])
            wrong["ties_to_highest"] += py_rollout(start, objects, Q, pick=last_max)[::3] != official
            # The finite-horizon optimal policy: Q with 8 − t backups at step t.
            finite = py_rollout(start, objects, None, tables=tables[:0:-1])  # [Q_8, Q_7, ..., Q_1]
            wrong["remaining_horizon"] += finite[::3] != official
            done_after = [NOTHING not in actions[: t + 1] for t in range(8)]
            wrong["mask_after_action"] += done_after != case["mask"]
            wrong["no_mask"] += [True] * 8 != case["mask"]
    assert all(wrong.values()), wrong
