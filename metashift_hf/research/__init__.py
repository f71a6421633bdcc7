"""The research loop on a task: scoring any predictions (``score``, ``evaluator``), cached backbone
features, the algorithm registry and its training loop (``algorithms``, ``fitting``, ``train``),
context bugs, and the experiments (the paper's two, method comparison, shift levels, clustered OOD
sets, training conflicts).

A layer of its own (pyproject.toml, import-linter): it reads tasks through ``metashift_hf.hub.task_open``
and models through ``metashift_hf.models``; nothing below it imports it. ``metashift_hf.score`` and
``metashift_hf.Evaluator`` are the package-level names of :func:`metashift_hf.research.score.score`
and :class:`metashift_hf.research.evaluator.Evaluator`.
"""
