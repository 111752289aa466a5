"""Small workloads, their design spaces and a stand-in cost model, shared by the
search tests (test_search, test_evolutionary, test_tuning_task)."""

import tensortune as tt
from tensortune.cost_model import RandomModel
from tensortune.space import PostOrderApply

FUNCS = {"gmm": tt.workloads.get("gmm", M=24, N=40, K=12),
         "c2d": tt.workloads.get("c2d", small=True)}
GEN = PostOrderApply.default(tt.Target.host())
SPACES = {n: GEN.generate(f) for n, f in FUNCS.items()}


class TrainedRandom(RandomModel):
    """Random scores from a model that says it is trained, so that EvolutionarySearch
    evolves and ranks as it does once a run has measured enough."""

    @property
    def trained(self) -> bool:
        return True
