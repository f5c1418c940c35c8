"""The compositional preference grid (the paper's second task family), batched over tasks in torch.

Follows the official compscale/data/envs/preference.py (with envs/base.py's `step` and
data/imitation.py's `create_prefgrid_dataloader`), rebuilt from these facts:

- World: the fixed 7×7 layout below, 19 free cells in row-major order. `n_objects` = 4 objects,
  each of a feature type drawn uniformly (with replacement) from F types; the objects and the
  agent stand on distinct free cells, drawn uniformly without replacement.
- Basis: an M×F standard Gaussian, the M modules' (preferences') values of the F features.
  A task is dense weights z (M,), drawn by the caller (`weights` names how: khot, discrete,
  continuous); collecting an available object of feature f pays (basisᵀ z)[f].
- Actions 0 NOTHING, 1 UP (row−1), 2 RIGHT (col+1), 3 DOWN (row+1), 4 LEFT (col−1). A move into
  a wall stays put. Stepping onto an available object collects it: its reward, and it becomes
  unavailable. NOTHING ends the episode in the environment, but not in value iteration, where it
  is merely "stay".
- States: (agent's free cell) × (bitmask of available objects, bit i = object i), indexed
  cell·2^n_objects + mask as in the official code: 19·16 = 304. Q_0 = 0, `timelimit` = 8 backups
  Q_{h+1}(s, a) = r(s, a) + γ·max_a' Q_h(s', a'), γ = `discount` = 0.9.
- Demonstration: from the start, `timelimit` steps, each a = argmax_a Q(s, a) of the one final Q,
  ties to the lowest action (jnp.argmax, torch.argmax). After NOTHING the state is frozen (base.py's
  empty_step) and the remaining actions are masked: mask[t] = not done before action t.
  Observations are those before each action (the initial one, then those after steps 1..T−1).
- Observation (7, 7, F+2): channel f at an object's cell is 1 while that object is available,
  channel F (penultimate) marks the agent, channel F+1 (last) the walls; flattened row-major and
  RMS-normalised, x·rsqrt(mean(x²) + 1e-6).

Not bit-identical to the JAX code: the basis comes from a torch generator seeded by `seed`
(float64), not from jax.random, and value iteration runs in float64 where the official runs in
float32. Exact ties (symmetric routes) are ties in both; only near-ties below float32's resolution
could break differently.

Usage:

    grid = PreferenceGrid(PreferenceConfig(M=16, F=32))
    starts = grid.sample_starts(128, torch.Generator().manual_seed(1))
    z = torch.zeros(128, grid.M, dtype=torch.float64)
    z[:, [2, 5, 11]] = torch.tensor([0.5, 0.8, 1.0], dtype=torch.float64)  # a 3-hot task, discrete weights
    demo = grid.demonstrate(starts, z)  # actions (128, 8), observations (128, 8, 1666), mask (128, 8)

For n = 128 episodes demonstrate() takes about 2.7 ms on one CPU thread (F = 32 or 16), some 3% of
a training step of a 2×1024 MLP on their 1024 rows.

With PreferenceConfig(M=16, F=32, K=3, seed=0), two starts from torch.Generator().manual_seed(1)
and the 3-hot task above, demo.actions (0 NOTHING, 1 UP, 2 RIGHT, 3 DOWN, 4 LEFT) is
[[4, 1, 2, 1, 2, 2, 3, 0], [2, 2, 3, 3, 1, 1, 1, 2]], every mask entry True, the observations
(2, 8, 1666), and grid.object_rewards(starts.features, z) is [[1.9803, 0.5605, -0.0867, 1.5845],
[1.2407, 0.6741, 0.5605, 1.9803]].

verify.sgd --family preference trains the paper's students unchanged: the MLP reads [e(z), o_t]
for each step, the transformer the sequence [z, o_1 … o_8], as compscale/model/policy.py builds
them. There is no construction to compare with, so it reports the students alone (and exits 0
unless it fails). Its --paper is configs/preference.py: M = 16, K = 3, F = 32, a 2×1024 MLP, 3M
steps of 128 episodes, AdamW lr 1e-4, weight decay 1e-3, seeds 1 2 3. `fewshot` is refused for
this family with one line: it shows a task by examples of the teacher's outputs, which the grid
does not have (the official code raises there too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from constructions.tasks.task_names import WEIGHTS

LAYOUT = """\
wwwwwww
w  w  w
w  w  w
ww   ww
w  w  w
w  w  w
wwwwwww
"""
NOTHING, UP, RIGHT, DOWN, LEFT = range(5)
# (row, col) change of each action, in action order.
DELTAS = ((0, 0), (-1, 0), (0, 1), (1, 0), (0, -1))


@dataclass(frozen=True)
class PreferenceConfig:
    M: int = 16  # num_preferences (modules)
    F: int = 32  # num_features
    n_objects: int = 4
    K: int = 3  # num_hot
    weights: str = "discrete"  # khot | discrete | continuous (drawn by the caller)
    timelimit: int = 8
    discount: float = 0.9
    seed: int = 0

    def validate(self) -> None:
        for name in ("M", "F", "n_objects", "K", "timelimit"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.K > self.M:
            raise ValueError(f"K must be at most M (K={self.K}, M={self.M})")
        if self.n_objects + 1 > len(free_cells(wall_grid())):
            raise ValueError(f"{self.n_objects} objects and the agent do not fit on the free cells")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {self.weights!r}")
        if not 0 <= self.discount <= 1:
            raise ValueError(f"discount must be in [0, 1], got {self.discount!r}")


@dataclass(frozen=True)
class Starts:
    """A batch of n start states, tensors on one device."""

    object_cells: Tensor  # (n, n_objects) int64 index into the free cells
    features: Tensor  # (n, n_objects) int64 in [0, F)
    agent_cell: Tensor  # (n,) int64 index into the free cells

    def __len__(self) -> int:
        return self.agent_cell.shape[0]


@dataclass(frozen=True)
class Demonstration:
    actions: Tensor  # (n, T) int64
    observations: Tensor  # (n, T, 7*7*(F+2)) RMS-normalised
    mask: Tensor  # (n, T) bool


class Rollout(NamedTuple):
    """The states before each of the T actions, the actions, and which of them count."""

    actions: Tensor  # (n, T) int64
    agent_cell: Tensor  # (n, T) int64
    available: Tensor  # (n, T, n_objects) bool
    mask: Tensor  # (n, T) bool


def wall_grid() -> Tensor:
    """(7, 7) bool, True on walls."""
    return torch.tensor([[c == "w" for c in line] for line in LAYOUT.splitlines()])


def free_cells(walls: Tensor) -> Tensor:
    """(n_cells, 2) int64 (row, col) of the free cells, row-major (numpy's where order)."""
    return torch.nonzero(~walls)


def move_table(walls: Tensor) -> Tensor:
    """(n_cells, 5) int64: the free cell each action leads to; a move into a wall stays put.

    The layout is walled all round, so a move never leaves the grid.
    """
    cells = free_cells(walls)
    index = torch.full(walls.shape, -1, dtype=torch.int64)
    index[cells[:, 0], cells[:, 1]] = torch.arange(len(cells))
    target = cells[:, None, :] + torch.tensor(DELTAS)[None]
    into_wall = walls[target[..., 0], target[..., 1]]
    stay = torch.arange(len(cells))[:, None].expand(-1, len(DELTAS))
    return torch.where(into_wall, stay, index[target[..., 0], target[..., 1]])


def rms_normalise(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x·rsqrt(mean(x²) + eps) over the last axis (the official `normalize`)."""
    return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps)


class PreferenceGrid:
    """The family for one config: its basis, its layout tables, and batched demonstrations."""

    def __init__(self, cfg: PreferenceConfig, device="cpu"):
        cfg.validate()
        self.cfg = cfg
        self.M, self.K, self.F, self.weights, self.T = cfg.M, cfg.K, cfg.F, cfg.weights, cfg.timelimit
        self.device = torch.device(device)
        self.n_actions = len(DELTAS)
        walls = wall_grid()
        self.n_cells = len(free_cells(walls))
        self.n_configs = 2**cfg.n_objects  # availability bitmasks
        self.n_states = self.n_cells * self.n_configs
        # Drawn on the CPU, so that every device gets the same basis from the same seed.
        g = torch.Generator().manual_seed(cfg.seed)
        self.basis = torch.randn(cfg.M, cfg.F, generator=g, dtype=torch.float64).to(self.device)
        self.walls = walls.to(self.device)
        self.n_walls = int(walls.sum())  # read once here: demonstrate() must not wait on the device
        self.free_cells = free_cells(walls).to(self.device)
        self.cell_next = move_table(walls).to(self.device)
        # Index of each free cell in the flattened 7×7 grid, for the observation.
        self._cell_flat = self.free_cells[:, 0] * walls.shape[1] + self.free_cells[:, 1]
        self._powers = 2 ** torch.arange(cfg.n_objects, device=self.device)
        # (n_configs, n_objects): which objects each bitmask holds.
        self._config_bits = (torch.arange(self.n_configs, device=self.device)[:, None] & self._powers) > 0

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (*self.walls.shape, self.F + 2)

    @property
    def obs_dim(self) -> int:
        return self.walls.numel() * (self.F + 2)

    def sample_starts(self, n: int, generator: torch.Generator) -> Starts:
        """n start states on the generator's device: features uniform with replacement, the
        objects' and the agent's cells uniform without replacement."""
        device = generator.device
        features = torch.randint(self.F, (n, self.cfg.n_objects), generator=generator, device=device)
        # A uniform random permutation per row (argsort of uniforms); its head is a draw
        # without replacement. The last of the head is the agent, as in the official order.
        cells = torch.rand(n, self.n_cells, generator=generator, device=device).argsort(dim=1)
        cells = cells[:, : self.cfg.n_objects + 1]
        return Starts(object_cells=cells[:, :-1], features=features, agent_cell=cells[:, -1])

    def object_rewards(self, features: Tensor, z: Tensor) -> Tensor:
        """(n, n_objects) float64: each object's reward (basisᵀ z)[feature] under its task's z."""
        z = torch.as_tensor(z, dtype=torch.float64, device=features.device).reshape(-1, self.M)
        values = z @ self.basis.to(features.device)  # (n or 1, F)
        return torch.gather(values.expand(features.shape[0], -1), 1, features)

    def transitions(self, starts: Starts, z: Tensor) -> tuple[Tensor, Tensor]:
        """Per task, the next state and the reward of every (state, action): (n, S, 5) int64 and
        (n, S, 5) float64, S = n_states.

        The collection rule is applied at every state, also the unreachable ones where the agent
        stands on an available object (there even NOTHING collects it, as in the official
        `_move`); so the whole Q table, not just its reachable part, is the official one.
        """
        n, dev = len(starts), starts.agent_cell.device
        cell_next = self.cell_next.to(dev)
        # hit[b, c, a, i]: the move a from cell c lands on object i of task b.
        hit = starts.object_cells[:, None, None, :] == cell_next[None, :, :, None]
        hit_bits = (hit * self._powers.to(dev)).sum(-1)  # (n, cells, 5)
        configs = torch.arange(self.n_configs, device=dev)
        next_config = configs[None, None, :, None] & ~hit_bits[:, :, None, :]  # (n, cells, configs, 5)
        next_state = cell_next[None, :, None, :] * self.n_configs + next_config
        # Objects stand on distinct cells, so at most one term of the sum is non-zero: the
        # reward is exactly that object's value, and symmetric routes tie exactly.
        paid = hit * self.object_rewards(starts.features, z)[:, None, None, :]
        reward = torch.einsum("bcai,mi->bcma", paid, self._config_bits.to(dev, torch.float64))
        return next_state.reshape(n, self.n_states, -1), reward.reshape(n, self.n_states, -1)

    def value_iteration(self, starts: Starts, z: Tensor, backups: int | None = None) -> Tensor:
        """Q after `backups` (default timelimit) Bellman backups from Q_0 = 0: (n, S, 5) float64."""
        return self._q_table(self._arrival_values(starts, z, backups))

    def _arrival_values(self, starts: Starts, z: Tensor, backups: int | None = None) -> Tensor:
        """U (cells, n, configs) float64 with Q(cell, mask, a) = U(next cell of a, mask).

        The backup of the `transitions` tables, Q(s, a) = r(s, a) + γ·max_a' Q(s', a'), factorised
        for speed: what a step pays and where it leads depend only on the cell it lands on and the
        bitmask, so each backup computes the value of arriving, U(cell', mask), once per landing
        cell (n·S entries, not n·S·5). The floats are those of the tables' backup: the same
        product and sum, each rounded once (no fused multiply-add, which would break exact ties).
        """
        dev = starts.agent_cell.device
        cells = torch.arange(self.n_cells, device=dev)
        # Cell-major, so that selecting landing cells copies contiguous blocks.
        at_cell = cells[:, None, None] == starts.object_cells[None]  # (cells, n, n_objects)
        object_bit = (at_cell * self._powers.to(dev)).sum(-1)  # (cells, n), 0 where no object
        configs = torch.arange(self.n_configs, device=dev)
        after = (configs & ~object_bit[..., None]).expand(-1, -1, self.n_configs)  # the mask once arrived
        # At most one object per cell: the arrival reward is exactly that object's value.
        paid = at_cell * self.object_rewards(starts.features, z)[None]
        reward = torch.einsum("cbi,mi->cbm", paid, self._config_bits.to(dev, torch.float64))
        moves = [self.cell_next[:, a].to(dev) for a in range(1, self.n_actions)]
        U = torch.zeros_like(reward)
        V = torch.zeros_like(reward)  # max_a Q_0 = 0
        backups = self.T if backups is None else backups
        for h in range(backups):
            U = V.gather(-1, after).mul_(self.cfg.discount).add_(reward)
            if h + 1 < backups:
                # max over the actions: NOTHING lands on the cell itself, the moves on a neighbour.
                V = torch.maximum(U, U.index_select(0, moves[0]))
                for move in moves[1:]:
                    torch.maximum(V, U.index_select(0, move), out=V)
        return U

    def _q_table(self, U: Tensor) -> Tensor:
        """Q[b, cell·configs + mask, a] = U[next cell of a, b, mask]: (n, S, 5)."""
        Q = U[self.cell_next.to(U.device)].permute(2, 0, 3, 1)  # (n, cells, configs, 5)
        return Q.reshape(U.shape[1], self.n_states, self.n_actions)

    def state_index(self, agent_cell: Tensor, available: Tensor) -> Tensor:
        """cell·2^n_objects + bitmask of the available objects (bit i = object i)."""
        return agent_cell * self.n_configs + self._config(available)

    def _config(self, available: Tensor) -> Tensor:
        return (available.long() * self._powers.to(available.device)).sum(-1)

    def rollout(self, starts: Starts, Q: Tensor) -> Rollout:
        """T greedy steps of the environment under the final Q (n, S, 5), ties to the lowest action."""
        rows = torch.arange(len(starts), device=Q.device)
        return self._rollout(starts, lambda cell, available: Q[rows, self.state_index(cell, available)])

    def _rollout(self, starts: Starts, q_values) -> Rollout:
        """The greedy episode, reading the Q values (n, 5) at the current states from q_values.

        The environment's own dynamics, not the transition table: NOTHING ends the episode,
        after which the state is frozen and the actions (still argmax at the frozen state) are
        masked. The official episode also ends once the timestep exceeds `timelimit`, which
        never happens within T = timelimit steps. (The freeze is kept for fidelity, though it shows
        nowhere: NOTHING leaves a reachable state as it is, and the same state gives the same argmax.)
        """
        n, dev = len(starts), starts.agent_cell.device
        cell_next = self.cell_next.to(dev)
        cell = starts.agent_cell
        available = torch.ones(n, self.cfg.n_objects, dtype=torch.bool, device=dev)
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        actions, cells, avails, mask = [], [], [], []
        for t in range(self.T):
            cells.append(cell)
            avails.append(available)
            mask.append(~done)
            action = q_values(cell, available).argmax(dim=-1)  # the first maximum on ties
            actions.append(action)
            moved = cell_next[cell, action]
            collected = starts.object_cells == moved[:, None]
            cell = torch.where(done, cell, moved)
            available = torch.where(done[:, None], available, available & ~collected)
            done = done | (action == NOTHING) | (t + 1 > self.cfg.timelimit)
        return Rollout(*(torch.stack(x, 1) for x in (actions, cells, avails, mask)))

    def observe(self, object_cells: Tensor, features: Tensor, available: Tensor, agent_cell: Tensor,
                dtype=torch.float32) -> Tensor:
        """The raw (..., 7, 7, F+2) grid; the inputs broadcast over their leading axes
        (object_cells, features, available: (..., n_objects); agent_cell: (...))."""
        grid = self._paint(object_cells, features, available, agent_cell, 1.0, dtype)
        return grid.reshape(*grid.shape[:-1], *self.obs_shape)

    @staticmethod
    def _lead(object_cells, features, available, agent_cell) -> torch.Size:
        return torch.broadcast_shapes(object_cells.shape[:-1], features.shape[:-1], available.shape[:-1],
                                      agent_cell.shape)

    def _paint(self, object_cells, features, available, agent_cell, value, dtype) -> Tensor:
        """The flattened grid (..., 7·7·(F+2)) with `value` (broadcast over the leading axes)
        in place of each 1: one pass over the output, the walls times value, then the rest."""
        lead = self._lead(object_cells, features, available, agent_cell)
        n_obj, C, dev = object_cells.shape[-1], self.F + 2, agent_cell.device
        value = torch.as_tensor(value, dtype=dtype, device=dev).expand(lead)[..., None]
        walls = torch.zeros(self.walls.numel(), C, dtype=dtype, device=dev)
        walls[:, -1] = self.walls.reshape(-1).to(dev, dtype)
        grid = walls.reshape(-1) * value
        # Objects stand on distinct cells and the agent has its own channel: no index repeats.
        cell_flat = self._cell_flat.to(dev)
        obj_index = (cell_flat[object_cells] * C + features).expand(*lead, n_obj)
        grid.scatter_(-1, obj_index, available.to(dtype).expand(*lead, n_obj) * value)
        agent_index = (cell_flat[agent_cell] * C + self.F).expand(lead)[..., None]
        grid.scatter_(-1, agent_index, value)
        return grid

    def demonstrate(self, starts: Starts, z: Tensor, dtype=torch.float32) -> Demonstration:
        """The greedy demonstration under the value-iteration Q of each task from its start state.

        Equal to rollout(starts, value_iteration(starts, z)) and rms_normalise of the flattened
        observe(...), without building the full Q table or the raw observations: every entry
        of a raw observation is 0 or 1, so its mean square is the count of ones over the size.
        """
        U = self._arrival_values(starts, z)
        cell_next, rows = self.cell_next.to(U.device), torch.arange(len(starts), device=U.device)
        rollout = self._rollout(starts, lambda cell, available: U[cell_next[cell], rows[:, None],
                                                                  self._config(available)[:, None]])
        ones = (self.n_walls + 1 + rollout.available.sum(-1)).to(dtype)  # walls, the agent, the objects left
        scale = torch.rsqrt(ones / self.obs_dim + 1e-6)
        observations = self._paint(starts.object_cells[:, None], starts.features[:, None], rollout.available,
                                   rollout.agent_cell, scale, dtype)
        return Demonstration(actions=rollout.actions, observations=observations, mask=rollout.mask)
