"""Training algorithms for group and domain shift: one registry, one interface, every hyper-parameter here.

    from metashift_hf.research.algorithms import ALGORITHMS, HPARAMS, algorithm_info
    ALGORITHMS["groupdro"].default_selection        # 'worst-group'

DomainBed (Gulrajani & Lopez-Paz 2021) and SubpopBench (Yang et al. 2023) style: each algorithm is a
small class whose :meth:`Algorithm.loss` turns one minibatch into the loss to minimise, given a
``forward(x) -> (representation, logits)``; the training loop (:mod:`metashift_hf.research.train`) owns
optimiser, sampling, epochs and model selection. Two algorithms are staged: JTT (train twice, the
second time with the first model's training errors up-weighted) and DFR (re-train the last layer on
group-balanced held-out data): each runs its own stages in :meth:`Algorithm.fit`, composed of the loop's
steps (:class:`StageLoop`, implemented by :class:`metashift_hf.research.fitting.SeedLoop`).

Vocabulary: a *group* is ``class(context)`` (the task's ``group`` column); an *environment* (DomainBed's
domain, SubpopBench's attribute ``a``) is the row's ``context``. Each class states its definition
(paper + equation) and where ours differs; ``docs/evaluate.md`` has the same table for users.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Mapping, Protocol, Sequence

import numpy as np
from sklearn import __version__ as _sklearn_version

from ..core import options as opt
from ..core.errors import UnknownNameError
from ..core.registry import Registry
from ..scoring.groups import group_scores, worst


SELECTION_SPLIT = "validation"  # the split the average and worst-group rules select on
ORACLE_SPLIT = "test"  # the split the oracle rule peeks at
Selection = Literal["average", "worst-group", "oracle"]
SELECTIONS: tuple[str, ...] = ("average", "worst-group", "oracle")
SELECTION_TEXT: dict[str, str] = {
    "average": "validation average: the highest average accuracy on the ID validation split",
    "worst-group": "validation worst-group: the highest worst-group accuracy on the ID validation split",
    "oracle": "ORACLE (test worst-group): the highest worst-group accuracy on the test split itself; it peeks at "
    "the test data, an upper bound for comparison, not a model-selection rule",
}
Sampling = Literal["shuffle", "group-balanced", "domain-balanced"]
SAMPLINGS: tuple[str, ...] = ("shuffle", "group-balanced", "domain-balanced")
SAMPLING_TEXT: dict[str, str] = {
    "shuffle": "each epoch a random permutation of the training rows, cut into batches",
    "group-balanced": "every batch draws the same number of rows from each training group class(context), "
    "cycling through a shuffled copy of each group: the MetaShift paper's released loader "
    "(experiments/distribution_shift/main_generalization.py, SubsetShiftDatasetManager) and "
    "SubpopBench's group-balanced sampling",
    "domain-balanced": "every batch draws the same number of rows from each training environment (context), "
    "as DomainBed's own loaders do (one minibatch per domain each step)",
}
# The paper's training protocol. Its released script (Weixin-Liang/MetaShift,
# experiments/distribution_shift/main_generalization.py) builds every batch as
#     for domain_idx in range(num_domains):          # domain 0: cat(indoor), dog(indoor); 1: the outdoor pair
#         for subject_str in ["cat", "dog"]:
#             sampled_ids = np.random.choice(group_indices[class(context)], size=batch_size, ...)
# i.e. batch_size rows from each class(context) group: group-balanced (the appendix's "implicit up-sampling").
PAPER_SAMPLING = "group-balanced"


@dataclass(frozen=True)
class Dist:
    """A random-search distribution (DomainBed's hparams_registry style): ``uniform`` on [low, high],
    ``log10`` = 10 ** uniform(low, high), ``int-log2`` = int(2 ** uniform(low, high)); ``fixed``: never searched."""

    kind: Literal["fixed", "uniform", "log10", "int-log2"]
    low: float = 0.0
    high: float = 0.0

    def draw(self, rng: "np.random.RandomState | np.random.Generator", default: float) -> float:
        if self.kind == "fixed":
            return default
        u = float(rng.uniform(self.low, self.high))
        return {"uniform": u, "log10": 10.0**u, "int-log2": float(int(2.0**u))}[self.kind]


@dataclass(frozen=True)
class HParam:
    """One hyper-parameter: its default (DomainBed's / SubpopBench's, cited in the algorithm's ``differs``), the
    check of its range (core.options), applied to every value a user passes, and the distribution the random
    search (`experiment compare --n-hparams`) draws it from (DomainBed's / SubpopBench's where they have one)."""

    default: float
    check: Callable[..., float] = field(compare=False)
    dist: Dist


FIXED = Dist("fixed")
# DFR's re-fits of the last layer: the reference averages 20; past 1,000 a typo (retrains=100000000, review case
# N-H17) would fit for days before anything is written.
RETRAINS_MAX = 1000
RETRAINS_CHECK = opt.int_in(1, RETRAINS_MAX)
# Draws of one method's random search (`experiment compare --n-hparams`; DomainBed's sweep defaults to 20): each
# draw is a whole training run per trial, so more is a typo (100000, review case N-C04) that would run for days.
HPARAM_DRAWS_MAX = 100
hparam_draws = opt.int_in(1, HPARAM_DRAWS_MAX)
# the loop's own settings searched beside each algorithm's (DomainBed's lr and weight decay, around our probe defaults)
SWEEP_COMMON: dict[str, Dist] = {"lr": Dist("log10", -4, -2), "weight_decay": Dist("log10", -6, -2)}


class StageLoop(Protocol):
    """One seed's training loop as an algorithm's :meth:`Algorithm.fit` sees it (``fitting.SeedLoop``): the
    settings ``s`` (``epochs``, ``select``, ``also``: more rules kept over the same trajectory, ``hparams``), the
    data (``y``, ``groups`` per split, ``n_classes``), the learner (``kind``, ``set_head``), the seed and the log,
    and the steps that train and report."""

    s: Any
    data: Any
    learner: Any
    seed: int
    log: list

    def make(self, method: str, hp: Mapping[str, float] | None = None) -> "Algorithm": ...

    def resumes_at(self, stage: str) -> bool: ...

    def stage(
        self, algo: "Algorithm", stage: str, epochs: int, select: str | None, also: tuple[str, ...] = ()
    ) -> tuple[Any, int, float]: ...

    def new_module(self) -> Any: ...

    def features(self, module: Any) -> dict[str, np.ndarray]: ...

    def train_errors(self, module: Any) -> np.ndarray: ...

    def seed_fit(
        self,
        module: Any,
        epoch: int,
        value: float,
        details: dict[str, Any],
        log: Sequence[dict[str, Any]] | None = None,
        others: Mapping[str, Any] | None = None,
    ) -> Any: ...

    def finish(self, module: Any, epoch: int, value: float, details: dict[str, Any]) -> Any: ...


# The one table of algorithms: `@ALGORITHMS.register` on each class below (core.registry).
ALGORITHMS: Registry[type["Algorithm"]] = Registry("method", "")


class Algorithm:
    """One update rule. Subclasses set the class attributes and implement :meth:`loss`.

    ``groups``/``envs``: training-row indices of each row's group and environment (0..n-1);
    ``hp``: this algorithm's hyper-parameters (:data:`HPARAMS` with overrides); ``rng`` draws
    whatever the rule needs at random (Mixup's coefficients), seeded by the loop per epoch.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    reference: ClassVar[str]
    definition: ClassVar[str]
    differs: ClassVar[str]
    default_selection: ClassVar[str]
    tensors: ClassVar[tuple[str, ...]] = ()  # attributes a checkpoint keeps besides the step count
    # every hyper-parameter of the algorithm, in one place: default, range check, search distribution
    hparams: ClassVar[Mapping[str, HParam]] = {}

    def __init__(
        self,
        torch: Any,
        hp: Mapping[str, float],
        groups: np.ndarray,
        n_groups: int,
        envs: np.ndarray,
        n_envs: int,
        device: str,
    ) -> None:
        self.torch, self.hp, self.device = torch, dict(hp), device
        self.n_groups, self.n_envs = n_groups, n_envs
        self.group_counts = np.bincount(groups, minlength=n_groups).astype(np.float64)
        self.rng = np.random.default_rng(0)
        self.step = 0
        self.total_steps = 0  # updates in this training stage; the loop sets it (set_run) before the first

    def fit(self, loop: StageLoop) -> Any:
        """Train one seed (its stages, through ``loop``'s steps) and return its ``SeedFit``: one stage, the epoch
        the selection rule prefers kept. JTT and DFR run their own stages."""
        module, epoch, value = loop.stage(self, "train", loop.s.epochs, loop.s.select, loop.s.also)
        return loop.finish(module, epoch, value, {})

    def set_run(self, total_steps: int) -> None:
        """The number of updates this stage will make: schedules are fractions of it (DomainBed's are step
        counts made for 5,000 steps, which a 200-700-step probe run never reaches)."""
        self.total_steps = int(total_steps)

    def schedule(self) -> dict[str, int]:
        """The update (0-based) at which each scheduled hyper-parameter takes effect, for the log and the
        check that it does within the run (:func:`dead_schedules`)."""
        return {}

    def loss(self, forward: Callable, x, y, g, e, idx):
        raise NotImplementedError

    def resets_optimizer(self) -> bool:
        """True once, at the step where the optimiser must start afresh (IRM's annealing)."""
        return False

    def state(self) -> dict[str, Any]:
        """What a checkpoint must keep to continue the run bit for bit (tensors and numbers)."""
        return {"step": self.step, **{name: getattr(self, name) for name in self.tensors}}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        for name in self.tensors:
            setattr(self, name, state[name].to(self.device))

    def _ce(self, logits, y):
        return self.torch.nn.functional.cross_entropy(logits, y, reduction="none")


@ALGORITHMS.register
class ERM(Algorithm):
    name, title = "erm", "ERM"
    reference = "Vapnik 1998; DomainBed's ERM (Gulrajani & Lopez-Paz 2021, Alg. ERM)"
    definition = "min_theta (1/n) sum_i l(f_theta(x_i), y_i): the mean cross-entropy over the batch"
    differs = (
        "the MetaShift paper's script feeds ERM group-balanced batches (batch_size rows from each "
        "class(context) group per step): the 'group-balanced' sampling, the default of `experiment "
        "paper-subpop`/`paper-dg`; `train` and `experiment compare` default to 'shuffle', a plain mean over "
        "shuffled rows; DomainBed's own loaders are 'domain-balanced' (one minibatch per context)"
    )
    default_selection = "average"

    def loss(self, forward, x, y, g, e, idx):
        return self._ce(forward(x)[1], y).mean()


@ALGORITHMS.register
class Reweight(Algorithm):
    name, title = "reweight", "group reweighting"
    reference = "Sagawa et al. 2020 (reweighting baseline); Idrissi et al. 2022 ('RWG'); SubpopBench ReWeight"
    definition = (
        "min_theta sum_i w_{g(i)} l_i / sum_i w_{g(i)} with w_g = 1/n_g: every group carries the same total weight"
    )
    differs = (
        "the weights are normalised within each batch (sum w l / sum w) rather than by the number of "
        "groups as SubpopBench does; the minimiser is the same"
    )
    default_selection = "worst-group"

    def __init__(self, torch, hp, groups, n_groups, envs, n_envs, device) -> None:
        super().__init__(torch, hp, groups, n_groups, envs, n_envs, device)
        self.weight = torch.tensor(1.0 / np.maximum(self.group_counts, 1), dtype=torch.float32, device=device)

    def loss(self, forward, x, y, g, e, idx):
        w = self.weight[g]
        return (w * self._ce(forward(x)[1], y)).sum() / w.sum()


@ALGORITHMS.register
class GroupDRO(Algorithm):
    name, title = "groupdro", "GroupDRO"
    reference = "Sagawa et al. 2020, 'Distributionally robust neural networks', Alg. 1"
    definition = (
        "q_g <- q_g exp(eta * L_g(theta)), q <- q / sum q; min_theta sum_g q_g L_g(theta): "
        "exponentiated-gradient ascent on the group weights, descent on the weighted group losses"
    )
    differs = (
        "online, per batch, over the groups present in the batch (as DomainBed/SubpopBench); no group "
        "adjustment C/sqrt(n_g) and no strong L2 penalty unless --weight-decay is given"
    )
    hparams = {"eta": HParam(0.01, opt.positive_float, Dist("log10", -3, -1))}
    default_selection = "worst-group"
    tensors = ("q",)

    def __init__(self, torch, hp, groups, n_groups, envs, n_envs, device) -> None:
        super().__init__(torch, hp, groups, n_groups, envs, n_envs, device)
        self.q = torch.full((n_groups,), 1.0 / n_groups, device=device)

    def loss(self, forward, x, y, g, e, idx):
        torch = self.torch
        losses = self._ce(forward(x)[1], y)
        sums = torch.zeros(self.n_groups, device=losses.device).index_add_(0, g, losses)
        counts = torch.zeros(self.n_groups, device=losses.device).index_add_(0, g, torch.ones_like(losses))
        present = counts > 0
        group_loss = torch.where(present, sums / counts.clamp(min=1), torch.zeros_like(sums))
        with torch.no_grad():  # exponentiated-gradient ascent on the groups seen in this batch
            self.q = self.q * torch.exp(self.hp["eta"] * group_loss.detach() * present)
            self.q = self.q / self.q.sum()
        return (self.q * group_loss).sum()


def _per_env(e) -> list:
    return [e == v for v in e.unique()]


@ALGORITHMS.register
class IRM(Algorithm):
    name, title = "irm", "IRM (IRMv1)"
    reference = "Arjovsky et al. 2019, 'Invariant Risk Minimization', eq. IRMv1; DomainBed/SubpopBench IRM"
    definition = (
        "min_Phi sum_e R^e(Phi) + lambda ||grad_{w|w=1.0} R^e(w . Phi)||^2, the gradient norm "
        "estimated unbiasedly from two halves of each environment's batch; penalty weight 1 for the "
        "first anneal steps, lambda after (and the optimiser restarts then)"
    )
    differs = (
        "environments are the rows' contexts (SubpopBench's attribute a); lambda 100 (their default); the "
        "anneal is a fraction of the run, anneal_frac 0.1 = DomainBed's 500 of 5,000 steps, because a step "
        "count made for 5,000 steps never fires in a 200-700-step probe run"
    )
    hparams = {
        "lambda": HParam(100.0, opt.positive_float, Dist("log10", -1, 5)),
        # DomainBed: anneal 500 of 5,000 steps (searched as 10**U(0, 4) steps): here a share of the run
        "anneal_frac": HParam(0.1, opt.proper_fraction, Dist("uniform", 0.02, 0.5)),
    }
    default_selection = "average"

    def anneal_step(self) -> int:
        return max(1, int(round(self.hp["anneal_frac"] * self.total_steps)))

    def schedule(self) -> dict[str, int]:
        return {"lambda": self.anneal_step()}

    def loss(self, forward, x, y, g, e, idx):
        torch = self.torch
        weight = self.hp["lambda"] if self.step >= self.anneal_step() else 1.0
        logits = forward(x)[1]
        nll, penalty, envs = 0.0, 0.0, _per_env(e)
        for mask in envs:
            le, ye = logits[mask], y[mask]
            nll = nll + torch.nn.functional.cross_entropy(le, ye)
            if len(ye) >= 2:  # the penalty needs two halves
                scale = torch.tensor(1.0, device=logits.device, requires_grad=True)
                g1 = torch.autograd.grad(
                    torch.nn.functional.cross_entropy(le[::2] * scale, ye[::2]), [scale], create_graph=True
                )[0]
                g2 = torch.autograd.grad(
                    torch.nn.functional.cross_entropy(le[1::2] * scale, ye[1::2]), [scale], create_graph=True
                )[0]
                penalty = penalty + g1 * g2
        self.step += 1
        loss = (nll + weight * penalty) / len(envs)
        return loss / weight if weight > 1.0 else loss  # as the IRM authors' code: the loss stays O(1)

    def resets_optimizer(self) -> bool:
        return self.step == self.anneal_step() and self.hp["lambda"] != 1.0


@ALGORITHMS.register
class CORAL(Algorithm):
    name, title = "coral", "CORAL"
    reference = "Sun & Saenko 2016, 'Deep CORAL'; DomainBed/SubpopBench CORAL (mean and covariance matching)"
    definition = (
        "min L_CE + gamma * mean over environment pairs (i, j) of ||mu_i - mu_j||^2 / d + "
        "||C_i - C_j||_F^2 / d^2, mu/C the mean and covariance of the learned representation"
    )
    differs = (
        "with --probe linear no representation is learned (the backbone is frozen), so the penalty "
        "matches the logits, the only learned representation; with --probe finetune it matches the pooled features"
    )
    hparams = {"gamma": HParam(1.0, opt.positive_float, Dist("log10", -1, 1))}
    default_selection = "average"

    def loss(self, forward, x, y, g, e, idx):
        rep, logits = forward(x)
        objective = self._ce(logits, y).mean()
        parts = [rep[m] for m in _per_env(e)]
        parts = [p for p in parts if len(p) >= 2]  # a covariance needs two rows
        penalty, pairs = 0.0, 0
        for i in range(len(parts)):
            for j in range(i + 1, len(parts)):
                penalty = penalty + self._coral(parts[i], parts[j])
                pairs += 1
        return objective + self.hp["gamma"] * (penalty / pairs if pairs else 0.0)

    @staticmethod
    def _coral(a, b):
        ma, mb = a.mean(0, keepdim=True), b.mean(0, keepdim=True)
        ca, cb = a - ma, b - mb
        cova, covb = ca.t() @ ca / (len(a) - 1), cb.t() @ cb / (len(b) - 1)
        return (ma - mb).pow(2).mean() + (cova - covb).pow(2).mean()


@ALGORITHMS.register
class Mixup(Algorithm):
    name, title = "mixup", "Mixup"
    reference = (
        "Zhang et al. 2018, 'mixup'; SubpopBench Mixup (DomainBed's pairs domains: Xu et al. 2020, Yan et al. 2020)"
    )
    definition = (
        "lambda ~ Beta(alpha, alpha), x~ = lambda x_i + (1 - lambda) x_j, "
        "loss = lambda l(f(x~), y_i) + (1 - lambda) l(f(x~), y_j), j a random permutation of the batch"
    )
    differs = (
        "with --probe linear the mixed inputs are the frozen features (SubpopBench mixes features for "
        "text the same way); pairs are drawn within the batch, not across domains as in DomainBed"
    )
    hparams = {"alpha": HParam(0.2, opt.positive_float, Dist("log10", -1, 1))}
    default_selection = "average"

    def loss(self, forward, x, y, g, e, idx):
        torch = self.torch
        lam = float(self.rng.beta(self.hp["alpha"], self.hp["alpha"]))
        perm = torch.from_numpy(self.rng.permutation(len(y))).to(y.device)
        logits = forward(lam * x + (1 - lam) * x[perm])[1]
        return lam * self._ce(logits, y).mean() + (1 - lam) * self._ce(logits, y[perm]).mean()


@ALGORITHMS.register
class JTT(Algorithm):
    name, title = "jtt", "JTT"
    reference = "Liu et al. 2021, 'Just Train Twice', Sec. 3 (eq. 2); SubpopBench JTT"
    definition = (
        "stage 1: ERM for T epochs; error set E = training rows it misclassifies; stage 2: a fresh "
        "model minimising lambda_up sum_{i in E} l_i + sum_{i not in E} l_i"
    )
    differs = (
        "T = first_stage_frac x epochs (0.5, SubpopBench's step fraction), lambda_up 10 (SubpopBench's "
        "default; the paper tunes it up to 100); E up-weighted in the loss rather than up-sampled "
        "(equal in expectation); with --probe finetune stage 1 sees augmented images, E is computed without augmentation"
    )
    hparams = {
        "first_stage_frac": HParam(0.5, opt.fraction, Dist("uniform", 0.2, 0.8)),
        "lambda_up": HParam(10.0, opt.positive_float, Dist("log10", 0, 2.5)),
    }
    default_selection = "worst-group"
    tensors = ("weight",)

    def __init__(self, torch, hp, groups, n_groups, envs, n_envs, device) -> None:
        super().__init__(torch, hp, groups, n_groups, envs, n_envs, device)
        self.weight = torch.ones(len(groups), device=device)
        self.error_set: np.ndarray = np.zeros(0, dtype=np.int64)

    def fit(self, loop: StageLoop) -> Any:
        """Stage 1 (ERM for T epochs; skipped when resuming stage 2) finds the error set; stage 2 up-weights it."""
        first = max(1, round(self.hp["first_stage_frac"] * loop.s.epochs))
        if not loop.resumes_at("jtt-upweight"):  # a checkpoint in stage 2 holds the error set (``weight``)
            identify, _, _ = loop.stage(loop.make("erm"), "jtt-identify", first, None)
            self.set_errors(loop.train_errors(identify))
        module, epoch, value = loop.stage(self, "jtt-upweight", loop.s.epochs, loop.s.select, loop.s.also)
        wrong = self.weight.cpu().numpy() != 1.0
        groups = loop.data.groups["train"]
        by_group = {str(g): int(wrong[groups == g].sum()) for g in np.unique(groups)}
        details = {
            "jtt": {"identification_epochs": first, "error_set": int(wrong.sum()), "error_set_by_group": by_group}
        }
        return loop.finish(module, epoch, value, details)

    def set_errors(self, wrong: np.ndarray) -> None:
        """The training rows stage 1 got wrong (boolean per training row)."""
        self.error_set = np.flatnonzero(wrong)
        w = np.where(wrong, self.hp["lambda_up"], 1.0)
        self.weight = self.torch.tensor(w, dtype=self.torch.float32, device=self.device)

    def loss(self, forward, x, y, g, e, idx):
        return (self.weight[idx] * self._ce(forward(x)[1], y)).mean()


@ALGORITHMS.register
class DFR(Algorithm):
    name, title = "dfr", "DFR"
    reference = "Kirichenko et al. 2023, 'Last layer re-training is sufficient', DFR^Val_Tr (Sec. 6, Appendix)"
    definition = (
        "take the ERM model's penultimate features; fit an L1 logistic regression on group-balanced "
        "subsets of half the validation split for each C in the grid, pick C by worst-group accuracy "
        "on the other half, refit on the whole validation split, averaging the weights of `retrains` "
        "(20, as the reference's dfr_on_validation_eval) balanced subsets"
    )
    differs = (
        "with --probe linear the 'last layer' is the whole head on frozen backbone features, so no ERM "
        "model is trained first. Standardisation (--probe linear): every fit (C tuning and the 20 re-fits) "
        "and the test features use the training split's mean and std, as the reference's final fits do "
        "(StandardScaler fitted on the training embeddings); the reference's C tuning instead standardises "
        "with its own fit rows' statistics (half of validation). The reference adds as many random "
        "training rows to each re-fit (add_train); ours fits validation rows only. With --probe finetune the "
        "pooled features are not standardised (the fitted head replaces the network's own). The "
        "validation split is consumed by the fit, so validation (and ID, when it is the validation "
        "split) figures of a DFR run are not held out"
    )
    # C is tuned inside the fit (DFR_C_GRID); the re-fit count and split are the reference's, not searched
    hparams = {
        "retrains": HParam(20, RETRAINS_CHECK, FIXED),
        "val_fraction": HParam(0.5, opt.proper_fraction, FIXED),
    }
    default_selection = "worst-group"

    def loss(self, forward, x, y, g, e, idx):  # stage 0 (finetune only): the ERM base model
        return self._ce(forward(x)[1], y).mean()

    def fit(self, loop: StageLoop) -> Any:
        """The base model (an ERM stage kept by validation average; none on a linear probe, whose head is the last
        layer), then one last-layer fit per selection rule on its features: each rule's fit has its own C and log."""
        if loop.learner.kind == "linear":
            module, epoch = loop.new_module(), 0
        else:
            module, epoch, _ = loop.stage(loop.make("erm"), "dfr-base", loop.s.epochs, "average")
        feats, d = loop.features(module), loop.data

        def last_layer(rule: str) -> Any:
            """DFR's last layer chosen by ``rule`` (its C), set on ``module``, as a seed's outcome."""
            oracle = (feats[ORACLE_SPLIT], d.y[ORACLE_SPLIT], d.groups[ORACLE_SPLIT]) if rule == "oracle" else None
            val = (feats[SELECTION_SPLIT], d.y[SELECTION_SPLIT], d.groups[SELECTION_SPLIT])
            w, b, info = dfr_fit(*val, d.n_classes, loop.s.hparams, rule, loop.seed, oracle)
            loop.learner.set_head(module, w, b)
            value = info["C_scores"][str(info["C"])]
            entry = {
                "seed": loop.seed,
                "stage": "dfr-last-layer",
                "epoch": epoch,
                "C": info["C"],
                "selection_value": value,
            }
            return loop.seed_fit(module, epoch, value, {"dfr": info}, [*loop.log, entry])

        others = {rule: last_layer(rule) for rule in loop.s.also}
        mine = last_layer(loop.s.select)
        return loop.seed_fit(module, mine.selected_epoch, mine.selection_value, mine.details, mine.log, others)


DFR_C_GRID: tuple[float, ...] = (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)  # the DFR code's C_OPTIONS
# an L1 penalty: scikit-learn 1.8 spells it l1_ratio=1 (penalty= is deprecated), older versions penalty="l1"
_L1: dict[str, Any] = (
    {"l1_ratio": 1.0} if tuple(int(p) for p in _sklearn_version.split(".")[:2]) >= (1, 8) else {"penalty": "l1"}
)

METHODS: tuple[str, ...] = ALGORITHMS.names()
ALGORITHMS.fix = f"use one of: {', '.join(METHODS)}"
# every algorithm's defaults, from the classes' own `hparams`
HPARAMS: dict[str, dict[str, float]] = {n: {k: h.default for k, h in a.hparams.items()} for n, a in ALGORITHMS.items()}


@dataclass(frozen=True)
class AlgorithmInfo:
    """What one algorithm is, for cards and docs."""

    name: str
    title: str
    reference: str
    definition: str
    differs: str
    default_selection: str
    hparams: dict[str, float]


def algorithm_info(name: str, overrides: Mapping[str, float] | None = None) -> AlgorithmInfo:
    cls = get_algorithm(name)
    return AlgorithmInfo(
        cls.name,
        cls.title,
        cls.reference,
        cls.definition,
        cls.differs,
        cls.default_selection,
        resolve_hparams(name, overrides),
    )


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm called ``name`` (an unknown name is refused with a did-you-mean: core.registry)."""
    return ALGORITHMS.get(name)


def resolve_hparams(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The method's defaults with ``overrides`` (numbers, or their text from a command line); an unknown
    hyper-parameter or a value outside its declared range (a NaN, inf, 1.5 where an integer is meant) is refused."""
    get_algorithm(name)
    hp = dict(HPARAMS[name])
    for key, value in (overrides or {}).items():
        if key not in hp:
            known = ", ".join(hp) or "none"
            raise UnknownNameError(f"method {name} has no hyper-parameter {key!r}", f"its hyper-parameters: {known}")
        hp[key] = ALGORITHMS[name].hparams[key].check(value, f"{name}.{key}")
    return hp


def seed_hash(*args: Any) -> int:
    """DomainBed's seed derivation, as its ``domainbed/lib/misc.py`` defines it::

    def seed_hash(*args):
        \"\"\"Derive an integer hash from all args, for use as a random seed.\"\"\"
        args_str = str(args)
        return int(hashlib.md5(args_str.encode("utf-8")).hexdigest(), 16) % (2**31)
    """
    return int(hashlib.md5(str(args).encode("utf-8")).hexdigest(), 16) % (2**31)


def sample_hparams(name: str, draw: int, seed: int = 0, trial: int = 0) -> dict[str, float]:
    """Draw ``draw`` of ``name``'s random search for trial (training seed) ``trial``: draw 0 is the defaults (as
    DomainBed's hparams_seed 0), later draws come from each hyper-parameter's :class:`Dist` and the loop's
    :data:`SWEEP_COMMON` (keys ``lr``, ``weight_decay`` beside the method's); deterministic in (method, draw,
    seed, trial); ``draw`` is below :data:`HPARAM_DRAWS_MAX`.

    Seeded as DomainBed does (facebookresearch/DomainBed, ``domainbed/scripts/train.py`` and
    ``domainbed/hparams_registry.py``)::

        hparams = hparams_registry.random_hparams(args.algorithm, args.dataset,
            misc.seed_hash(args.hparams_seed, args.trial_seed))
        # and inside, for each hyper-parameter `name`:
        random_state = np.random.RandomState(misc.seed_hash(random_seed, name))

    so each trial of a draw gets its own values, and a spread over trials includes the search's variance. Ours:
    hparams_seed = ``draw``, trial_seed = ``trial``; ``seed`` (our ``--hparams-seed``, which DomainBed has not)
    enters the hash only when it is not 0, so seed 0 gives DomainBed's seeds. Where ours differs: the
    distributions (:class:`Dist`, declared on each algorithm) and the hyper-parameters' names are ours.
    """
    get_algorithm(name)
    draw, trial, seed = opt.non_negative_int(draw, "draw"), opt.seed(trial, "trial"), opt.seed(seed, "seed")
    if draw >= HPARAM_DRAWS_MAX:
        raise opt.OptionError(
            f"hyper-parameter draw {draw} is past the {HPARAM_DRAWS_MAX} draws one search may make",
            f"ask for at most {HPARAM_DRAWS_MAX} draws (--n-hparams {HPARAM_DRAWS_MAX})",
        )
    if draw == 0:
        return dict(HPARAMS[name])
    random_seed = seed_hash(draw, trial) if seed == 0 else seed_hash(seed, draw, trial)

    def state(key: str) -> np.random.RandomState:
        return np.random.RandomState(seed_hash(random_seed, key))

    out = {k: h.check(h.dist.draw(state(k), h.default), f"{name}.{k}") for k, h in ALGORITHMS[name].hparams.items()}
    out.update({k: dist.draw(state(k), 0.0) for k, dist in SWEEP_COMMON.items()})
    return out


def dead_schedules(algo: "Algorithm") -> dict[str, int]:
    """The scheduled hyper-parameters of ``algo`` that would never take effect in its run (switch step >= the
    run's updates), so the loop can warn: {name: step}."""
    return {k: v for k, v in algo.schedule().items() if v >= algo.total_steps}


def default_selection(name: str) -> str:
    return get_algorithm(name).default_selection


def selection_score(correct: np.ndarray, groups: np.ndarray, rule: str) -> float:
    """Average or worst-group accuracy of ``correct`` (bool per row) with ``groups`` (label per row); the worst
    group is the scoring core's one rule (:func:`metashift_hf.scoring.groups.worst`)."""
    if rule == "average":
        return float(np.mean(correct))
    return worst(group_scores(groups, correct, split="")).accuracy


def balanced_batches(keys: np.ndarray, batch_size: int, n_steps: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n_steps`` batches drawing equally from each key (group or environment), each key cycling through
    its own shuffled rows; the batch's remainder goes to keys in a rotating order."""
    members = [np.flatnonzero(keys == k) for k in np.unique(keys)]
    orders = [rng.permutation(m) for m in members]
    pos = [0] * len(members)
    out = []
    for step in range(n_steps):
        base, extra = divmod(batch_size, len(members))
        batch = []
        for j in range(len(members)):
            take = base + (1 if (j - step) % len(members) < extra else 0)
            for _ in range(take):
                if pos[j] == len(orders[j]):
                    orders[j], pos[j] = rng.permutation(members[j]), 0
                batch.append(orders[j][pos[j]])
                pos[j] += 1
        out.append(np.asarray(batch, dtype=np.int64))
    return out


def dfr_fit(
    x_val: np.ndarray,
    y_val: np.ndarray,
    g_val: np.ndarray,
    n_classes: int,
    hp: Mapping[str, float],
    rule: str,
    seed: int,
    oracle: "tuple[np.ndarray, np.ndarray, np.ndarray] | None" = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """DFR^Val_Tr on held-out features: returns the head (weight (k, d), bias (k,)) and what was chosen.

    ``rule`` picks C: 'worst-group' (default) or 'average' on the other half of validation; 'oracle'
    picks it on ``oracle`` = (x, y, groups) of the test split.
    """
    from sklearn.linear_model import LogisticRegression  # only DFR needs it

    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y_val))
    cut = int(round(len(idx) * hp["val_fraction"]))
    fit_idx, tune_idx = np.sort(idx[:cut]), np.sort(idx[cut:])

    def balanced(rows: np.ndarray) -> np.ndarray:
        gs = g_val[rows]
        n = min(int((gs == v).sum()) for v in np.unique(gs))
        return np.sort(np.concatenate([rng.choice(rows[gs == v], n, replace=False) for v in np.unique(gs)]))

    def fit(rows: np.ndarray, c: float, repeats: int) -> tuple[np.ndarray, np.ndarray]:
        ws, bs = [], []
        for _ in range(repeats):
            sub = balanced(rows)
            if len(np.unique(y_val[sub])) < 2:
                raise UnknownNameError(
                    "DFR: a group-balanced subset of the validation split holds a single class",
                    "use a task whose validation split has every class (and more rows)",
                )
            # liblinear shuffles the rows; without random_state it draws from numpy's global state, so two
            # identical runs differed by ~1e-5 in the head (the reference leaves it unset)
            clf = LogisticRegression(C=c, solver="liblinear", max_iter=1000, random_state=seed, **_L1)
            clf.fit(x_val[sub], y_val[sub])
            w = np.zeros((n_classes, x_val.shape[1]))
            b = np.zeros(n_classes)
            if len(clf.classes_) == 2:  # sklearn's binary model: one row, the logit of classes_[1]
                w[clf.classes_[1]], b[clf.classes_[1]] = clf.coef_[0], clf.intercept_[0]
            else:
                w[clf.classes_], b[clf.classes_] = clf.coef_, clf.intercept_
            ws.append(w)
            bs.append(b)
        return np.mean(ws, axis=0), np.mean(bs, axis=0)

    def score(w, b, x, y, g) -> float:
        return selection_score((x @ w.T + b).argmax(1) == y, g, "average" if rule == "average" else "worst-group")

    tried = {}
    for c in DFR_C_GRID:
        w, b = fit(fit_idx, c, 1)
        tried[c] = (
            score(w, b, *oracle)
            if rule == "oracle" and oracle is not None
            else score(w, b, x_val[tune_idx], y_val[tune_idx], g_val[tune_idx])
        )
    best_c = max(DFR_C_GRID, key=lambda c: (tried[c], -DFR_C_GRID.index(c)))  # ties: the earlier (larger) C
    w, b = fit(np.arange(len(y_val)), best_c, int(hp["retrains"]))
    return (
        w.astype(np.float32),
        b.astype(np.float32),
        {
            "C": best_c,
            "C_scores": {str(c): v for c, v in tried.items()},
            "fit_rows": int(cut),
            "tune_rows": int(len(idx) - cut),
        },
    )


__all__ = [
    "ALGORITHMS",
    "StageLoop",
    "SELECTION_SPLIT",
    "ORACLE_SPLIT",
    "METHODS",
    "HPARAMS",
    "DFR_C_GRID",
    "SELECTIONS",
    "SELECTION_TEXT",
    "SAMPLINGS",
    "SAMPLING_TEXT",
    "Algorithm",
    "AlgorithmInfo",
    "algorithm_info",
    "get_algorithm",
    "resolve_hparams",
    "default_selection",
    "selection_score",
    "balanced_batches",
    "dfr_fit",
    "Dist",
    "HParam",
    "SWEEP_COMMON",
    "sample_hparams",
    "seed_hash",
    "hparam_draws",
    "HPARAM_DRAWS_MAX",
    "RETRAINS_MAX",
    "dead_schedules",
    "PAPER_SAMPLING",
    "ERM",
    "Reweight",
    "GroupDRO",
    "IRM",
    "CORAL",
    "Mixup",
    "JTT",
    "DFR",
]
