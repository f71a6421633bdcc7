"""The one scoring core below ``research`` and ``evaluate`` (issue 25 part 2).

Arrays in (which rows are correct, and the rows' groups), one table of group scores out: the same
Wilson interval (:mod:`.stats`), worst-group rule, ID/OOD comparison and context-bug test for
``score``, ``Evaluator.eval``, ``evaluate``, ``bugs`` and the zoo, and one ``per_group.csv`` schema
(:mod:`.per_group`); one split summary with the chance baseline (:mod:`.summary`). Split order and roles live beside the task plan (``metashift_hf.tasks.splits``).
"""
