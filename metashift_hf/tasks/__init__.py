"""Task planning: an artifact in, task plans out.

A task id names one family of the registry (:mod:`.families`); the family plans its splits
(:mod:`.shifts`, :mod:`.paper_tasks`, :mod:`.levels` + :mod:`.level_plans`, :mod:`.coco_tasks`,
:mod:`.match_artifact`) into a :class:`.plan.TaskPlan` whose typed, versioned shift spec
(:mod:`.spec`) records the design and the shift measured from its rows (:mod:`.measured`).
:mod:`.metashift` is the ``datasets`` builder that turns a plan into rows of original JPEG bytes.
The artifact these plans read is built below, in ``metashift_hf.builders``.
"""
