"""EvolutionarySearch: MetaSchedule's and Ansor's search over complete programs.

Each batch: a population is seeded from the best measured candidates, fresh draws from
the design spaces and (with ``fresh`` < 1) the unmeasured survivors of the previous
batch's population, re-scored by the retrained model; it is evolved for a few
generations (parents picked in proportion to the cost model's score, one decision
mutated per child, structurally identical programs dropped), and the batch is the
best-scored unmeasured programs, with a fraction ``eps_greedy`` of the batch's random
draws so the model keeps seeing the whole space. The cost model is retrained on
everything measured after every batch.

Carrying survivors over lets the evolution run on across batches at the cost of fewer
fresh draws (each replays the whole trace). Measured at 256 trials (RESULTS.md): with
population 144, 2 generations and ``fresh=0.25`` TBG's best latency was 19% lower than with the
defaults over three seeds at the same trials per second, but CONVLAYER's was 17-33%
slower over two, so the defaults draw the whole population afresh. A random share of 0.5
(not 0.2) in the batches chosen while only a transferred model ranks (before 16 own
measurements) was mixed over seven workloads and eight seeds: 0.84x on C2D at 16
trials, 0.85-0.88x on SMX, 1.06-1.12x on LNM; not kept.

Example:
    >>> tt.tune(func, trials=256, strategy=EvolutionarySearch(population=64))
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..cost_model import CostModel, make, normalized_throughput
from ..database import TuningRecord
from .mutator import mutate
from .search_strategy import Candidate, SearchContext, SearchStrategy


class EvolutionarySearch(SearchStrategy):
    def __init__(self, cost_model: str | CostModel | None = "lgbm", population: int = 48,
                 generations: int = 3, eps_greedy: float = 0.2, seeds_from_best: int = 8,
                 fresh: float = 1.0, niche_cap: float | None = None,
                 niche_full: int = 32) -> None:
        self.model = make(cost_model)
        self.niche_cap = niche_cap
        self.niche_full = niche_full
        self.population = population
        self.generations = generations
        self.eps_greedy = eps_greedy
        self.seeds_from_best = seeds_from_best
        self.fresh = fresh

    def init(self, ctx: SearchContext) -> None:
        super().init(ctx)
        self.x: list[np.ndarray] = []
        self.lat: list[float] = []
        self.measured: list[tuple[Candidate, float]] = []
        self.per_niche: Counter[tuple] = Counter()   # measured trials per niche
        self.survivors: list[Candidate] = []
        self.reserve: list[Candidate] = []

    def _score(self, cands: list[Candidate]) -> np.ndarray:
        if not cands:
            return np.zeros(0)
        if not self.model.trained:  # nothing learned yet: a random order
            return np.array([self.ctx.rng.random() for _ in cands])
        return self.model.predict(np.stack([c.features() for c in cands]))

    def generate(self, n: int) -> list[Candidate]:
        rng = self.ctx.rng
        ranked_measured = [c for c, lat in sorted(self.measured, key=lambda t: t[1])
                           if lat < float("inf")]
        pop = self._capped(ranked_measured, self.seeds_from_best)
        seen = {c.program for c in pop}
        every = list(pop)   # every program of this batch's evolution, for the capped pick
        keep = self.population - len(pop) - int(round(self.population * self.fresh))
        if keep > 0 and self.survivors:
            alive = [c for c in self.survivors if c.program not in self.ctx.known
                     and c.program not in seen]
            order = np.argsort(-self._score(alive))
            pop += [alive[i] for i in order[:keep]]
            every += [alive[i] for i in order[:keep]]
            seen |= {c.program for c in pop}
        tries = 0
        drawn: list[Candidate] = []  # this batch's random draws, kept for epsilon-greedy
        while len(pop) < self.population and tries < self.population * 4:
            k = self.population - len(pop)   # drawn together: a pool splits them
            tries += k
            for c in self.ctx.draw_fresh(k):
                if c is not None and c.program not in seen:
                    seen.add(c.program)
                    pop.append(c)
                    drawn.append(c)
                    every.append(c)
        for _ in range(self.generations if self.model.trained else 0):
            scores = np.maximum(self._score(pop), 1e-6)
            probs = scores / scores.sum()
            requests = []
            for _ in range(self.population):
                parent = pop[int(rng.choices(range(len(pop)), weights=probs)[0])]
                m = mutate(parent, self.ctx.spaces[parent.space], rng)
                if m is not None:
                    requests.append((parent.space, m[0], m[1]))
            children = []
            for child in self.ctx.draw_many(requests):
                if child is not None and child.program not in seen:
                    seen.add(child.program)
                    children.append(child)
                    every.append(child)
            merged = pop + children
            order = np.argsort(-self._score(merged))
            pop = [merged[i] for i in order[: self.population]]
        # Once a niche is capped the greedy share is picked from every program the
        # evolution saw, not only its final population: that holds mostly that niche.
        fresh = [c for c in (every if self._full() else pop) if c.program not in self.ctx.known]
        scores = self._score(fresh)
        ranked = [fresh[i] for i in np.argsort(-scores, kind="stable")]
        n_greedy = self.greedy_share(n) if self.model.trained else 0
        out = self._capped(ranked, n_greedy)
        # The random share comes from the draws, not from the evolved population: after a
        # few generations that holds only the model's favourite design space, and a model
        # that is wrong about it (one transferred from GMM preferred DENSE's W-transposing
        # sketch) would never see the other one measured.
        taken = {c.program for c in out}
        pool = [c for c in drawn if c.program not in taken and c.program not in self.ctx.known]
        rng.shuffle(pool)
        for c in pool + ranked[n_greedy:]:  # then the rest of the population
            if len(out) == n:
                break
            if c.program not in taken:
                taken.add(c.program)
                out.append(c)
        while len(out) < n and tries < self.population * 8:
            k = n - len(out)
            tries += k
            for c in self.ctx.draw_fresh(k):
                if c is not None and c.program not in self.ctx.known and c.program not in taken:
                    taken.add(c.program)
                    out.append(c)
        for c in out:
            self.ctx.known.add(c.program)
        self.survivors = [c for c in pop if c.program not in self.ctx.known]
        # The next best of this evolution, for ``more``: already drawn and scored.
        self.reserve = [c for c in ranked if c.program not in self.ctx.known]
        return out

    def greedy_share(self, n: int) -> int:
        """How many of a batch of ``n`` are the model's best-scored picks once it ranks
        (the rest are random draws).

        >>> EvolutionarySearch(eps_greedy=0.2).greedy_share(16)
        13
        """
        return n - int(round(n * self.eps_greedy))

    def more(self, n: int) -> list[Candidate]:
        """The best-scored unmeasured programs of the last evolution, without evolving
        again (a batch's evolution took 0.6-2.4 s of draws in DENSE, C2D and C3D runs);
        none once they are used up."""
        # The reserve holds each program once (the evolution dedupes), in score order.
        fresh = [c for c in self.reserve if c.program not in self.ctx.known]
        out, self.reserve = fresh[:n], fresh[n:]
        self.ctx.known.update(c.program for c in out)
        return out

    def _full(self) -> set[tuple]:
        """The niches measured ``niche_full`` times or more: those the cap applies to."""
        if not self.niche_cap:
            return set()
        return {n for n, k in self.per_niche.items() if k >= self.niche_full}

    def _capped(self, ranked: list[Candidate], k: int) -> list[Candidate]:
        """The first ``k`` of ``ranked`` with at most a ``niche_cap`` share of them from
        any one full niche (a register tile measured ``niche_full`` times), topped up in
        order when there are too few others. Without it a run spent 46-70% of its 256
        trials on one register tile (TBG, CONVLAYER, C2D in re-run 6), and TBG never
        measured the 5x16 tile that ran 1.21x faster in re-run 5; capping from the first
        batch on cost GMM and C2D their early best (RESULTS.md), hence ``niche_full``.
        Off by default: over three interleaved seeds (RESULTS.md) it was level on GRP
        and DIL, ahead on T2D (1.09x the mean) and behind on TBG (0.89x) and BMM."""
        full = self._full()
        if not full or k <= 0:
            return ranked[:k]
        cap = max(1, math.ceil(k * (self.niche_cap or 1.0)))
        count: Counter[tuple] = Counter()
        out: list[Candidate] = []
        for c in ranked:
            if len(out) < k and (c.niche not in full or count[c.niche] < cap):
                count[c.niche] += 1
                out.append(c)
        taken = {c.program for c in out}
        out += [c for c in ranked if c.program not in taken][: k - len(out)]
        return out

    def notify(self, batch: list[Candidate], records: list[TuningRecord]) -> None:
        for c, r in zip(batch, records):
            self.x.append(c.features())
            self.lat.append(r.latency)
            self.measured.append((c, r.latency))
            self.per_niche[c.niche] += 1
        self.model.update(np.stack(self.x), normalized_throughput(self.lat))
